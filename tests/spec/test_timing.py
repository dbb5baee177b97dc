"""osd.spec.timing: what result files record about the machine a timing ran on; a head's step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from osd.spec.eagle3 import Eagle3Head
from osd.spec.lean_llama import LeanLlamaCache
from osd.spec.timing import ISA_LIMITS, draft_step_time, machine, pass_times, prefill_time
from tests.tiny_models import tiny_llama


def test_machine_names_this_processor_its_simd_level_and_torch_settings():
    info = machine()
    assert info["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert info["torch"] == torch.__version__ and info["torch_threads"] == torch.get_num_threads()
    assert info["cpu"] and "gpu" not in info
    json.dumps(info)  # goes into result files as it is


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="reads Linux's /proc/cpuinfo")
def test_machine_reports_bf16_instructions_as_the_kernel_lists_them():
    flags = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    assert machine()["cpu_bf16_instructions"] == sorted(flags & {"avx512_bf16", "amx_bf16"})


def test_machine_records_the_instruction_set_limits_of_an_emulated_cpu(monkeypatch):
    for name in ISA_LIMITS:
        monkeypatch.delenv(name, raising=False)
    assert "isa_limits" not in machine()
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    monkeypatch.setenv("NUMBA_CPU_NAME", "haswell")
    assert machine()["isa_limits"] == {"ONEDNN_MAX_CPU_ISA": "AVX2", "NUMBA_CPU_NAME": "haswell"}


def test_a_heads_step_is_timed_through_the_engines_cache():
    """draft_step_time takes a head (`head_step_time`: a chain step of `HeadSequence`, cropped after each call;
    a failing crop or feed would raise here)."""
    head = Eagle3Head.for_target(tiny_llama(layers=4), torch.arange(40))
    seconds = draft_step_time(head, context=8, reps=3, rounds=1)
    assert 0 < seconds < 1


@pytest.mark.parametrize("reused", [0, 8])
def test_a_prefill_is_timed_over_the_prompt_tokens_after_those_held(reused, monkeypatch):
    """`prefill_time` and `pass_times` feed the prompt's tokens after its first `reused` (held beforehand, untimed)
    at every call: none are taken from the prompt before, the same random prompt though it is."""
    fed = []
    feed = LeanLlamaCache._feed
    monkeypatch.setattr(LeanLlamaCache, "_feed", lambda self, tokens, n: fed.append((len(self), tokens.shape[1])) or feed(self, tokens, n))  # fmt: skip
    model = tiny_llama(seed=1)
    assert prefill_time(model, 12, reused, reps=2) > 0
    held = [(0, reused)] if reused else []
    assert fed == held + [(reused, 12 - reused)] * 3  # one untimed call, then the timed ones
    fed.clear()
    assert all(t > 0 for t in pass_times(model, 12, 2, reps=1, reused=reused))
    assert fed[: len(held) + 1] == held + [(reused, 12 - reused)]
