"""`python -m osd.train` end to end on tiny saved models: resume, and errors that name the flag or file."""

from __future__ import annotations

import json

import pytest
import torch
from distill_fixtures import build_tokenizer, cli_argv, llama, save_pair, write_conversations

from osd.conversations import ConversationFormatError
from osd.distill.callbacks import read_metrics
from osd.spec.eagle3 import load_head
from osd.train import main


def test_offline_run_resumes_without_duplicating_metrics(saved_pair, tmp_path):
    data = write_conversations(tmp_path / "d.json")
    out = tmp_path / "run"
    argv = cli_argv(*saved_pair, data, out, "--sample_source", "mix_token", "--kl_method", "jsd")
    first = main([*argv, "--max_steps", "2"])
    assert (out / "checkpoint-2").is_dir() and 0 <= first["eval_alpha"] <= 1
    main([*argv, "--max_steps", "4", "--resume_from_checkpoint", "last"])  # continues from checkpoint-2
    state = json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())
    assert [h["step"] for h in state["log_history"] if "loss" in h] == [1, 2, 3, 4]
    loss_steps = [m["step"] for m in read_metrics(out) if "loss" in m]
    assert loss_steps == [1, 2, 3, 4]  # steps 1-2 from the first run, 3-4 from the resumed one
    # Standard at step 0 once (not again on resume); the first run's final alpha was measured after
    # checkpoint-2 was saved, so it is dropped: the file is what one run of 4 steps writes
    assert [m["step"] for m in read_metrics(out) if "eval_alpha" in m] == [0, 4]


def test_bad_flag_value_is_a_usage_error_naming_the_flag(saved_pair, tmp_path, capsys):
    data = write_conversations(tmp_path / "d.json")
    for flag, value in (("--kl_method", "kl"), ("--sample_source", "teachers")):
        with pytest.raises(SystemExit) as exit_info:
            main(cli_argv(*saved_pair, data, tmp_path / "o", flag, value))
        assert exit_info.value.code == 2
        assert f"argument {flag}" in capsys.readouterr().err


def test_malformed_record_names_file_and_index(saved_pair, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"conversation": [{"role": "user", "content": "hi"}]}, {"conversation": []}]))
    with pytest.raises(ConversationFormatError, match=r"bad\.json, record 1"):
        main(cli_argv(*saved_pair, str(bad), tmp_path / "o"))


def test_vocabulary_mismatch_is_a_clear_error(saved_pair, tmp_path):
    student, _ = saved_pair
    other = llama(1, 16, seed=2)
    other.resize_token_embeddings(80)
    other.save_pretrained(tmp_path / "other")
    build_tokenizer().save_pretrained(tmp_path / "other")
    data = write_conversations(tmp_path / "d.json")
    with pytest.raises(ValueError, match="vocab_size"):
        main(cli_argv(student, str(tmp_path / "other"), data, tmp_path / "o"))


def test_online_mode_dispatches_to_the_online_trainer(saved_pair, tmp_path, monkeypatch):
    from osd.distill import online

    used = []
    original = online.OnlineDistillTrainer.__init__

    def spy(self, *args, **kwargs):
        used.append(type(self).__name__)
        original(self, *args, **kwargs)

    monkeypatch.setattr(online.OnlineDistillTrainer, "__init__", spy)
    data = write_conversations(tmp_path / "d.json")
    main(
        cli_argv(*saved_pair, data, tmp_path / "online", "--mode", "online", "--max_steps", "2", batch_size=1)
    )
    assert used == ["OnlineDistillTrainer"]


