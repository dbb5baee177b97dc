"""`torchrun --nproc_per_node 2 -m osd.train --use_cpu True` starts two CPU processes that train as one run
(docs/distillation.md: multi-process runs); without --use_cpu, on a CPU, it is refused with a usage error.

Six records, one per device and step, one epoch: one process takes 6 steps, two processes 3 each.
(Measured the same way: `accelerate launch --multi_gpu --num_processes 2` also starts two, which
meet over gloo on a CPU; `accelerate launch --cpu --num_processes 2` starts one, since its --cpu
path ignores --num_processes unless MPI is configured.)
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from distill_fixtures import QUERIES, build_tokenizer, llama, write_conversations

REPO_ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    not (torch.distributed.is_available() and torch.distributed.is_gloo_available()),
    reason="this torch build has no torch.distributed gloo backend, which CPU multi-process runs need",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    """`torchrun --nproc_per_node 2 -m osd.train` on a tiny pair and six records, into tmp_path/run."""
    tokenizer = build_tokenizer()
    for name, model in (("student", llama(1, 16, seed=1)), ("teacher", llama(2, 32, seed=0))):
        model.save_pretrained(tmp_path / name)
        tokenizer.save_pretrained(tmp_path / name)
    data = write_conversations(tmp_path / "d.json")
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
        "-m", "osd.train",
        "--student_model_path", str(tmp_path / "student"), "--teacher_model_path", str(tmp_path / "teacher"),
        "--data_path", data, "--output_dir", str(tmp_path / "run"), "--report_to", "none", "--max_new_tokens", "4",
        "--per_device_train_batch_size", "1", "--num_train_epochs", "1", "--save_strategy", "no",
        "--eval_on_start", "False", "--disable_tqdm", "True", *extra,
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=170)


@pytest.mark.slow
def test_torchrun_starts_two_cpu_processes(tmp_path):
    run = torchrun(tmp_path, "--use_cpu", "True")
    assert run.returncode == 0, run.stderr[-3000:]
    state = json.loads((tmp_path / "run" / "trainer_state.json").read_text())
    assert state["global_step"] == len(QUERIES) // 2  # each process took half of the records


@pytest.mark.slow
@pytest.mark.skipif(
    torch.cuda.is_available(), reason="with a GPU, transformers runs the processes as one run"
)
def test_torchrun_on_a_cpu_without_use_cpu_is_refused_naming_the_flag(tmp_path):
    # transformers would run each process as a whole run of its own, both into one folder
    run = torchrun(tmp_path)
    assert run.returncode != 0
    assert "the launcher started 2 processes" in run.stderr and "--use_cpu True" in run.stderr
    assert not (tmp_path / "run" / "trainer_state.json").exists()
