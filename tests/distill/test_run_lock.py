"""One run per --output_dir (issue 24, defect 3): two `osd.train` runs into one folder both exited 0,
metrics.jsonl logged queries twice and `queries_served` went backwards. The run holds an exclusive
lock on its folder for its life; the OS releases it when the process dies."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from distill_fixtures import cli_argv, write_conversations

from osd.distill.callbacks import METRICS_FILE
from osd.distill.run_dir import LOCK_FILE, RunDirError, lock_run_dir

REPO_ROOT = Path(__file__).resolve().parents[2]


def holder_pid(out: Path) -> int | None:
    text = (out / LOCK_FILE).read_text().split() if (out / LOCK_FILE).is_file() else []
    return int(text[0]) if text else None


def test_a_second_lock_names_the_holder_and_the_lock_is_released_after(tmp_path):
    with lock_run_dir(tmp_path / "run"):
        with pytest.raises(RunDirError, match=rf"in use by a running run \(process {os.getpid()} on "):
            with lock_run_dir(tmp_path / "run"):
                pass
    assert holder_pid(tmp_path / "run") is None  # released: the file names no holder
    with lock_run_dir(tmp_path / "run"):
        assert holder_pid(tmp_path / "run") == os.getpid()


def test_a_stale_lock_of_a_dead_process_is_named_and_taken_over(tmp_path, caplog):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / LOCK_FILE).write_text("999999999 elsewhere\n")  # left by a killed run: no flock held
    with caplog.at_level(logging.WARNING), lock_run_dir(tmp_path / "run"):
        assert holder_pid(tmp_path / "run") == os.getpid()
    assert "stale lock of process 999999999 on elsewhere" in caplog.text


@pytest.mark.slow
def test_a_run_resumed_into_a_live_runs_folder_is_refused_with_its_pid(saved_pair, tmp_path, caplog):
    """Two real processes: the first trains, the second (`--resume_from_checkpoint last`) is refused
    naming the first's pid and writes nothing; the first, killed, leaves a stale lock that is named."""
    data = write_conversations(tmp_path / "d.json")
    out = tmp_path / "run"
    argv = cli_argv(*saved_pair, data, out, "--max_steps", "100000", "--save_steps", "100000",
                    "--eval_on_start", "False", "--logging_steps", "1")  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1"}
    first = subprocess.Popen([sys.executable, "-m", "osd.train", *argv], env=env, cwd=tmp_path,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (out / METRICS_FILE).is_file():  # training: the first run holds the folder
            assert first.poll() is None and time.monotonic() < deadline, "the first run never trained"
            time.sleep(0.2)
        assert holder_pid(out) == first.pid
        second = subprocess.run(
            [sys.executable, "-m", "osd.train", *argv, "--resume_from_checkpoint", "last"],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=170,
        )  # fmt: skip
        assert first.poll() is None  # still running: the refusal was not a race with its end
        assert second.returncode == 1, second.stderr[-2000:]
        refusal = f"osd.train: error: --output_dir {out} is in use by a running run (process {first.pid} on "
        assert refusal in second.stderr
        assert "Traceback" not in second.stderr
    finally:
        first.kill()  # a crash: the OS releases the lock, the file still names the dead holder
        first.wait()
    with caplog.at_level(logging.WARNING), lock_run_dir(out):
        pass
    assert f"stale lock of process {first.pid} on " in caplog.text
