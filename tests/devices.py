"""The devices that device-parametrized tests run on: the CPU always, CUDA where this machine has one
(the CUDA cases show as skipped elsewhere; a GPU machine runs them with the same command)."""

from __future__ import annotations

import copy

import pytest
import torch

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")),
]


def on_device(device: str, *models: torch.nn.Module) -> tuple[torch.nn.Module, ...]:
    """Copies of `models` on `device` (shared fixtures stay where they are)."""
    return tuple(copy.deepcopy(m).to(device) for m in models)
