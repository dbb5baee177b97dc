"""bash_scripts/: run from any directory, repository files named from the repository root, the
project's .venv python by default, EXTRA_ARGS words kept whole. PYTHON is a stub that records
each call (its arguments and directory) instead of training."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "bash_scripts"


@pytest.fixture
def stub(tmp_path) -> Path:
    """An executable that appends {"argv": [...], "cwd": ...} to calls.jsonl next to it."""
    path = tmp_path / "bin" / "python_stub"
    path.parent.mkdir()
    path.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        f"with open({str(tmp_path / 'calls.jsonl')!r}, 'a') as f:\n"
        "    f.write(json.dumps({'argv': sys.argv[1:], 'cwd': os.getcwd()}) + '\\n')\n"
    )
    path.chmod(0o755)
    return path


def run_script(
    script: str, args: list[str], cwd: Path, stub: Path | None, **env: str
) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "EXTRA_ARGS", "DATA", "EVAL_DATA")}
    if stub is not None:
        environ["PYTHON"] = str(stub)
    environ.update(env)
    return subprocess.run(
        ["bash", str(SCRIPTS / script), *args],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )


def calls(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


@pytest.mark.parametrize(
    ("script", "args", "data"),
    [
        ("gsm8k/offline.sh", ["runs/x", "student", "forward"], "data/raw_data/gsm8k_train_with_answer.json"),
        ("spider/online.sh", ["runs/x"], "data/raw_data/spider_train.json"),
        ("t5/offline.sh", ["runs/x", "gsm8k", "student", "forward"], "data/raw_data/gsm8k_train.json"),
        ("online/sharp.sh", ["runs/x"], "data/sharp.json"),
        ("demo/offline.sh", ["runs/x", "student", "forward"], "data/local/sql_train.json"),
    ],
)
def test_scripts_name_repository_files_from_the_root_from_any_directory(script, args, data, tmp_path, stub):
    run = run_script(script, args, tmp_path, stub)
    assert run.returncode == 0, run.stderr
    (call,) = calls(tmp_path)
    assert call["argv"][:2] == ["-m", "osd.train"] and call["cwd"] == str(tmp_path)
    assert flag(call["argv"], "--data_path") == str(ROOT / data)
    assert flag(call["argv"], "--output_dir") == "runs/x"  # the caller's paths stay the caller's


@pytest.mark.parametrize("script", ["gsm8k/offline.sh", "demo/offline.sh", "t5/offline.sh"])
def test_extra_args_keep_quoted_words(script, tmp_path, stub):
    args = (
        ["runs/x", "gsm8k", "student", "forward"]
        if script.startswith("t5")
        else ["runs/x", "student", "forward"]
    )
    extra = """--run_name "my run" --logging_dir 'a b/c' --max_steps 3"""
    run = run_script(script, args, tmp_path, stub, EXTRA_ARGS=extra)
    assert run.returncode == 0, run.stderr
    argv = calls(tmp_path)[0]["argv"]
    assert argv[-6:] == ["--run_name", "my run", "--logging_dir", "a b/c", "--max_steps", "3"]


def test_extra_args_are_not_executed_and_bad_quotes_are_refused(tmp_path, stub):
    run = run_script(
        "demo/offline.sh", ["o", "student", "forward"], tmp_path, stub, EXTRA_ARGS="--x $(touch pwned)"
    )
    assert run.returncode == 0 and calls(tmp_path)[0]["argv"][-3:] == ["--x", "$(touch", "pwned)"]
    assert not (tmp_path / "pwned").exists()
    run = run_script(
        "demo/offline.sh", ["o", "student", "forward"], tmp_path, stub, EXTRA_ARGS='--run_name "my run'
    )
    assert run.returncode == 2 and "unmatched quote" in run.stderr


def test_demo_online_runs_every_step_with_repository_files(tmp_path, stub):
    run = run_script("demo/online.sh", ["runs/on"], tmp_path, stub)
    assert run.returncode == 0, run.stderr
    prepare, train, plots = (c["argv"] for c in calls(tmp_path))
    assert prepare[0] == str(ROOT / "data" / "prepare_online.py")
    assert f"sql={ROOT / 'data/local/sql_train.json'}" in prepare
    assert flag(train, "--student_model_path") == str(ROOT / "osd/demo/models/draft")
    assert flag(train, "--teacher_model_path") == str(ROOT / "osd/demo/models/target")
    assert plots[:3] == ["-m", "osd.plots", "runs/on/metrics.jsonl"]
    assert flag(train, "--report_to") == "none"


def test_demo_online_reports_to_wandb_on_request(tmp_path, stub):
    run = run_script("demo/online.sh", ["runs/on"], tmp_path, stub, REPORT_TO="wandb")
    assert run.returncode == 0, run.stderr
    assert flag(calls(tmp_path)[1]["argv"], "--report_to") == "wandb"


def test_default_python_is_the_project_venv(tmp_path):
    run = subprocess.run(
        ["bash", "-c", f'source {SCRIPTS / "common/env.sh"}; printf "%s\\n%s" "$PYTHON" "$PYTHONPATH"'],
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k not in ("PYTHON", "PYTHONPATH")},
        capture_output=True,
        text=True,
    )
    python, path = run.stdout.split("\n")
    venv = ROOT / ".venv" / "bin" / "python"
    assert python == (str(venv) if os.access(venv, os.X_OK) else "python")
    assert path == str(ROOT)  # `-m osd.train` imports this checkout from any directory
