"""Offline wandb runs in tests: a run written under a test folder, read back with wandb's own reader of
its `.wandb` file (`wandb leet inspect --json`: one JSON record per line, as wandb 0.31 writes them)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def offline_wandb(folder: Path) -> Iterator[None]:
    """WANDB_MODE=offline and WANDB_DIR=folder inside; the run is finished (flushed) on leaving, and
    wandb's process-wide settings torn down (it reads WANDB_DIR once per process otherwise)."""
    import wandb

    with pytest.MonkeyPatch.context() as env:
        env.setenv("WANDB_MODE", "offline")
        env.setenv("WANDB_DIR", str(folder))
        env.setenv("WANDB_SILENT", "true")
        try:
            yield
        finally:
            wandb.finish()  # HF's WandbCallback leaves the run open after training
            wandb.teardown()


def offline_runs(folder: Path) -> list[Path]:
    """The offline runs written under `folder`, oldest first."""
    return sorted((Path(folder) / "wandb").glob("offline-run-*"))


def run_records(folder: Path) -> list[dict]:
    """The records of the one offline run under `folder`."""
    (run,) = offline_runs(folder)
    return read_run(run)


def read_run(run: Path) -> list[dict]:
    """The records of one offline run folder."""
    out = subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(run)],
        check=True, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def run_config(records: list[dict]) -> dict:
    """The run's config: its init config and every later update, merged."""
    config: dict = {}
    for r in records:
        if r["type"] in ("run", "config"):
            config |= (r["run"]["config"] if r["type"] == "run" else r["config"]).get("update", {})
    return config


def run_name(records: list[dict]) -> str:
    return [r["run"]["display_name"] for r in records if r["type"] == "run"][-1]


def history(records: list[dict]) -> list[dict]:
    """The logged rows, in order."""
    return [r["history"]["item"] for r in records if r["type"] == "history"]


def step_metrics(records: list[dict]) -> dict[str, str | None]:
    """{metric: its x-axis} of every metric defined by name (define_metric)."""
    return {r["metric"]["name"]: r["metric"].get("step_metric") for r in records
            if r["type"] == "metric" and "name" in r["metric"]}  # fmt: skip
