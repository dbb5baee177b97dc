"""A prepared check as stages: commands run in order, each with its own time limit, results written as they go.

A lent GPU machine gives a session minutes, not hours, and a check cut short must still say what it found. So
each stage is a command (a subprocess: a crash, a hang or CUDA running out of memory ends that stage only)
with its own time limit, clamped to what is left of the whole check's budget. A stage that fails, times out
or finds no time left is recorded as such and the next one runs; a stage whose `needs` (among the stages of
this check) did not pass is skipped. After every stage `{out}/results.json` and `{out}/results.md` are
rewritten, and every command's output is appended to `{out}/log.txt`, its machine paths scrubbed: three
files, whatever happens. A stage that ran to its end (passed, or failed: a test run) is `summarize`d: its
figures and a Markdown table, read from what it wrote, for both files; outputs it should have written and
did not fail it.

`dry_run` stages (a build that needs a GPU, say) are recorded with their command and not run, so that a
CPU rehearsal of the check shows exactly what the GPU run will do.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from osd.paths import REPO_ROOT

PASSED, FAILED, TIMED_OUT, SKIPPED, NOT_RUN = "passed", "failed", "timed out", "skipped", "not run (dry run)"
DRY_RUN_TIME_SCALE, DRY_RUN_BUDGET_S = (
    5.0,
    1800.0,
)  # a CPU rehearsal's limits: it checks the logic, not the time
MIN_STAGE_S = 5.0  # a stage with less time left than this is skipped, not started
LOG_TAIL = 3000  # characters of each stage's output kept in results.json


@dataclass
class Stage:
    name: str
    command: list[str]  # run from the repository root
    timeout_s: float
    summarize: Callable[[], tuple[dict, str]] | None = None  # once run to its end: (figures, Markdown table)
    needs: tuple[str, ...] = ()  # stages that must have passed first, where this check has them
    env: dict[str, str] = field(default_factory=dict)
    dry_run: bool = False  # recorded, not run


@dataclass
class StageResult:
    name: str
    command: str
    status: str
    seconds: float = 0.0
    returncode: int | None = None
    note: str = ""
    log_tail: str = ""
    figures: dict = field(default_factory=dict)
    table: str = ""


def check_limits(dry_run: bool, budget_s: float | None = None) -> tuple[float, float]:
    """(a check's budget in seconds, the scale of its stages' limits): on a lent GPU 390 s (its 7 minutes less
    the set-up) at scale 1; a CPU rehearsal 1800 s at scale 5 (it checks the logic, not the time, on a machine
    it may share). `budget_s` overrides the budget."""
    default, scale = (1800.0, 5.0) if dry_run else (390.0, 1.0)
    return budget_s or default, scale


def run_stages(
    stages: Sequence[Stage], out: Path, title: str, budget_s: float, header: dict, time_scale: float = 1.0
) -> list[StageResult]:
    """Run `stages` in order within `budget_s` seconds; results in `out` after each (`header` heads the JSON).
    time_scale: every stage's limit times this (a CPU rehearsal, on a machine it may share, is slower)."""
    out.mkdir(parents=True, exist_ok=True)
    log = out / "log.txt"
    log.write_text("")
    deadline = time.monotonic() + budget_s
    results: list[StageResult] = []
    present = {stage.name for stage in stages}
    for stage in stages:
        passed = {r.name for r in results if r.status == PASSED}
        result = StageResult(stage.name, scrub(shlex.join(stage.command), out), SKIPPED)
        if stage.dry_run:
            result.status = NOT_RUN
        elif missing := [n for n in stage.needs if n in present and n not in passed]:
            result.note = f"needs {', '.join(missing)}, which did not pass"
        elif (left := deadline - time.monotonic()) < MIN_STAGE_S:
            result.note = f"the check's budget of {budget_s:.0f} s was spent"
        else:
            run_one(stage, min(stage.timeout_s * time_scale, left), log, result)
        results.append(result)
        write_results(out, title, header, results)
    return results


