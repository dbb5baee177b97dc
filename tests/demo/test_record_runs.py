"""bash_scripts/demo/record_runs.sh: runs of the main job copied into a results folder, numbered on, tabulated."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from osd.paths import TINY_DRAFT_PATH, TINY_TEACHER_PATH
from osd.spec.timing import ISA_LIMITS

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bash_scripts" / "demo" / "record_runs.sh"
TINY = ["--target", str(TINY_TEACHER_PATH), "--draft", str(TINY_DRAFT_PATH), "--dtype", "float32",
        "--domains", "sql", "math", "--per_domain", "2", "--tail", "1", "--max_new_tokens", "6"]  # fmt: skip


def record(folder: Path, cwd: Path, runs: Path, modes: str) -> subprocess.CompletedProcess:
    """The script called as from a shell held to AVX2 (its as_is runs must run without the limits)."""
    held = {name: "" for name in ISA_LIMITS} | {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    env = {**os.environ, **held, "ROUNDS": "1", "MODES": modes, "RUNS": str(runs)}
    return subprocess.run(["bash", str(SCRIPT), str(folder), *TINY], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip


@pytest.mark.slow
def test_runs_are_recorded_numbered_on_and_tabulated(tmp_path):
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()  # fmt: skip
    folder, runs = tmp_path / "results", tmp_path / "runs"
    for _ in range(2):  # a second call adds runs beside the first's
        done = record(folder, tmp_path, runs, "held as_is")
        assert done.returncode == 0, done.stderr[-2000:]
    summaries = sorted(p.name for p in folder.glob("summary_*.json"))
    cpu = summaries[0].removeprefix("summary_avx2_held_").removesuffix(f"_{commit}_1.json")
    assert summaries == sorted(
        f"summary_{held}{cpu}_{commit}_{n}.json" for held in ("avx2_held_", "") for n in (1, 2)
    )
    assert (runs / f"avx2_held_{cpu}_{commit}_2" / "summary.json").is_file()
    held = json.loads((folder / f"summary_avx2_held_{cpu}_{commit}_1.json").read_text())["machine"]
    as_is = json.loads((folder / f"summary_{cpu}_{commit}_1.json").read_text())["machine"]
    assert sorted(held["isa_limits"]) == sorted(ISA_LIMITS) and "isa_limits" not in as_is
    tables = done.stdout
    assert "| `summary_avx2_held_" in tables and ", held to AVX2 | 2 |" in tables


def test_an_unknown_mode_is_refused_before_any_run(tmp_path):
    done = record(tmp_path / "results", tmp_path, tmp_path / "runs", "held fast")
    assert done.returncode == 2 and "MODES: 'fast' is neither held nor as_is" in done.stderr
    assert not (tmp_path / "runs").exists()
