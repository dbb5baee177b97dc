"""Shared fixtures: no network, tiny random models built locally."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

# Tiny test models gain nothing from intra-op threads, and on a busy 2-core machine the
# threads' spin-waiting makes every forward several times slower.
torch.set_num_threads(1)
