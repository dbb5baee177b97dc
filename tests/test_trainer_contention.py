"""benchmarks/trainer_contention.py's trainer loop, on the tiny draft: it takes optimizer steps, counted in
a shared int, until told to stop, in a thread as in a spawned process, with torch's AdamW or the fused one."""

from __future__ import annotations

import multiprocessing as mp
import threading
import time

import pytest
import torch
from transformers import AutoModelForCausalLM

from benchmarks.trainer_contention import train_forever
from osd.online.buffer import BufferedQuery
from osd.paths import TINY_DRAFT_PATH


def _query(vocab: int) -> BufferedQuery:
    g = torch.Generator().manual_seed(0)
    return BufferedQuery(
        input_ids=torch.randint(vocab, (6,), generator=g), generated_ids=torch.randint(vocab, (5,), generator=g),
        positions=torch.arange(5), target_logits=torch.randn(5, vocab, generator=g).half(),
    )  # fmt: skip


def _wait_for(steps, at_least: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while steps.value < at_least and time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.mark.parametrize(
    ("kind", "fused"),
    [("thread", False), pytest.param("process", False, marks=pytest.mark.slow), ("thread", True)],
)
def test_the_trainer_steps_until_stopped(kind: str, fused: bool) -> None:
    vocab = AutoModelForCausalLM.from_pretrained(TINY_DRAFT_PATH).config.vocab_size
    spawn = mp.get_context("spawn")
    stop = threading.Event() if kind == "thread" else spawn.Event()
    steps = spawn.Value("i", 0)
    make = threading.Thread if kind == "thread" else spawn.Process
    worker = make(target=train_forever, args=(stop, steps, _query(vocab), str(TINY_DRAFT_PATH), fused))
    worker.start()
    _wait_for(steps, 3)
    stop.set()
    worker.join(timeout=60)
    assert not worker.is_alive()
    assert steps.value >= 3
