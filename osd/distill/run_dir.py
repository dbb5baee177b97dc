"""A run's output folder: what it holds, atomic checkpoints, the run's identity, and the resume policy.

A run writes into --output_dir: `checkpoint-N` folders, `metrics.jsonl`, `run.json` (the identity
of the run that owns the folder), the final model, and last `trainer_state.json` (the run finished).

Checkpoints are atomic (osd.distill.checkpoints): a `checkpoint-N` folder is complete, and resume
takes the newest complete one.

Policy (`plan_run`, before any model is loaded; `open_run` first refuses an --output_dir that is
or lies inside a model or data folder, or is a data file, and locks the folder):
- a folder that holds run outputs is refused unless --resume_from_checkpoint or --overwrite_output_dir;
- --overwrite_output_dir deletes the previous run's outputs (other files, e.g. a stream, are kept);
  it wins over `--resume_from_checkpoint last` (scripts that pass `last` can be told to start over);
- --resume_from_checkpoint PATH resumes from that checkpoint; `last` (or `True`) from the newest
  complete checkpoint of --output_dir, or from step 0 when none was written yet;
- resuming requires the identity (models, data digests, method flags) the folder and checkpoint
  recorded, else it is refused with the differences;
- a finished run (final trainer_state.json at step == max_steps) is not trained further.

A run holds `.osd_run.lock` (an exclusive `fcntl.flock`, which the OS releases when the process
ends, even killed) for its whole life (`lock_run_dir`), so a second run into the same folder, started
beside it or resumed while it runs, is refused with the holder's pid. The file keeps the pid of the
holder; one left by a process that died without releasing it is named and taken over.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import socket
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import TrainingArguments

from osd.conversations import open_conversation_dataset
from osd.datafiles import refuse_overwrite
from osd.distill.callbacks import METRICS_FILE, read_metrics, reproducible
from osd.distill.checkpoints import (
    LAST,
    STAGING_DIR,
    Checkpoint,
    CheckpointError,
    checkpoint_dirs,
    newest_complete_checkpoint,
    read_checkpoint,
)

logger = logging.getLogger(__name__)

RUN_FILE = "run.json"
LOCK_FILE = ".osd_run.lock"  # held by the run writing the folder; its text names the holder
FINAL_STATE = "trainer_state.json"  # written last by osd.train: the run finished
MAP_CACHE_FILE = re.compile(r"^cache-.*\.arrow$")  # what Dataset.map writes beside a saved dataset
# what Trainer and osd.train write at the top of --output_dir (model, tokenizer, state, metrics)
RUN_OUTPUTS = (
    "checkpoint-*", STAGING_DIR, METRICS_FILE, RUN_FILE, FINAL_STATE, "training_args.bin", "config.json",
    "generation_config.json", "*.safetensors", "*.safetensors.index.json", "pytorch_model*.bin",
    "tokenizer*", "special_tokens_map.json", "added_tokens.json", "chat_template.jinja", "vocab.json",
    "merges.txt", "spiece.model", "*_results.json",
)  # fmt: skip
# TrainingArguments that shape the trained weights (DistillTrainingArguments' own flags all count)
TRAJECTORY_FLAGS = (
    "seed", "data_seed", "learning_rate", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon",
    "max_grad_norm", "lr_scheduler_type", "warmup_steps", "warmup_ratio", "per_device_train_batch_size",
    "gradient_accumulation_steps", "bf16", "fp16", "optim",
)  # fmt: skip
NOT_IDENTITY = ("overwrite_output_dir",)


class RunDirError(ValueError):
    """An --output_dir that cannot hold this run: a file, not writable, or in use by another run."""


# ---- identity ------------------------------------------------------------------------------------


def file_digest(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return f"sha256:{digest.hexdigest()}"


def data_digest(source: str, split: str, flag: str) -> str:
    """What a --data_path / --eval_data_path holds: a file's sha256; for a folder, the sha256 of its
    files' names and contents (`Dataset.map` caches aside) and the split; for a hub dataset, its name,
    split and the `datasets` fingerprint of the cached version."""
    path = Path(source)
    if path.is_file():
        return file_digest(path)
    if path.is_dir():
        digest = hashlib.sha256(split.encode())
        for file in sorted(p for p in path.rglob("*") if p.is_file() and not MAP_CACHE_FILE.match(p.name)):
            digest.update(f"{file.relative_to(path).as_posix()}={file_digest(file)}".encode())
        return f"sha256:{digest.hexdigest()}"
    data, name = open_conversation_dataset(source, split, f"--{flag}")
    return f"{name}@{data._fingerprint}"


def _model_ref(path: str | None) -> str | None:
    """A local model folder by its absolute path (the same from any directory), else the hub name."""
    return str(Path(path).resolve()) if path is not None and Path(path).exists() else path


def run_identity(model_args: Any, data_args: Any, training_args: TrainingArguments, **extra: Any) -> dict:
    """What must not change between a run and its resume: models, data contents, method flags."""
    own = {f.name for f in dataclasses.fields(training_args)} - {
        f.name for f in dataclasses.fields(TrainingArguments)
    }
    flags = sorted((own | set(TRAJECTORY_FLAGS)) - set(NOT_IDENTITY))
    identity = {
        "student_model_path": _model_ref(model_args.student_model_path),
        "teacher_model_path": _model_ref(model_args.teacher_model_path),
        "student_dtype": model_args.student_dtype,
        "teacher_dtype": model_args.teacher_dtype,
        "data_path": data_digest(data_args.data_path, data_args.data_split, "data_path"),
        "eval_data_path": (
            data_digest(data_args.eval_data_path, data_args.eval_data_split, "eval_data_path")
            if data_args.eval_data_path
            else None
        ),
        "model_max_length": data_args.model_max_length,
        "max_eval_samples": data_args.max_eval_samples,
        **{flag: getattr(training_args, flag) for flag in flags if hasattr(training_args, flag)},
        **extra,
    }
    return json.loads(json.dumps(identity, default=str))  # as it reads back from a manifest


def identity_diff(recorded: dict, current: dict) -> list[str]:
    """One line per flag whose value differs: `--flag: recorded -> current`."""
    missing = "(not recorded)"
    return [
        f"  --{key}: {recorded.get(key, missing)!r} -> {current.get(key, missing)!r}"
        for key in sorted(recorded.keys() | current.keys())
        if recorded.get(key, missing) != current.get(key, missing)
    ]


def check_identity(recorded: dict, current: dict, source: Path) -> None:
    diff = identity_diff(recorded, current)
    if diff:
        raise CheckpointError(
            f"{source} was written by a run with other settings (recorded -> this command):\n"
            + "\n".join(diff)
            + "\nRerun with the recorded flags and files to resume it, pass --overwrite_output_dir to start "
            "over, or use another --output_dir."
        )


# ---- the output folder ---------------------------------------------------------------------------


def _holder(fd: int) -> str | None:
    """Who the lock file names (`pid N on host H`), None when it is empty."""
    text = os.pread(fd, 200, 0).decode("utf-8", "replace").split()
    return f"process {text[0]} on {text[1]}" if len(text) == 2 else None


@contextmanager
def lock_run_dir(output_dir: str | Path) -> Iterator[Path]:
    """Hold the folder's exclusive lock for the block (creating the folder); RunDirError when it is a
    file, cannot be written, or another live run holds the lock (its pid named)."""
    out = Path(output_dir)
    lock = out / LOCK_FILE
    if out.exists() and not out.is_dir():
        raise RunDirError(f"--output_dir {out} is a file, not a folder; choose a folder for the run")
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise RunDirError(
            f"--output_dir {out}: cannot write there ({e.strerror}); choose another folder"
        ) from e
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd) or "another process"
        os.close(fd)
        raise RunDirError(
            f"--output_dir {out} is in use by a running run ({holder}, lock {lock}); wait for it to end, "
            "or use another --output_dir"
        ) from None
    stale = _holder(fd)
    if stale:
        logger.warning(
            "%s: stale lock of %s, which ended without releasing it (killed?); taken over", lock, stale
        )
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
    try:
        yield out
    finally:
        os.ftruncate(fd, 0)  # released: a lock file with a pid in it now means a dead holder
        os.close(fd)


def run_outputs(output_dir: str | Path) -> list[Path]:
    """What earlier runs wrote at the top of output_dir (saved model subfolders included)."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return []
    found = {p for pattern in RUN_OUTPUTS for p in output_dir.glob(pattern)}
    found |= {p for p in output_dir.iterdir() if p.is_dir() and (p / "config.json").is_file()}
    return sorted(found)


