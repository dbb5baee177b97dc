"""Aggregates survive a resume (issue 49, rule 6): `osd.train` on the tiny demo pair, online and
offline, SIGKILLed at random steps and during checkpoint writes, then rerun with the same command
until it finishes, reports every figure (metrics.jsonl, trainer_state.json with train_loss, run.json)
and weights identical to an uninterrupted run's. The kill schedule is seeded: the seed is printed,
and OSD_KILL_SEED=<seed> replays it. The harness is benchmarks/crash_test.py's (24 kills there).

The main job (osd.demo.online_demo) and osd.serving do not resume: a second run into their folder is
refused (tests/demo/test_online_demo.py, tests/serving/test_config.py)."""

from __future__ import annotations

import json
import os
import random

import pytest

from benchmarks.crash_test import RECORDS, reference, trial
from osd.paths import workload_path

KILLS = 2  # per run: with the final launch and the rerun after it, five launches of about 5 s each


@pytest.mark.slow
@pytest.mark.parametrize("run", list(RECORDS))
def test_killed_and_resumed_run_reports_what_an_uninterrupted_run_does(run, tmp_path, capsys):
    seed = int(os.environ.get("OSD_KILL_SEED", random.randrange(2**32)))
    with capsys.disabled():
        print(f"\n[kill_resume] {run}: OSD_KILL_SEED={seed}")
    random.seed(seed)  # the delays after a kill's trigger
    data = tmp_path / "data.json"
    records = json.loads(workload_path("sql", "train").read_text())
    data.write_text(json.dumps(records[: RECORDS[run] // 3]))  # 8 online steps; offline: 16 records, 3 epochs
    expected, wall = reference(run, data, tmp_path / "reference")
    result = trial(
        run, data, tmp_path / "trial", expected, wall, KILLS, random.Random(seed), ("step", "checkpoint")
    )
    described = [(x["killed"], x.get("at_s")) for x in result["launches"]]
    assert result["finished_rc"] == 0, f"seed {seed}: the last launch failed, see {tmp_path}/trial.log"
    assert result["differing_files"] == [], f"seed {seed}, kills {described}"
    assert result["weights_identical"], f"seed {seed}, kills {described}: {result['weights_max_abs_diff']}"
    assert result["rerun_after_finish_unchanged"], f"seed {seed}: a rerun after the finish changed the run"
