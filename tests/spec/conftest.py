"""Fixtures for the engine tests."""

from __future__ import annotations

import pytest
from transformers import PreTrainedModel

from tests.spec.references import NOISE
from tests.tiny_models import FAMILIES, draft_from_target, tiny_model


@pytest.fixture(scope="module", params=FAMILIES)
def pair(request) -> tuple[PreTrainedModel, PreTrainedModel]:
    """(draft, target) of each family: a 3-layer random target and the draft its noisy copy, which
    agrees with it sometimes, not always (built once per test module)."""
    target = tiny_model(request.param, layers=3)
    return draft_from_target(target, NOISE[request.param]), target
