"""bash_scripts/gpu/: the two prepared GPU checks rehearsed on the CPU (DRY_RUN=1), so that CI keeps them
working between GPU loans: every Python stage passes with the tiny pair and writes its table; llama.cpp's
build, conversions and runs are recorded with their commands and its report is computed from a fixture."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def dry_run(script: str, tmp_path: Path, *flags: str) -> tuple[dict, str]:
    """Run bash_scripts/gpu/{script} with DRY_RUN=1 (and `flags`); its results.json and results.md."""
    out = tmp_path / "out"
    command = [
        "bash",
        str(ROOT / "bash_scripts" / "gpu" / script),
        str(out),
        "--work_dir",
        str(tmp_path / "work"),
        *flags,
    ]
    env = {**os.environ, "DRY_RUN": "1", "PYTHON": sys.executable}
    # the limit is above a rehearsal's budget (osd.stages.check_limits), which ends its stages first
    run = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=2000)
    assert run.returncode == 0, run.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["log.txt", "results.json", "results.md"]
    return json.loads((out / "results.json").read_text()), (out / "results.md").read_text()


@pytest.mark.slow
def test_python_checks_pass_every_stage_on_the_cpu_and_write_their_tables(tmp_path):
    results, markdown = dry_run("python_checks.sh", tmp_path)
    stages = {s["name"]: s for s in results["stages"]}
    assert results["pair"] == "tiny" and results["device"] == "cpu"
    assert list(stages) == ["cuda_tests", "gpu_scale", "main_job", "bench_standard", "bench_online"]
    assert {s["status"] for s in stages.values()} == {"passed"}, {n: s["note"] for n, s in stages.items()}
    tests = stages["cuda_tests"]["figures"]
    assert (
        tests["skipped"] > 20 and tests["passed"] == tests["failed"] == 0
    )  # collected, and skipped without CUDA
    scale = stages["gpu_scale"]["figures"]
    assert scale["runs"]["online"]["updates"] == 2 and scale["runs"]["standard"]["updates"] == 0
    assert len(scale["eq2_prediction"]) == 8 and sorted(scale["costs"]["verify_cost"]) == [
        str(k) for k in range(1, 9)
    ]
    main_job = stages["main_job"]["figures"]
    assert [r["domain"] for r in main_job["domains"]] == ["sql", "math", "code", "finance", "all"]
    assert set(main_job["measured_over_eq2"]) == {"standard", "online"}
    for name in ("bench_standard", "bench_online"):
        methods = [r["method"] for r in stages[name]["figures"]["rows"]]
        assert {"target only (HF generate)", "HF assisted generation", "osd.spec"} <= set(methods)
    assert (
        f"--draft {tmp_path / 'work' / 'main_job' / 'draft'} " in stages["bench_online"]["command"]
    )  # the main job's
    for header in ("| passed | failed | skipped |", "| target step, ms | draft step, ms | c |",
                   "| domain | draft | alpha (CPU) | Eq. 2 at gamma 3 |", "| domain | Standard alpha | online alpha |",
                   "| method | tokens_per_s | alpha |", "measured / Eq. 2: Standard"):  # fmt: skip
        assert header in markdown


def test_llamacpp_check_records_its_commands_and_reports_a_fixture(tmp_path):
    # no main job ran here, whatever a checkout's outputs/ holds: the Standard draft alone
    results, markdown = dry_run("llamacpp.sh", tmp_path, "--online_run", str(tmp_path / "no_main_job"))
    stages = {s["name"]: s for s in results["stages"]}
    assert (
        results["pair"] == "tiny" and results["dry_run"] and results["budget_s"] == 1800
    )  # a rehearsal's limits
    assert [n for n, s in stages.items() if s["status"] != "not run (dry run)"] == ["report"]
    assert stages["report"]["status"] == "passed"
    assert (
        stages["build"]["command"]
        == "bash llamacpp_patches/build.sh --cuda --cuda-arch=90 --example-only --no-flash-attn"
    )
    assert [n for n in stages if n.startswith("g")] == [f"g{g}_standard" for g in (1, 2, 3, 4)]
    assert (
        "--gamma 3" in stages["g3_standard"]["command"]
        and "'-ngl 99 -ngld 99 -fa off'" in stages["g3_standard"]["command"]
    )
    (row,) = stages["report"]["figures"]["rows"]  # the fixture: one speculative run, gamma 5, four domains
    assert row["gamma"] == 5 and row["measured / Eq. 2 with v"] == pytest.approx(
        row["measured"] / row["Eq. 2 with v"]
    )
    assert "| gamma | draft | target ms/tok | spec ms/tok | measured |" in markdown


@pytest.mark.slow
def test_all_checks_runs_both_checks_into_one_folder(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "DRY_RUN": "1", "PYTHON": sys.executable, "WORK_DIR": str(tmp_path / "work")}
    command = ["bash", str(ROOT / "bash_scripts" / "gpu" / "all_checks.sh"), str(out)]
    run = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=2000)
    assert run.returncode == 0, run.stderr[-3000:]
    python = json.loads((out / "python" / "results.json").read_text())
    llamacpp = json.loads((out / "llamacpp" / "results.json").read_text())
    assert {s["status"] for s in python["stages"]} == {"passed"}
    assert [s["status"] for s in llamacpp["stages"] if s["name"] == "report"] == ["passed"]
    assert python["budget_s"] == 380 and 0 < llamacpp["budget_s"] <= 580 - 1  # the call's budget, shared
    assert (out / "build.txt").read_text() == "dry run: no build\n"
    # llama.cpp converts and serves the online draft that this call's main job distilled
    assert "convert_online" in {s["name"] for s in llamacpp["stages"]}
    assert (tmp_path / "work" / "gpu_checks" / "main_job" / "draft").is_dir()
