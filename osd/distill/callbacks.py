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
TIMING_KEYS = (
    "update_time_share",
    "background_update_share",
    "serve_time_s",
)  # measured time in online entries
WANDB_HOST = "api.wandb.ai"


class MetricsJsonlCallback(TrainerCallback):
    """Appends `{"step", "epoch", **logs}` to `{output_dir}/metrics.jsonl` at every log, flushed per line.

    The file always matches the run: a fresh start (global_step 0) truncates it; a resume keeps the
    `resume_lines` lines written before its checkpoint was saved (set by the trainer from the
    checkpoint; without it, the lines up to the resumed step), so what the interrupted run logged
    after its checkpoint (and a line torn by a crash) is dropped and nothing is duplicated.
    `lines` counts the lines of the file: a checkpoint records it.
    """

    def __init__(self) -> None:
        self._file: IO[str] | None = None
        self.lines = 0
        self.resume_lines: int | None = None

    def _open(self, args: TrainingArguments) -> IO[str]:
        if self._file is None:
            path = Path(args.output_dir) / METRICS_FILE
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("a", encoding="utf-8")
        return self._file

    def restart(self, args: TrainingArguments, global_step: int) -> None:
        """Trim the file to the run resumed at global_step (0: a fresh start) and reopen it."""
        if self._file is not None:
            self._file.close()
            self._file = None
        path = Path(args.output_dir) / METRICS_FILE
        kept: list[str] = []
        if global_step > 0 and path.exists():
            lines = path.read_text(encoding="utf-8").splitlines()
            if self.resume_lines is not None:
                kept = lines[: self.resume_lines]
            else:
                kept = [line for line in lines if _step_of(line) <= global_step]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
        self.lines = len(kept)
        self._open(args)

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs
    ) -> None:
        if state.is_world_process_zero:
            self.restart(args, state.global_step)

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
        self.lines += 1

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


def read_jsonl(path: str | Path) -> list[dict]:
    """The entries of a JSON-lines file. A torn last line (a crash while it was written) is skipped
    with a warning; an unreadable line elsewhere is an error naming the file and line."""
    path = Path(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    entries = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError as e:
            if number < len(lines):
                raise ValueError(f"{path}, line {number}: not JSON ({e.msg}); the file is damaged") from None
            logger.warning("%s, line %d: torn last line ignored (the run was interrupted)", path, number)
    return entries


def read_metrics(output_dir: str | Path) -> list[dict]:
    """All entries of `{output_dir}/metrics.jsonl`, in order."""
    return read_jsonl(Path(output_dir) / METRICS_FILE)


def reproducible(entries: list[dict]) -> list[dict]:
    """metrics.jsonl entries without what differs between two runs of one command: timings, and
    Trainer's end-of-train summary (its train_loss averages the steps of the last train() call only)."""
    return [{k: v for k, v in e.items() if k not in TIMING_KEYS} for e in entries if "train_runtime" not in e]


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
