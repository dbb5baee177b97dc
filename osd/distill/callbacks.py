"""Metrics that never get lost: every log line in `{output_dir}/metrics.jsonl`; wandb that never blocks
(`setup_wandb`), with the run's models, data and method in its config, a default name and queries served as
the x-axis of the online metrics (`OsdWandbCallback`). Metric names: osd.metric_keys."""

from __future__ import annotations

import copy
import json
import logging
import netrc
import os
import sys
from pathlib import Path
from typing import IO, Any

from tqdm.auto import tqdm
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.integrations import WandbCallback

from osd.distill.config import DistillTrainingArguments
from osd.metric_keys import QUERIES_SERVED, wandb_key
from osd.spec.drafter import save_drafter

logger = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
TIMING_KEYS = (
    "update_time_share",
    "background_update_share",
    "serve_time_s",
    "train_runtime",
    "train_samples_per_second",
    "train_steps_per_second",
)  # measured time: in online entries, and Trainer's end-of-train summary (its runtime and throughput)
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
    """metrics.jsonl entries without what differs between two runs of one command: the timings
    (the end-of-train summary stays, train_loss included: issue 49 found it wrong after a resume)."""
    return [{k: v for k, v in e.items() if k not in TIMING_KEYS} for e in entries]


def wandb_key_configured() -> bool:
    """Whether wandb finds an API key: WANDB_API_KEY, or `wandb login`'s entry in ~/.netrc."""
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
    if not wandb_key_configured():
        os.environ["WANDB_MODE"] = "offline"
        logger.warning(
            "No wandb API key (WANDB_API_KEY or ~/.netrc): wandb logs offline; run `wandb sync` later."
        )


def finish_wandb_run() -> None:
    """End the open wandb run, if any. HF's WandbCallback leaves its run open after training and logs a later
    Trainer's run into an open one: a process that trains twice calls this in between."""
    wandb = sys.modules.get("wandb")
    if wandb is not None and wandb.run is not None:
        wandb.finish()


def run_config(args: DistillTrainingArguments, **entries: Any) -> dict[str, Any]:
    """What a wandb run records about an osd run besides TrainingArguments: the models, the data, the stream
    (in online mode, by default, --data_path), the method. `entries` give the first and add others."""
    config = {"student_model_path": None, "teacher_model_path": None, "data_path": None,
              "eval_data_path": None, "stream": None, "mode": args.mode, "sample_source": args.sample_source,
              "kl_method": args.kl_method, "gamma": args.max_propose_num}  # fmt: skip
    config |= {k: str(v) if isinstance(v, Path) else v for k, v in entries.items()}
    if config["stream"] is None and args.mode == "online":
        config["stream"] = config["data_path"]
    return config


def default_run_name(config: dict[str, Any]) -> str:
    """`{mode}-[{sample_source}-]{kl_method}-g{gamma}-{student}-{teacher}-{stream or data}[-by-{route_by}]`
    from a run_config (the sample source only offline: online mode distils on the served tokens)."""
    data = config["stream"] if config["mode"] == "online" else config["data_path"]
    routed = config.get("route_by")
    parts = [config["mode"], config["sample_source"] if config["mode"] == "offline" else None,
             config["kl_method"], f"g{config['gamma']}", _short(config["student_model_path"]),
             _short(config["teacher_model_path"]), Path(str(data)).stem if data else None,
             f"by-{routed}" if routed else None]  # fmt: skip
    return "-".join(str(p) for p in parts if p)


def _short(model_path: str | None) -> str | None:
    """A model folder's or hub name's last part."""
    return Path(model_path).name if model_path else None


class OsdWandbCallback(WandbCallback):
    """HF's WandbCallback (the same logging: keys as its `rewrite_logs` names them, `train/...` and
    `eval/...`) plus what an osd run needs on wandb: `config` (a `run_config`) in the run's config, a name
    built from it (`default_run_name`) when --run_name is not given, and `define_metric` so that every
    online metric is plotted over `train/queries_served` (evaluation keeps HF's `train/global_step`).
    DistillTrainer puts it in place of the WandbCallback that `--report_to wandb` adds. Everything here is
    local to the wandb run: offline (setup_wandb) it neither blocks nor fails.
    """

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        self.run_config = config
        self._defined: set[str] = set()

    def setup(self, args: TrainingArguments, state: TrainerState, model, **kwargs) -> None:
        # not given: transformers 5 leaves run_name None, 4.x set it to output_dir
        if args.run_name in (None, args.output_dir):
            args = copy.copy(args)
            args.run_name = default_run_name(self.run_config)
        super().setup(args, state, model, **kwargs)
        if state.is_world_process_zero and self._wandb.run is not None:
            self._wandb.config.update(self.run_config, allow_val_change=True)

    def on_log(self, args, state, control, model=None, logs=None, **kwargs) -> None:
        if logs and QUERIES_SERVED in logs and state.is_world_process_zero:
            if not self._initialized:
                self.setup(args, state, model)
            if self._wandb.run is not None:
                self._define_online_metrics(logs)
        super().on_log(args, state, control, model=model, logs=logs, **kwargs)

    def _define_online_metrics(self, logs: dict[str, float]) -> None:
        """Each key of an online entry, the first time it is logged (per-group keys appear with their
        groups), plotted over queries served."""
        x_axis = wandb_key(QUERIES_SERVED)
        for key in map(wandb_key, logs.keys() - {"epoch"}):  # Trainer adds epoch to every entry: its own axis
            if key not in self._defined and "*" not in key:  # a '*' would make a glob
                self._wandb.run.define_metric(key, step_metric=None if key == x_axis else x_axis)
                self._defined.add(key)


class StreamProgress(TrainerCallback):
    """An online run's progress bar over its stream, showing the current dataset and the windowed alpha;
    with `blocks`, the draft saved as it stood once it had learned each dataset block of the stream, to
    {blocks}/<dataset> (`bench_engine --data_drafts`)."""

    def __init__(self, stream: list[dict], blocks: Path | None, lag: int) -> None:
        self.stream, self.blocks, self.bar = stream, blocks, None
        ends = [
            i
            for i, r in enumerate(stream)
            if i + 1 == len(stream) or stream[i + 1]["dataset"] != r["dataset"]
        ]
        # after step n the draft holds the updates on queries 0..n-1-lag (a background update lands a step later)
        self.due = {min(i + 1 + lag, len(stream)): stream[i]["dataset"] for i in ends}

    def on_train_begin(self, args, state, control, **kwargs):
        self.bar = tqdm(total=len(self.stream), desc="serving + distilling", unit="query")

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        self.bar.update(1)
        domain = self.due.get(state.global_step)
        if self.blocks is not None and domain is not None:
            save_drafter(model, self.blocks / domain)
            processing_class.save_pretrained(self.blocks / domain)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and logs.get("alpha_window") is not None:
            domain = self.stream[min(state.global_step, len(self.stream)) - 1]["dataset"]
            self.bar.set_postfix(domain=domain, alpha=f"{logs['alpha_window']:.3f}")

    def on_train_end(self, args, state, control, **kwargs):
        self.bar.close()
