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


@pytest.mark.parametrize(
    ("dataset", "student", "data", "eval_data"),
    [
        ("sql", "osd/demo/models/t5/draft", "data/local/sql_train.json", "data/local/sql_eval.json"),
        ("finance", "osd/demo/models/t5/draft", "data/local/finance_train.json", "data/local/finance_eval.json"),
        ("gbharti/finance-alpaca", "google/t5-efficient-small", "data/raw_data/gbharti_finance-alpaca_train.json",
         "data/raw_data/gbharti_finance-alpaca_eval.json"),
        ("code_search_net", "google/t5-efficient-small", "data/raw_data/code_search_net_train.json",
         "data/raw_data/code_search_net_test.json"),
        ("code-python", "google/t5-efficient-small", "data/raw_data/code_search_net_train.json",
         "data/raw_data/code_search_net_test.json"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("script", ["t5/offline.sh", "t5/online.sh"])
def test_t5_scripts_pick_models_and_files_by_dataset(
    script, dataset, student, data, eval_data, tmp_path, stub
):
    run = run_script(
        script, ["runs/x", dataset, "student", "forward"], tmp_path, stub, EXTRA_ARGS="--max_steps 3"
    )
    assert run.returncode == 0, run.stderr
    argv = calls(tmp_path)[0]["argv"]
    local = student.startswith("osd/")
    assert flag(argv, "--student_model_path") == (str(ROOT / student) if local else student)
    teacher = str(ROOT / "osd/demo/models/t5/teacher") if local else "google/flan-t5-xl"
    assert flag(argv, "--teacher_model_path") == teacher
    assert flag(argv, "--data_path") == str(ROOT / data)
    if script == "t5/offline.sh":
        assert flag(argv, "--eval_data_path") == str(ROOT / eval_data)
    assert ("--bf16" in argv) != local and flag(argv, "--report_to") == ("none" if local else "wandb")
    assert argv[-2:] == ["--max_steps", "3"]


@pytest.mark.slow
@pytest.mark.parametrize("script", ["t5/offline.sh", "t5/online.sh"])
def test_t5_scripts_run_on_the_t5_demo_pair(script, tmp_path):
    """End to end, with the real python, a few steps on the T5 demo pair's default files."""
    extra = "--max_steps 2 --max_new_tokens 8 --per_device_eval_batch_size 1"
    extra += (
        " --max_eval_samples 2 --eval_steps 1" if script == "t5/offline.sh" else " --online_eval_interval 1"
    )
    # one thread: on a busy 2-core machine two spin-waiting threads took t5/offline.sh from 8 s to 130 s
    run = run_script(
        script, [str(tmp_path / "run"), "sql", "mix_token", "tvd"], tmp_path, None, EXTRA_ARGS=extra,
        OMP_NUM_THREADS="1",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    alphas = [m["eval_alpha"] if "eval_alpha" in m else m.get("alpha") for m in metrics]
    assert any(a is not None and 0 <= a <= 1 for a in alphas), metrics
    assert (tmp_path / "run" / "model.safetensors").exists()


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


def test_bench_online_drafts_records_replays_and_benches_each_domain_and_resumes(tmp_path, stub):
    elsewhere = tmp_path / "elsewhere"
    out = elsewhere / "run"
    (out / "drafts").mkdir(parents=True)
    (out / "rec_sql.safetensors").touch()  # sql's recording and replay done by an earlier run
    (out / "replay_sql.json").touch()
    (out / "rec_math.jsonl").touch()  # math's recording killed before its tensors: recorded again
    result = run_script("online/bench_online_drafts.sh", ["run"], elsewhere, stub, QUERIES="12", TOKENS="8")
    assert result.returncode == 0, result.stderr
    runs = calls(tmp_path)
    assert {c["cwd"] for c in runs} == {str(ROOT)}
    records = {
        flag(c["argv"], "--conversations"): c["argv"] for c in runs if "osd.analysis.record" in c["argv"]
    }
    assert sorted(records) == [f"data/local/{d}_train.json" for d in ("code", "finance", "math")]
    assert all(flag(a, "--limit") == "12" and flag(a, "--max_new_tokens") == "8" for a in records.values())
    replays = [c["argv"] for c in runs if "osd.analysis.online_replay" in c["argv"]]
    assert sorted(flag(a, "--save_draft") for a in replays) == [
        str(out / "drafts" / d) for d in ("code", "finance", "math")
    ]
    assert all(flag(a, "--learning_rate") == "1e-4" and flag(a, "--steps_per_update") == "4" for a in replays)
    (bench,) = [c["argv"] for c in runs if "benchmarks/bench_engine.py" in c["argv"]]
    assert runs[-1]["argv"] == bench  # after every draft
    assert flag(bench, "--data_drafts") == str(out / "drafts" / "{domain}")
    assert flag(bench, "--output") == str(out / "bench_engine.json")