def remove_run_outputs(output_dir: str | Path) -> None:
    for path in run_outputs(output_dir):
        shutil.rmtree(path) if path.is_dir() else path.unlink()
        logger.info("removed %s", path)


def _read_json(path: Path) -> dict | None:
    """A JSON file's content; None when it is missing or torn."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
        return None


def reported_figures(output_dir: str | Path) -> dict[str, Any]:
    """Every figure a finished run reports, less the timings (what two runs of one command share):
    metrics.jsonl, trainer_state.json (its log, train_loss included, and counters) and run.json."""
    output_dir = Path(output_dir)
    state = json.loads((output_dir / FINAL_STATE).read_text(encoding="utf-8"))
    state["log_history"] = reproducible(state["log_history"])
    run = json.loads((output_dir / RUN_FILE).read_text(encoding="utf-8"))
    return {METRICS_FILE: reproducible(read_metrics(output_dir)), FINAL_STATE: state, RUN_FILE: run}


def final_eval(log_history: list[dict], step: int) -> dict[str, float]:
    """The eval metrics logged at `step`, if any (the run's final acceptance rate)."""
    evals = [h for h in log_history if "eval_alpha" in h]
    if not evals or evals[-1]["step"] != step:
        return {}
    return {k: v for k, v in evals[-1].items() if k != "step"}  # as evaluate() returns them


@dataclass
class RunPlan:
    """What a run does with its --output_dir: resume `checkpoint`, or start from step 0 (None)."""

    output_dir: Path
    identity: dict
    checkpoint: Checkpoint | None = None
    finished: dict | None = None  # the final trainer_state.json of a run that ended in this folder
    no_checkpoint: bool = False  # `--resume_from_checkpoint last` found outputs but no complete checkpoint

    def is_finished(self, max_steps: int) -> bool:
        """The folder holds this run, finished at max_steps: nothing is left to do."""
        if self.finished is None or self.finished.get("global_step") != max_steps:
            return False
        logger.warning(
            "%s holds a finished run (step %d = max_steps): nothing to train. Pass a larger --max_steps "
            "to continue it, or --overwrite_output_dir to start over.",
            self.output_dir,
            max_steps,
        )
        return True

    def begin(self, is_main_process: bool = True) -> None:
        """Before training: a start from step 0 removes what an older run left (a resume only its
        final state, written again at the end); then run.json records this run's identity."""
        if not is_main_process:
            return
        if self.no_checkpoint:  # said here, not when planned: a finished run trains nothing
            logger.warning("no complete checkpoint in %s: this run starts from step 0", self.output_dir)
        if self.checkpoint is None:
            remove_run_outputs(self.output_dir)
        else:
            (self.output_dir / FINAL_STATE).unlink(missing_ok=True)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.output_dir / f".{RUN_FILE}.tmp"
        tmp.write_text(json.dumps(self.identity, indent=1), encoding="utf-8")
        os.replace(tmp, self.output_dir / RUN_FILE)


def plan_run(output_dir: str | Path, resume: str | None, overwrite: bool, identity: dict) -> RunPlan:
    """The resume policy (module docstring) for one command; raises CheckpointError / ValueError to refuse."""
    out = Path(output_dir)
    if resume and overwrite and str(resume).lower() not in LAST:
        raise ValueError(
            f"--resume_from_checkpoint {resume} continues that checkpoint, --overwrite_output_dir starts "
            "over: pass one of them"
        )
    outputs = run_outputs(out)
    if overwrite:
        return RunPlan(out, identity)
    if not resume:
        if outputs:
            names = ", ".join(p.name for p in outputs[:6]) + (", ..." if len(outputs) > 6 else "")
            raise ValueError(
                f"--output_dir {out} already holds a run ({names}). Pass --resume_from_checkpoint last to "
                "continue it, --overwrite_output_dir to start over, or use another --output_dir."
            )
        return RunPlan(out, identity)
    recorded = _read_json(out / RUN_FILE)
    if recorded is not None:
        check_identity(recorded, identity, out / RUN_FILE)
    if str(resume).lower() in LAST:
        checkpoint = newest_complete_checkpoint(out)
        if checkpoint is None and checkpoint_dirs(out):
            raise CheckpointError(
                f"--resume_from_checkpoint {resume}: no complete checkpoint in {out}, only incomplete ones "
                f"({', '.join(p.name for p in checkpoint_dirs(out))}); remove them or pass --overwrite_output_dir"
            )
    else:
        checkpoint = read_checkpoint(resume)
    if checkpoint is not None:
        check_identity(checkpoint.identity, identity, checkpoint.path)
    finished = _read_json(out / FINAL_STATE)
    if finished is not None and checkpoint is not None and checkpoint.global_step > finished["global_step"]:
        finished = None  # checkpoints past the end of an earlier, shorter run
    no_checkpoint = checkpoint is None and bool(outputs) and str(resume).lower() in LAST
    return RunPlan(out, identity, checkpoint, finished, no_checkpoint)


@contextmanager
def open_run(
    model_args: Any, data_args: Any, training_args: TrainingArguments, identity: dict
) -> Iterator[RunPlan]:
    """The run's folder for the block, before any model loads: no output over an input
    (`refuse_overwrite`), the folder locked by the process that saves (`lock_run_dir`), the plan."""
    out = training_args.output_dir
    inputs = {
        "--student_model_path": model_args.student_model_path,
        "--teacher_model_path": model_args.teacher_model_path,
        "--data_path": data_args.data_path,
        "--eval_data_path": data_args.eval_data_path,
    }
    refuse_overwrite({"--output_dir": out}, inputs)
    with lock_run_dir(out) if training_args.should_save else nullcontext():
        yield plan_run(
            out, training_args.resume_from_checkpoint, training_args.overwrite_output_dir, identity
        )