def test_max_propose_num_auto_serves_and_evaluates(saved_pair, tmp_path):
    """--max_propose_num auto: the trainer's alpha evaluation and online serving use one GammaPolicy."""
    data = write_conversations(tmp_path / "d.json")
    result = main(
        cli_argv(*saved_pair, data, tmp_path / "off", "--max_propose_num", "auto", "--max_steps", "1")
    )
    # tiny models cost about the same, so the policy may not draft at all: alpha is then None (nothing proposed)
    assert result["eval_tokens_per_step"] >= 1.0
    assert result["eval_alpha"] is None or 0 <= result["eval_alpha"] <= 1
    online = ["--mode", "online", "--per_device_train_batch_size", "1", "--online_eval_interval", "1"]
    main(
        [
            *cli_argv(*saved_pair, data, tmp_path / "on", "--max_propose_num", "auto", "--max_steps", "2"),
            *online,
        ]
    )
    entries = [m for m in read_metrics(tmp_path / "on") if "alpha_window" in m]
    assert [m["queries_served"] for m in entries] == [1, 2]


@pytest.fixture
def head_teacher(tmp_path) -> str:
    """A saved 4-layer teacher with its tokenizer: an EAGLE-3 head reads three of its layers above the first."""
    return save_pair(tmp_path, build=lambda layers, width, seed: llama(layers + 2, width, seed))[1]


def head_argv(teacher: str, data: str, out, *extra: str) -> list[str]:
    """osd.train --drafter head: a fresh head served and distilled online, an update every 2 queries."""
    return cli_argv("(not read)", teacher, data, out, "--drafter", "head", "--mode", "online", "--online_eval_interval",
                    "1", "--online_update_interval", "2", "--online_loss_positions", "all", "--online_rejected_weight",
                    "0.5", "--num_train_epochs", "1", *extra, batch_size=1)  # fmt: skip


def test_a_head_run_serves_distils_and_saves_the_head_in_the_speculators_format(head_teacher, tmp_path):
    data = write_conversations(tmp_path / "d.json")
    main(head_argv(head_teacher, data, tmp_path / "run", "--max_steps", "2"))
    head = load_head(tmp_path / "run")  # the run's folder, as vLLM's eagle3 loader reads it
    assert head.target_layers == (1, 2, 3)
    metrics = read_metrics(tmp_path / "run")
    assert [m["online_updates"] for m in metrics if "alpha_window" in m] == [0, 1]
    assert [m["step"] for m in metrics if "eval_alpha" in m] == [0]  # Standard SD with the head


@pytest.mark.slow
def test_a_head_run_killed_after_a_checkpoint_resumes_to_the_uninterrupted_runs_weights(
    head_teacher, tmp_path, monkeypatch
):
    """Killed while serving query 5 of 6: checkpoint-3 holds query 3 buffered (a FeatureQuery, rebuilt on resume),
    and the resumed run ends with the weights and alpha of the run never killed."""
    from osd.distill.online import OnlineDistillTrainer

    data = write_conversations(tmp_path / "d.json")

    def argv(out) -> list[str]:
        return head_argv(head_teacher, data, out, "--save_steps", "3", "--eval_on_start", "False")

    main(argv(tmp_path / "reference"))
    serve = OnlineDistillTrainer.training_step

    def killed_at_step_5(self, *args, **kwargs):
        if self.state.global_step == 4:
            raise KeyboardInterrupt
        return serve(self, *args, **kwargs)

    monkeypatch.setattr(OnlineDistillTrainer, "training_step", killed_at_step_5)
    with pytest.raises(KeyboardInterrupt):
        main(argv(tmp_path / "run"))
    monkeypatch.undo()
    (buffered,) = torch.load(tmp_path / "run" / "checkpoint-3" / "online_buffer.pt", weights_only=True)[
        "shared"
    ]
    assert "features" in buffered and not (tmp_path / "run" / "checkpoint-6").exists()
    main([*argv(tmp_path / "run"), "--resume_from_checkpoint", "last"])
    reference, resumed = load_head(tmp_path / "reference"), load_head(tmp_path / "run")
    for name, value in reference.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[name], value, rtol=1e-5, atol=1e-6)
    alphas = [
        [m["alpha"] for m in read_metrics(tmp_path / out) if "alpha_window" in m]
        for out in ("reference", "run")
    ]
    assert alphas[0] == alphas[1] and len(alphas[0]) == 6


