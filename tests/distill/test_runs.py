"""Runs that survive reuse, restarts and torn checkpoints (`osd.train` end to end on tiny saved models):
the --output_dir policy, the identity check, finished runs, atomic checkpoints, metrics.jsonl after
a crash, and offline resumes identical to uninterrupted runs for every sample source."""

from __future__ import annotations

import json
import logging
import shutil

import pytest
import torch
from distill_fixtures import cli_argv, write_conversations
from safetensors.torch import load_file

from osd.distill.callbacks import METRICS_FILE, read_metrics, reproducible
from osd.distill.checkpoints import STAGING_DIR, CheckpointError
from osd.distill.run_dir import FINAL_STATE
from osd.plots import read_log
from osd.train import main


def simulate_crash_after(out, step: int) -> None:
    """Leave out/ as a run killed right after checkpoint-{step}: later checkpoints, the final state
    and model gone, a half-written metrics line at the end."""
    for checkpoint in out.glob("checkpoint-*"):
        if int(checkpoint.name.split("-")[1]) > step:
            shutil.rmtree(checkpoint)
    for name in (FINAL_STATE, "model.safetensors"):
        (out / name).unlink()
    with (out / METRICS_FILE).open("a") as f:
        f.write('{"step": 3, "loss": 0.1')


@pytest.fixture
def data(tmp_path) -> str:
    return write_conversations(tmp_path / "d.json", with_answers=False)


def test_a_used_output_dir_is_refused_without_resume_or_overwrite(saved_pair, data, tmp_path):
    argv = cli_argv(*saved_pair, data, tmp_path / "run", "--max_steps", "2")
    main(argv)
    before = (tmp_path / "run" / METRICS_FILE).read_bytes()
    with pytest.raises(ValueError, match="--resume_from_checkpoint last .* --overwrite_output_dir"):
        main(argv)
    assert (tmp_path / "run" / METRICS_FILE).read_bytes() == before  # nothing appended


def test_resuming_with_other_settings_is_refused_with_a_diff(saved_pair, data, tmp_path):
    out = tmp_path / "run"
    main(cli_argv(*saved_pair, data, out, "--max_steps", "2"))
    other_data = write_conversations(tmp_path / "other.json", with_answers=True)
    argv = cli_argv(*saved_pair, other_data, out, "--max_steps", "4", "--kl_method", "reverse")
    with pytest.raises(CheckpointError) as error:
        main([*argv, "--resume_from_checkpoint", "last"])
    message = str(error.value)
    assert "--kl_method: 'forward' -> 'reverse'" in message and "--data_path: 'sha256:" in message
    assert "--max_steps" not in message  # training further is not another run
    assert not (out / "checkpoint-4").exists()


def test_a_finished_run_is_not_trained_further(saved_pair, data, tmp_path):
    out = tmp_path / "run"
    argv = cli_argv(*saved_pair, data, out, "--max_steps", "4")
    first = main(argv)
    files = {p: p.read_bytes() for p in (out / METRICS_FILE, out / FINAL_STATE, out / "model.safetensors")}
    argv += ["--resume_from_checkpoint", "True"]  # the newest complete checkpoint, not a path "True"
    again = main(argv)
    assert again == first
    assert {p: p.read_bytes() for p in files} == files
    # killed after checkpoint-4 but before the final save: restored from it, still not trained
    (out / FINAL_STATE).unlink()
    assert main(argv)["eval_alpha"] == first["eval_alpha"]
    assert json.loads((out / FINAL_STATE).read_text())["global_step"] == 4
    assert not (out / "checkpoint-5").exists()
    logged = [json.loads(line) for line in files[out / METRICS_FILE].decode().splitlines()]
    # the end-of-train summary included (issue 49: the restored run's metrics.jsonl had no train_loss)
    assert reproducible(read_metrics(out)) == reproducible(logged)


def test_overwrite_starts_over_and_keeps_other_files(saved_pair, data, tmp_path):
    out = tmp_path / "run"
    main(cli_argv(*saved_pair, data, out, "--max_steps", "4"))
    (out / "stream.json").write_text("[]")  # not the run's: kept
    # --overwrite_output_dir wins over `last` (a script passing `last` can be told to start over)
    argv = cli_argv(*saved_pair, data, out, "--max_steps", "2", "--resume_from_checkpoint", "last")
    main([*argv, "--overwrite_output_dir", "True"])
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2"]
    assert [m["step"] for m in read_metrics(out) if "loss" in m] == [1, 2]
    assert (out / "stream.json").read_text() == "[]"


@pytest.mark.slow
@pytest.mark.parametrize("source", ["teacher", "student", "mix_request", "mix_token"])
def test_offline_resume_is_identical_for_every_sample_source(saved_pair, data, tmp_path, source):
    out = tmp_path / "run"
    # sampled generation (temperature 1) and no data-set answers: every source draws random numbers
    argv = cli_argv(*saved_pair, data, out, "--max_steps", "4", "--sample_source", source,
                    "--sample_temperature", "1.0", "--resume_from_checkpoint", "last")  # fmt: skip
    main(argv)
    whole, metrics = load_file(out / "model.safetensors"), reproducible(read_metrics(out))
    simulate_crash_after(out, 2)
    main(argv)
    for name, tensor in load_file(out / "model.safetensors").items():
        torch.testing.assert_close(tensor, whole[name], rtol=0, atol=0)
    assert reproducible(read_metrics(out)) == metrics


