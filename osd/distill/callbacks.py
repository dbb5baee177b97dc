"""Metrics that never get lost: every log line in `{output_dir}/metrics.jsonl`, and wandb that never blocks."""

from __future__ import annotations

import json
import logging
import netrc
import os
from pathlib import Path
from typing import IO

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

logger = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
WANDB_HOST = "api.wandb.ai"


class MetricsJsonlCallback(TrainerCallback):
    """Appends `{"step", "epoch", **logs}` to `{output_dir}/metrics.jsonl` at every log, flushed per line.

    On resume (training begins at global_step > 0) lines with a step beyond the resumed step are
    dropped first: they belong to the interrupted run after its last checkpoint and will be logged
    again, so nothing is duplicated.
    """

    def __init__(self) -> None:
        self._file: IO[str] | None = None

    def _open(self, args: TrainingArguments) -> IO[str]:
        if self._file is None:
            path = Path(args.output_dir) / METRICS_FILE
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("a", encoding="utf-8")
        return self._file

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs
    ) -> None:
        if not state.is_world_process_zero:
            return
        path = Path(args.output_dir) / METRICS_FILE
        if state.global_step > 0 and path.exists():
            if self._file is not None:
                self._file.close()
                self._file = None
            kept = [
                line
                for line in path.read_text(encoding="utf-8").splitlines()
                if _step_of(line) <= state.global_step
            ]
            path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
        self._open(args)

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, float] | None = None,
        **kwargs,
    ) -> None:
        if not state.is_world_process_zero or not logs:
            return
        f = self._open(args)
        f.write(json.dumps({"step": state.global_step, "epoch": state.epoch, **logs}, default=float) + "\n")
        f.flush()

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs
    ) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _step_of(line: str) -> float:
    """The step of one metrics.jsonl line; unreadable (half-written) lines sort last and are dropped."""
    try:
        return json.loads(line)["step"]
    except (json.JSONDecodeError, KeyError, TypeError):
        return float("inf")


def read_metrics(output_dir: str | Path) -> list[dict]:
    """All entries of `{output_dir}/metrics.jsonl`, in order."""
    path = Path(output_dir) / METRICS_FILE
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _wandb_key_configured() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators(WANDB_HOST) is not None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False


def setup_wandb(report_to: list[str] | str | None) -> None:
    """When wandb is a reporting target and no API key is configured, log offline (`wandb sync` later).

    An explicit WANDB_MODE set by the user is left alone.
    """
    targets = [report_to] if isinstance(report_to, str) else list(report_to or [])
    if not ("wandb" in targets or "all" in targets) or "WANDB_MODE" in os.environ:
        return
    if not _wandb_key_configured():
        os.environ["WANDB_MODE"] = "offline"
        logger.warning(
            "No wandb API key (WANDB_API_KEY or ~/.netrc): wandb logs offline; run `wandb sync` later."
        )