@pytest.mark.parametrize("value", ["0", "-2", "2.5", "fast"])
def test_bad_max_propose_num_names_the_flag(value, tmp_path):
    from osd.distill.config import DistillTrainingArguments

    with pytest.raises(ValueError, match="--max_propose_num"):
        DistillTrainingArguments(output_dir=str(tmp_path), max_propose_num=value)
    assert DistillTrainingArguments(output_dir=str(tmp_path), max_propose_num="3").max_propose_num == 3


@pytest.mark.parametrize("flag", ["online_steps_per_update", "online_eval_interval"])
def test_online_counts_below_one_name_the_flag(flag, tmp_path):
    from osd.distill.config import DistillTrainingArguments

    with pytest.raises(ValueError, match=f"--{flag} must be >= 1, got 0"):
        DistillTrainingArguments(output_dir=str(tmp_path), **{flag: 0})


def test_online_update_interval_zero_is_static_and_below_is_refused(tmp_path):
    from osd.distill.config import DistillTrainingArguments

    assert (
        DistillTrainingArguments(output_dir=str(tmp_path), online_update_interval=0).online_update_interval
        == 0
    )
    with pytest.raises(ValueError, match="--online_update_interval must be >= 0"):
        DistillTrainingArguments(output_dir=str(tmp_path), online_update_interval=-1)


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [("max_steps", 0, "--max_steps must be >= 1, or -1"), ("max_steps", -2, "--max_steps must be >= 1, or -1"),
     ("num_train_epochs", 0, "--num_train_epochs must be > 0, got 0"),
     ("num_train_epochs", -1.0, "--num_train_epochs must be > 0, got -1")],
)  # fmt: skip
def test_no_steps_to_train_is_refused(flag, value, message, tmp_path):
    """Issue 49: --max_steps 0 trained one step (Trainer reads 0 as "not set"); --num_train_epochs 0 saved
    the untrained student as the result."""
    from osd.distill.config import DistillTrainingArguments

    with pytest.raises(ValueError, match=message):
        DistillTrainingArguments(output_dir=str(tmp_path), **{flag: value})
    assert (
        DistillTrainingArguments(output_dir=str(tmp_path), max_steps=-1, num_train_epochs=0.5).max_steps == -1
    )


@pytest.mark.slow
def test_refusal_is_one_error_line_without_traceback(saved_pair, tmp_path):
    """`python -m osd.train` into a used --output_dir: exit status 1 and the reason, no traceback."""
    import subprocess
    import sys

    data = write_conversations(tmp_path / "d.json")
    argv = cli_argv(*saved_pair, data, tmp_path / "run", "--max_steps", "1", "--eval_on_start", "False")
    main(argv)
    done = subprocess.run(
        [sys.executable, "-m", "osd.train", *argv], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "osd.train: error:" in done.stderr and "--overwrite_output_dir" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [("learning_rate", float("nan"), "--learning_rate must be a finite number, got nan"),
     ("learning_rate", -1.0, "--learning_rate must be >= 0, got -1"),
     ("distill_temperature", float("nan"), "--distill_temperature must be a finite number"),
     ("sample_temperature", float("inf"), "--sample_temperature must be a finite number, got inf")],
)  # fmt: skip
def test_a_nan_or_negative_rate_is_refused_naming_the_flag(flag, value, message, tmp_path):
    """Issue 49 probe: --distill_temperature nan passed `<= 0` and trained on NaN losses; --learning_rate nan
    was refused by torch only after run.json (holding NaN) was written."""
    from osd.distill.config import DistillTrainingArguments

    with pytest.raises(ValueError, match=message):
        DistillTrainingArguments(output_dir=str(tmp_path), **{flag: value})
