"""Shared fixtures: no network, tiny random models built locally."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

# Tiny test models gain nothing from intra-op threads, and on a busy 2-core machine the
# threads' spin-waiting makes every forward several times slower.
torch.set_num_threads(1)


@pytest.fixture(autouse=True, scope="session")
def datasets_cache(tmp_path_factory) -> Path:
    """A `datasets` cache of this session's own (arrow files, Dataset.map results, hub datasets cached
    by tests), for this process and the subprocesses tests start."""
    import datasets.config

    cache = tmp_path_factory.mktemp("hf_datasets_cache")
    os.environ["HF_DATASETS_CACHE"] = str(cache)
    datasets.config.HF_DATASETS_CACHE = cache
    return cache