def run_one(stage: Stage, timeout_s: float, log: Path, result: StageResult) -> None:
    """Run `stage` (its whole process group killed at `timeout_s`), scrub what it wrote to `log`, then summarize it
    if it ran to its end."""
    with log.open("a") as f:
        f.write(f"\n===== {stage.name}: {result.command}\n")
        f.flush()
        start = log.stat().st_size
        began = time.monotonic()
        try:
            proc = subprocess.Popen(stage.command, cwd=REPO_ROOT, stdout=f, stderr=subprocess.STDOUT,
                                    env={**os.environ, "PYTHONUNBUFFERED": "1", **stage.env}, start_new_session=True)  # fmt: skip
            result.returncode = proc.wait(timeout=timeout_s)
            result.status = PASSED if result.returncode == 0 else FAILED
        except OSError as e:  # the command could not start (a missing program)
            result.status, result.note = FAILED, f"could not start: {e}"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # its children too (a build's compilers, a server)
            proc.wait()
            result.status, result.note = TIMED_OUT, f"stopped after {timeout_s:.0f} s"
        result.seconds = time.monotonic() - began
    with log.open("rb+") as f:  # the stage's output, its machine paths scrubbed in place
        f.seek(start)
        output = scrub(f.read().decode(errors="replace"), log.parent)
        f.seek(start)
        f.truncate()
        f.write(output.encode())
    result.log_tail = output[-LOG_TAIL:]
    if result.status in (PASSED, FAILED) and stage.summarize is not None:  # a failed test run has figures too
        try:
            result.figures, result.table = stage.summarize()
        except (OSError, ValueError, KeyError, TypeError) as e:
            result.note = "; ".join(filter(None, [result.note, f"its outputs could not be read: {e!r}"]))
            result.status = FAILED


def write_results(out: Path, title: str, header: dict, results: list[StageResult]) -> None:
    """`results.json` (header, every stage with its figures) and `results.md` (a status table, then each
    summarized stage's table)."""
    record = {**header, "stages": [asdict(r) for r in results]}
    (out / "results.json").write_text(scrub(json.dumps(record, indent=1), out) + "\n")
    lines = [f"# {title}", "", "| stage | status | seconds | note |", "|---|---|---|---|"]
    lines += [f"| {r.name} | {r.status} | {r.seconds:.0f} | {r.note} |" for r in results]
    for r in results:
        lines += ["", f"## {r.name}", "", f"`{r.command}`"]
        lines += ["", r.table] if r.table else []
    (out / "results.md").write_text(scrub("\n".join(lines), out) + "\n")


def scrub(text: str, out: Path | None = None) -> str:
    """`text` naming no path of this machine: the repository's paths relative, this interpreter `python`, any
    path into a `site-packages` folder (a warning's, a traceback's) or into a folder of PYTHONPATH outside the
    repository (packages installed with `pip --target`, as on a GPU machine) from `<site-packages>`, `out` as OUT."""
    root = re.escape(str(REPO_ROOT))
    text = text.replace(sys.executable, "python")
    if out is not None:
        text = re.sub(rf"(?<![\w./-]){re.escape(str(out.resolve()))}(?![\w.-])", "OUT", text)
    text = re.sub(r"(?<![\w.-])[\w./-]*/site-packages/", "<site-packages>/", text)
    for folder in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        path = Path(folder)
        if path.is_absolute() and path.parent != path and not path.resolve().is_relative_to(REPO_ROOT):
            text = re.sub(rf"(?<![\w./-]){re.escape(str(path).rstrip('/'))}/", "<site-packages>/", text)
    text = re.sub(rf"(?<![\w./-]){root}/", "", text)  # only where a path starts: not /tmp/x/work/main_job
    return re.sub(rf"(?<![\w./-]){root}(?![\w.-])", ".", text)