def test_torn_checkpoints_are_skipped_and_the_run_resumes(saved_pair, data, tmp_path, caplog):
    out = tmp_path / "run"
    argv = cli_argv(*saved_pair, data, out, "--mode", "online", "--max_steps", "6",
                    "--resume_from_checkpoint", "last", batch_size=1)  # fmt: skip
    main(argv)
    whole, metrics = load_file(out / "model.safetensors"), reproducible(read_metrics(out))
    # killed while checkpoint-6 was written (still in the staging folder, a file cut short), and a
    # checkpoint-5 written in place by an older version, its buffer empty
    (out / STAGING_DIR).mkdir()
    shutil.move(out / "checkpoint-6", out / STAGING_DIR / "checkpoint-6")
    (out / STAGING_DIR / "checkpoint-6" / "online_buffer.pt").write_bytes(b"")
    simulate_crash_after(out, 4)
    shutil.copytree(out / "checkpoint-4", out / "checkpoint-5")
    (out / "checkpoint-5" / "osd_checkpoint.json").unlink()
    (out / "checkpoint-5" / "online_buffer.pt").write_bytes(b"")
    with caplog.at_level(logging.WARNING):
        main(argv)
    skipped = [r.getMessage() for r in caplog.records if r.getMessage().startswith("skipping")]
    assert any("incomplete/checkpoint-6" in m for m in skipped)
    assert any("checkpoint-5 is incomplete" in m for m in skipped)
    for name, tensor in load_file(out / "model.safetensors").items():
        torch.testing.assert_close(tensor, whole[name], rtol=0, atol=0)
    assert reproducible(read_metrics(out)) == metrics
    assert not (out / STAGING_DIR).exists()  # cleaned by the next commit


def test_a_restart_before_the_first_checkpoint_starts_metrics_over(saved_pair, data, tmp_path, caplog):
    out = tmp_path / "run"
    argv = cli_argv(*saved_pair, data, out, "--max_steps", "2", "--save_strategy", "no",
                    "--resume_from_checkpoint", "last")  # fmt: skip
    main(argv)
    expected = reproducible(read_metrics(out))
    # finished, with no checkpoint to resume: nothing to train, and no word of starting over
    with caplog.at_level(logging.WARNING):
        main(argv)
    assert "nothing to train" in caplog.text and "starts from step 0" not in caplog.text
    caplog.clear()
    simulate_crash_after(out, 0)  # no checkpoint at all: the rerun starts from step 0, saying so
    with caplog.at_level(logging.WARNING):
        main(argv)
    assert "starts from step 0" in caplog.text
    assert reproducible(read_metrics(out)) == expected


def test_a_torn_last_metrics_line_is_ignored_with_a_warning(tmp_path, caplog):
    path = tmp_path / METRICS_FILE
    path.write_text('{"step": 1, "alpha": 0.5, "queries": 1}\n{"step": 2, "al')
    with caplog.at_level(logging.WARNING):
        assert read_log(tmp_path) == [{"step": 1, "alpha": 0.5, "queries": 1}]
    assert "line 2: torn last line ignored" in caplog.text
    path.write_text('{"step": 1}\n{"st\n{"step": 3}\n')
    with pytest.raises(ValueError, match=r"metrics\.jsonl, line 2"):
        read_log(path)


def test_train_loss_after_a_resume_covers_the_whole_run(saved_pair, data, tmp_path):
    """Issue 24: after a resume, the end-of-train train_loss averaged the resumed call's steps only."""
    out = tmp_path / "run"
    argv = cli_argv(*saved_pair, data, out, "--max_steps", "4", "--resume_from_checkpoint", "last")

    def train_loss() -> float:
        return next(m["train_loss"] for m in reversed(read_metrics(out)) if "train_loss" in m)

    main(argv)
    whole = train_loss()
    simulate_crash_after(out, 2)
    main(argv)  # steps 3 and 4 again, from checkpoint-2
    steps = [m["loss"] for m in read_metrics(out) if "loss" in m]
    assert whole == pytest.approx(sum(steps) / 4, rel=1e-5) and steps[0] != pytest.approx(steps[-1])
    assert train_loss() == pytest.approx(whole, rel=1e-5)


@pytest.mark.parametrize("mode", ["offline", "online"])
def test_train_loss_after_a_resume_between_logged_steps_covers_the_whole_run(
    saved_pair, data, tmp_path, mode
):
    """Issue 49: resumed at checkpoint-2 with a loss logged at step 3 only, train_loss averaged the
    resumed call's steps (3.878 uninterrupted vs 4.351 resumed); the checkpoint now carries the sum."""
    out = tmp_path / "run"
    argv = cli_argv(*saved_pair, data, out, "--mode", mode, "--max_steps", "4", "--logging_steps", "3",
                    "--resume_from_checkpoint", "last", batch_size=1)  # fmt: skip

    def train_loss() -> float:
        return next(m["train_loss"] for m in reversed(read_metrics(out)) if "train_loss" in m)

    main(argv)
    whole = train_loss()
    simulate_crash_after(out, 2)
    main(argv)  # steps 3 and 4 again, from checkpoint-2: no loss was logged before it
    assert train_loss() == pytest.approx(whole, rel=1e-5)
