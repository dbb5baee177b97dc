"""Atomic checkpoints: written to `incomplete/checkpoint-N`, committed with a manifest `osd_checkpoint.json`
(files and sizes, step, identity, metrics lines) written last and renamed to `checkpoint-N`; resume
takes the newest complete one (osd.distill.run_dir has the policy)."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

MANIFEST_NAME = "osd_checkpoint.json"
STAGING_DIR = "incomplete"  # checkpoints being written: {output_dir}/incomplete/checkpoint-N
LAST = ("last", "true")  # --resume_from_checkpoint values meaning "the newest complete checkpoint"
CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed (incomplete, torn, or another run's)."""


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    global_step: int
    identity: dict
    metrics_lines: int  # lines of metrics.jsonl written when the checkpoint was saved


def read_checkpoint(path: str | Path) -> Checkpoint:
    """A complete checkpoint (its manifest and every file it lists, at the listed size), else CheckpointError."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"--resume_from_checkpoint {path}: no such folder")
    try:
        manifest = json.loads((path / MANIFEST_NAME).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(
            f"{path} is incomplete: no {MANIFEST_NAME} (interrupted while written, or by an older version)"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise CheckpointError(f"{path} is incomplete: {MANIFEST_NAME} is torn") from None
    for name, size in manifest["files"].items():
        file = path / name
        if not file.is_file() or file.stat().st_size != size:
            raise CheckpointError(f"{path} is incomplete: {name} is missing or not {size} bytes")
    return Checkpoint(path, manifest["global_step"], manifest["identity"], manifest["metrics_lines"])


def checkpoint_dirs(output_dir: Path) -> list[Path]:
    """checkpoint-N folders of output_dir, newest step first."""
    found = [(int(m[1]), p) for p in output_dir.glob("checkpoint-*") if (m := CHECKPOINT_RE.match(p.name))]
    return [p for _, p in sorted(found, reverse=True) if p.is_dir()]


def newest_complete_checkpoint(output_dir: str | Path) -> Checkpoint | None:
    """The complete checkpoint with the highest step; logs every incomplete one it skips."""
    output_dir = Path(output_dir)
    for staged in sorted((output_dir / STAGING_DIR).glob("checkpoint-*")):
        logger.warning("skipping %s: incomplete (its write was interrupted)", staged)
    for path in checkpoint_dirs(output_dir):
        try:
            return read_checkpoint(path)
        except CheckpointError as e:
            logger.warning("skipping %s", e)
    return None


def resolve_checkpoint(output_dir: str | Path, value: str | bool | None) -> Checkpoint | None:
    """--resume_from_checkpoint: None/False -> None; True, 'last', 'True' -> the newest complete
    checkpoint of output_dir (an error when there is none); otherwise the complete checkpoint at that path."""
    if value is None or value is False:
        return None
    if value is True or str(value).lower() in LAST:
        checkpoint = newest_complete_checkpoint(output_dir)
        if checkpoint is None:
            raise CheckpointError(f"--resume_from_checkpoint {value}: no complete checkpoint in {output_dir}")
        return checkpoint
    return read_checkpoint(value)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(folder: Path) -> None:
    for path in sorted(folder.rglob("*"), key=lambda p: -len(p.parts)) + [folder]:  # files before dirs
        _fsync(path)


def commit_checkpoint(
    staged: Path, final: Path, global_step: int, identity: dict, metrics_lines: int
) -> None:
    """Write the manifest into the fully written `staged` folder, flush it to disk, rename it to `final`."""
    files = {str(p.relative_to(staged)): p.stat().st_size for p in sorted(staged.rglob("*")) if p.is_file()}
    manifest = {
        "global_step": global_step,
        "files": files,
        "identity": identity,
        "metrics_lines": metrics_lines,
    }
    (staged / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    _fsync_tree(staged)
    if final.exists():  # a checkpoint of a discarded continuation (resumed from an earlier one)
        shutil.rmtree(final)
    os.replace(staged, final)
    _fsync(final.parent)  # the rename itself
