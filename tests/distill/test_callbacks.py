"""metrics.jsonl (flushed per line, trimmed on resume) and wandb that never blocks."""

from __future__ import annotations

import json
import os

import pytest
from transformers import TrainerControl, TrainerState

from osd.distill.callbacks import (
    METRICS_FILE,
    MetricsJsonlCallback,
    OsdWandbCallback,
    read_metrics,
    run_config,
    setup_wandb,
)
from osd.distill.config import DistillTrainingArguments
from tests.wandb_offline import offline_wandb, run_records
from tests.wandb_offline import run_config as wandb_config
from tests.wandb_offline import run_name as run_name_of


def _args(tmp_path) -> DistillTrainingArguments:
    return DistillTrainingArguments(output_dir=str(tmp_path), report_to="none")


def test_each_log_is_a_flushed_line(tmp_path):
    callback, args, state = MetricsJsonlCallback(), _args(tmp_path), TrainerState()
    callback.on_train_begin(args, state, TrainerControl())
    state.global_step, state.epoch = 3, 0.5
    callback.on_log(args, state, TrainerControl(), logs={"loss": 1.25})
    # readable before the file is closed: a crash loses nothing already logged
    assert read_metrics(tmp_path) == [{"step": 3, "epoch": 0.5, "loss": 1.25}]


def test_resume_drops_lines_after_the_checkpoint(tmp_path):
    lines = [{"step": s, "loss": float(s)} for s in (0, 1, 2, 3, 4)]
    (tmp_path / METRICS_FILE).write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"step": 5, "lo')
    callback, args = MetricsJsonlCallback(), _args(tmp_path)
    state = TrainerState()
    state.global_step = 2  # resumed from checkpoint-2
    callback.on_train_begin(args, state, TrainerControl())
    state.global_step = 3
    callback.on_log(args, state, TrainerControl(), logs={"loss": 30.0})
    assert read_metrics(tmp_path) == lines[:3] + [{"step": 3, "epoch": state.epoch, "loss": 30.0}]


def test_wandb_goes_offline_without_a_key(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    setup_wandb(["wandb"])
    assert os.environ["WANDB_MODE"] == "offline"


def test_wandb_left_alone_with_a_key_or_an_explicit_mode(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password secret\n")
    (tmp_path / ".netrc").chmod(0o600)
    setup_wandb("wandb")
    assert "WANDB_MODE" not in os.environ
    monkeypatch.setenv("WANDB_MODE", "disabled")
    setup_wandb(["wandb"])
    assert os.environ["WANDB_MODE"] == "disabled"
    monkeypatch.delenv("WANDB_MODE")
    setup_wandb([])  # --report_to none
    assert "WANDB_MODE" not in os.environ


@pytest.mark.parametrize(
    ("run_name", "expected"),
    [
        ("mine", "mine"),
        (None, "offline-student-forward-g5-s-t-d"),
        ("OUT", "offline-student-forward-g5-s-t-d"),
    ],
)
def test_wandb_run_name_is_built_unless_given(tmp_path, run_name, expected):
    """None (transformers 5) and output_dir (4.x's default) both mean --run_name was not given."""
    args = DistillTrainingArguments(output_dir=str(tmp_path), report_to="wandb",
                                    run_name=str(tmp_path) if run_name == "OUT" else run_name)  # fmt: skip
    config = run_config(
        args, student_model_path="hub/s", teacher_model_path=str(tmp_path / "t"), data_path="x/d.json"
    )
    with offline_wandb(tmp_path):
        OsdWandbCallback(config).setup(args, TrainerState(), model=None)
    records = run_records(tmp_path)
    assert run_name_of(records) == expected
    assert args.run_name == (str(tmp_path) if run_name == "OUT" else run_name)  # the caller's args untouched
    assert wandb_config(records)["student_model_path"] == "hub/s" and wandb_config(records)["stream"] is None
