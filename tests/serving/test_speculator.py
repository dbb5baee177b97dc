"""vLLM's speculative method is chosen from the drafter's folder (no vLLM needed)."""

from __future__ import annotations

import json

import pytest

from osd.paths import TINY_DRAFT_PATH, TINY_TEACHER_PATH
from osd.serving.speculator import speculative_method
from osd.spec.eagle3 import Eagle3Head, save_head
from tests.tiny_models import tiny_model


def test_a_saved_head_is_served_as_eagle3_any_other_model_as_a_draft(tmp_path) -> None:
    head = save_head(Eagle3Head.for_target(tiny_model("llama", layers=4)), tmp_path / "head")
    assert speculative_method(str(head)) == "eagle3"
    assert (
        speculative_method(str(TINY_DRAFT_PATH))
        == speculative_method(str(TINY_TEACHER_PATH))
        == "draft_model"
    )
    assert speculative_method("HuggingFaceTB/SmolLM2-135M") == "draft_model"  # a hub id


def test_another_speculators_type_is_refused_naming_the_file(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"speculators_model_type": "mlp_speculator"}))
    with pytest.raises(ValueError, match=r"config.json: speculators_model_type 'mlp_speculator'"):
        speculative_method(str(tmp_path))
