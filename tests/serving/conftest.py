"""What the real-engine tests share (test_engine.py, test_head_engine.py): the prompts, and the target's greedy
outputs without speculation, which every speculative run must reproduce. vLLM is imported inside the fixtures:
this file also loads where vLLM is not installed."""

from __future__ import annotations

import os

import pytest

MAX_NEW = 40  # tokens per request
GAMMA = 3  # tokens proposed per step
SWAP_LIMIT_S = (
    5.0  # a bound for a loaded CI machine; the target, 0.3 s idle, is measured by bench_vllm
)

for name, value in (  # one thread, no core pinning, a 1 GiB KV cache: the machine is shared
    ("OMP_NUM_THREADS", "1"),
    ("VLLM_CPU_OMP_THREADS_BIND", "nobind"),
    ("VLLM_CPU_KVCACHE_SPACE", "1"),
):
    os.environ.setdefault(name, value)


@pytest.fixture(scope="session")
def prompts() -> list[list[int]]:
    from transformers import AutoTokenizer

    from osd.conversations import load_conversations, user_query
    from osd.paths import TINY_TEACHER_PATH, workload_path
    from osd.prompting import encode_prompt

    tokenizer = AutoTokenizer.from_pretrained(TINY_TEACHER_PATH)
    records = [r for domain in ("sql", "math") for r in load_conversations(workload_path(domain, "eval"))[:4]]
    return [encode_prompt(tokenizer, user_query(r)) for r in records]


@pytest.fixture(scope="session")
def target_only(prompts) -> list[list[int]]:
    """Greedy outputs of vLLM without speculation. Built before any speculative engine: a new engine unregisters
    the Prometheus counters of the engines before it (`llm.get_metrics()` reads one process-wide registry)."""
    from osd.paths import TINY_TEACHER_PATH
    from osd.serving.engine import build_engine, sampling_params, serve_all, shutdown_engine

    llm = build_engine(str(TINY_TEACHER_PATH), None, 0, "float32", 512)
    outputs = [s.token_ids for s in serve_all(llm, prompts, sampling_params(MAX_NEW, 0.0), len(prompts))]
    shutdown_engine(llm)
    return outputs
