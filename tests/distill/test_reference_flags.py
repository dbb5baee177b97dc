"""The reference's command lines (fixtures/reference_command_lines.txt) parse with every flag used and
keep the reference's meaning; its flags that cannot hold here are clear errors."""

from __future__ import annotations

import logging
import math
import shlex
from pathlib import Path

import pytest
import torch
from distill_fixtures import QUERIES, build_tokenizer, llama, save_pair, t5, write_conversations
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, HfArgumentParser

from osd.distill import reference_flags
from osd.distill.callbacks import read_metrics
from osd.distill.config import DataArguments, DistillTrainingArguments, ModelArguments
from osd.distill.reference_flags import parse_cli, split_flags, translate
from osd.spec import SpeculativeDecoder
from osd.train import main

FIXTURE = Path(__file__).parent / "fixtures" / "reference_command_lines.txt"
CPU_ONLY = {"--tf32"}  # TrainingArguments refuses --tf32 without an Ampere GPU


def command_lines() -> list[tuple[str, list[str]]]:
    """(script, flags) per fixture line."""
    rows = [line for line in FIXTURE.read_text().splitlines() if line and not line.startswith("#")]
    return [(head, shlex.split(flags)) for head, _, flags in (row.partition(": ") for row in rows)]


COMMANDS = command_lines()


def parser() -> HfArgumentParser:
    return HfArgumentParser((ModelArguments, DataArguments, DistillTrainingArguments))


def on_cpu(argv: list[str], **replace: str) -> list[str]:
    """argv without the GPU-only flags, with `--use_cpu True` and the flags in `replace` set (model and data paths)."""
    out: list[str] = []
    for flag, value in split_flags(argv):
        if flag in CPU_ONLY or flag[2:] in replace:
            continue
        out += [flag] if value is None else [flag, value]
    for name, value in replace.items():
        out += [f"--{name}", value]
    return [*out, "--use_cpu", "True"]


def test_the_fixture_covers_both_entry_points_and_every_script_kind():
    scripts = {script.split()[0] for script, _ in COMMANDS}
    assert len(COMMANDS) >= 30 and {script.split()[1] for script, _ in COMMANDS} == {
        "train.py",
        "train_mlm.py",
    }
    for kind in ("offline.sh", "online.sh", "sample_online_distill.sh", "sharp.sh", "arena.sh", "two_mix.sh"):
        assert any(s.endswith(kind) for s in scripts), kind


@pytest.mark.parametrize(
    ("script", "argv"), COMMANDS, ids=[f"{i}-{s.split()[0]}" for i, (s, _) in enumerate(COMMANDS)]
)
def test_reference_command_line_parses_with_the_references_meaning(script, argv):
    _, unused = parser().parse_known_args(translate(argv))
    assert unused == []
    model_args, data_args, args = parse_cli(parser(), on_cpu(argv))
    given = dict(split_flags(argv))
    assert model_args.student_model_path == given["--student_model_path"]
    assert args.eval_strategy == given["--evaluation_strategy"]
    ratio = float(given["--warmup_ratio"])
    assert args.get_warmup_steps(1000) == math.ceil(1000 * ratio)
    assert args.sample_source == given.get("--sample_source", "student")
    assert args.kl_method == given.get("--kl_method", "forward")
    assert args.max_grad_norm == 0  # the reference forced it
    if "--source_max_length" in given:
        assert data_args.model_max_length == int(given["--source_max_length"])
    if "--all_token_mask" in given:
        assert args.online_loss_positions == "all"
    if "--dataset_name" in given:
        train_stem = reference_flags.REFERENCE_DATASETS[given["--dataset_name"]][0]
        assert data_args.data_path == str(reference_flags.RAW_DATA / f"{train_stem}.json")
        assert (data_args.eval_data_path is not None) == ("--do_eval" in given)
        assert data_args.max_eval_samples == (200 if "--fast_eval" in given else None)


def test_translations_log_one_line_each(caplog):
    with caplog.at_level(logging.WARNING, logger=reference_flags.__name__):
        out = translate(
            ["--evaluation_strategy", "epoch", "--warmup_ratio", "0.03", "--model_name_or_path", "m"]
        )
    assert out == ["--eval_strategy", "epoch", "--warmup_steps", "0.03", "--student_model_path", "m"]
    assert len(caplog.records) == 3 and all("\n" not in r.getMessage() for r in caplog.records)


def test_flags_the_reference_never_read_are_dropped_saying_so(caplog):
    with caplog.at_level(logging.WARNING, logger=reference_flags.__name__):
        out = translate(
            ["--num_beams", "4", "--metric", "bleu", "--ignore_pad_token_for_loss", "--seed", "3"]
        )
    assert out == ["--seed", "3"]
    assert [r.getMessage().split()[2] for r in caplog.records] == [
        "--num_beams",
        "--metric",
        "--ignore_pad_token_for_loss",
    ]


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--max_predict_samples", "5"], "--max_predict_samples"),
        (["--do_predict"], "--do_predict: osd.train has no predict stage"),
        (["--warmup_ratio", "1.0"], "--warmup_ratio"),
        (
            ["--source_max_length", "128", "--model_max_length", "256"],
            "--source_max_length 128 and --model_max_length",
        ),
        (["--dataset_name", "wmt16", "--dataset_config_name", "de-en"], "--dataset_name wmt16"),
        (
            ["--dataset_name", "code_search_net", "--dataset_config_name", "java"],
            "--dataset_config_name java",
        ),
        (["--dataset_name", "gsm8k", "--data_path", "x.json"], "either --dataset_name or --data_path"),
        (["--dataset_config_name", "python"], "needs --dataset_name"),
        (["--fast_eval", "maybe"], "--fast_eval takes True or False"),
    ],
)
def test_reference_flags_that_cannot_hold_are_errors_naming_the_flag(argv, match):
    with pytest.raises(ValueError, match=match):
        translate(argv)


def test_an_unknown_flag_is_still_refused():
    with pytest.raises(ValueError, match="--no_such_flag"):
        parse_cli(parser(), ["--no_such_flag", "1"])
    with pytest.raises(ValueError, match="stray"):
        parse_cli(parser(), ["--seed", "1", "--use_cpu", "True", "stray"])


def test_dataset_name_reads_the_local_files_and_with_answers_the_teachers():
    assert translate(["--dataset_name", "spider_with_answers", "--do_eval", "True"]) == [
        "--do_eval",
        "True",
        "--data_path",
        "data/raw_data/spider_train_with_answer.json",
        "--eval_data_path",
        "data/raw_data/spider_validation.json",
    ]
    assert translate(["--dataset_name", "gsm8k", "--do_eval", "False"])[-2:] == [
        "--data_path",
        "data/raw_data/gsm8k_train.json",
    ]


def test_jsd_says_which_divergence_it_is_once(caplog):
    with caplog.at_level(logging.WARNING, logger=reference_flags.__name__):
        parse_cli(parser(), ["--kl_method", "jsd", "--use_cpu", "True"])
    notes = [r.getMessage() for r in caplog.records if "jsd" in r.getMessage()]
    assert len(notes) == 1 and "reference_mix" in notes[0] and "Jensen-Shannon" in notes[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=reference_flags.__name__):
        parse_cli(parser(), ["--kl_method", "reference_mix", "--use_cpu", "True"])
    assert not caplog.records


@pytest.mark.parametrize(
    ("extra", "warned"),
    [([], False), (["--sample_source", "teacher"], False), (["--sample_source", "mix_token"], True)],
)
def test_online_mode_warns_only_about_a_sample_source_the_user_passed(extra, warned, caplog):
    with caplog.at_level(logging.WARNING, logger=reference_flags.__name__):
        parse_cli(parser(), ["--mode", "online", "--use_cpu", "True", *extra])
    assert any("--sample_source" in r.getMessage() for r in caplog.records) == warned


def test_max_train_samples_and_source_prefix_reach_the_training_set(tmp_path, monkeypatch):
    from osd.distill import data

    seen = []
    original = data.ConversationDataset.__init__

    def recording_init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        seen.append((len(self), self.query_prefix))

    monkeypatch.setattr(data.ConversationDataset, "__init__", recording_init)
    student, teacher = save_pair(tmp_path, llama)
    path = write_conversations(tmp_path / "d.json")
    main(["--student_model_path", student, "--teacher_model_path", teacher, "--data_path", path,
          "--output_dir", str(tmp_path / "o"), "--max_steps", "1", "--max_new_tokens", "2", "--report_to", "none",
          "--max_train_samples", "2", "--source_prefix", "Q: ", "--per_device_train_batch_size", "2",
          "--save_strategy", "no", "--use_cpu", "True"])  # fmt: skip
    assert seen == [(2, "Q: ")]
    item = data.ConversationDataset(path, build_tokenizer(), 64, query_prefix="Q: ")[0]
    plain = data.ConversationDataset(path, build_tokenizer(), 64)[0]
    assert len(item["prompt_ids"]) > len(plain["prompt_ids"])


@torch.no_grad()
def greedy_alpha(draft, target, prompts: list[list[int]], gamma: int, max_new_tokens: int, eos: int) -> float:
    """Token-weighted greedy acceptance rate of speculative decoding, from the target's own `generate`
    and one teacher-forced draft forward per prompt (no engine): the output is the target's greedy
    decoding G; a step at position i proposes k = min(gamma, tokens left - 1) tokens, accepts the n
    whose draft choice (after the prompt and G[:j]) is G[j], and counts min(n + 1, k) positions
    (n when the last accepted token is EOS, after which nothing is proposed)."""
    accepted = counted = 0
    for ids in prompts:
        prompt = torch.tensor([ids])
        out = target.generate(
            prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=max_new_tokens, do_sample=False,
            eos_token_id=eos, pad_token_id=0,
        )[0]  # fmt: skip
        if target.config.is_encoder_decoder:  # out: the decoder start token, then G
            gen = out[1:]
            choice = draft(input_ids=prompt, decoder_input_ids=out[None, :-1]).logits[0].argmax(-1)
        else:
            gen = out[len(ids) :]
            choice = draft(out[None]).logits[0, len(ids) - 1 : -1].argmax(-1)
        i = 0
        while i < len(gen):
            k = min(gamma, max_new_tokens - i - 1)
            n = 0
            while n < k and choice[i + n] == gen[i + n]:
                n += 1
                if gen[i + n - 1] == eos:  # proposals end at a drafted EOS
                    k = n
            accepted, counted, i = accepted + n, counted + min(n + 1, k), i + n + 1
    return accepted / counted


def trained_alpha(run, teacher: str, prompts: list[list[int]], argv: list[str], max_new_tokens: int) -> float:
    """greedy_alpha of the student saved in `run` against `teacher`, with the gamma `argv` sets."""
    _, _, args = parse_cli(parser(), argv)
    auto = (
        AutoModelForSeq2SeqLM
        if AutoConfig.from_pretrained(teacher).is_encoder_decoder
        else AutoModelForCausalLM
    )
    student, target = auto.from_pretrained(run).eval(), auto.from_pretrained(teacher).eval()
    return greedy_alpha(
        student, target, prompts, args.max_propose_num, max_new_tokens, build_tokenizer().eos_token_id
    )


def recording_prompts(monkeypatch) -> list[list[int]]:
    """The distinct prompts SpeculativeDecoder.generate is called with from now on, in order."""
    prompts: list[list[int]] = []
    generate = SpeculativeDecoder.generate

    def recording_generate(self, input_ids, *args, **kwargs):
        if input_ids[0].tolist() not in prompts:
            prompts.append(input_ids[0].tolist())
        return generate(self, input_ids, *args, **kwargs)

    monkeypatch.setattr(SpeculativeDecoder, "generate", recording_generate)
    return prompts


def test_a_reference_offline_line_runs_with_only_model_and_data_paths_changed(tmp_path, monkeypatch):
    script, argv = next(c for c in COMMANDS if c[0].startswith("bash_scripts/gsm8k/offline.sh"))
    student, teacher = save_pair(tmp_path, llama)
    data = write_conversations(tmp_path / "d.json")
    paths = {"student_model_path": student, "teacher_model_path": teacher, "data_path": data}
    paths |= {"eval_data_path": data, "output_dir": str(tmp_path / "run")}
    prompts = recording_prompts(monkeypatch)
    run_argv = [*on_cpu(argv, **paths), "--max_new_tokens", "8", "--report_to", "none"]
    metrics = main(run_argv)
    # eval per epoch (2 epochs of one step each: 6 records < one batch of 32) and "Standard" before
    assert [m["step"] for m in read_metrics(tmp_path / "run") if "eval_alpha" in m] == [0, 1, 2]
    # the final alpha is the trained student's on the 6 eval prompts, with the line's gamma (5)
    assert len(prompts) == len(QUERIES)
    expected = trained_alpha(tmp_path / "run", teacher, prompts, run_argv, 8)
    assert metrics["eval_alpha"] == pytest.approx(expected, abs=1e-12)


def test_a_reference_t5_line_runs_with_only_model_and_data_paths_changed(tmp_path, monkeypatch):
    script, argv = next(c for c in COMMANDS if c[0].startswith("bash_scripts/t5/offline.sh"))
    student, teacher = save_pair(tmp_path, t5)
    monkeypatch.setattr(reference_flags, "RAW_DATA", tmp_path)  # --dataset_name gsm8k reads the local files
    write_conversations(tmp_path / "gsm8k_train.json", with_answers=False)
    write_conversations(tmp_path / "gsm8k_test.json")
    paths = {
        "student_model_path": student,
        "teacher_model_path": teacher,
        "output_dir": str(tmp_path / "run"),
    }
    prompts = recording_prompts(monkeypatch)
    run_argv = [*on_cpu(argv, **paths), "--max_new_tokens", "8", "--report_to", "none"]
    metrics = main(run_argv)
    # the final alpha is the trained student's on the 6 gsm8k test prompts
    assert len(prompts) == len(QUERIES)
    expected = trained_alpha(tmp_path / "run", teacher, prompts, run_argv, 8)
    assert metrics["eval_alpha"] == pytest.approx(expected, abs=1e-12)


# our per-dataset scripts -> the reference script whose settings they keep, and their arguments
OUR_SCRIPTS = {
    **{
        f"bash_scripts/{d}/offline.sh": ["student", "forward"]
        for d in ("spider", "gsm8k", "finance", "code-python")
    },
    **{f"bash_scripts/{d}/online.sh": [] for d in ("spider", "gsm8k", "finance", "code-python")},
    "bash_scripts/t5/offline.sh": ["gsm8k", "student", "forward"],
    "bash_scripts/t5/online.sh": ["gsm8k", "student", "forward"],
}
SETTINGS = (
    "mode", "num_train_epochs", "per_device_train_batch_size", "gradient_accumulation_steps", "learning_rate",
    "lr_scheduler_type", "weight_decay", "max_grad_norm", "max_propose_num", "eval_strategy",
    "online_update_interval", "online_eval_interval", "online_loss_positions",
)  # fmt: skip


def script_call(script: str, args: list[str], tmp_path: Path) -> list[str]:
    """The osd.train flags `script` runs, printed by a stand-in python."""
    import subprocess

    fake = tmp_path / "bin" / "python"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    fake.chmod(0o755)
    env = {"PATH": f"{fake.parent}:/usr/bin:/bin", "PYTHON": str(fake), "HOME": str(tmp_path)}
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        ["bash", script, str(tmp_path / "out"), *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    lines = out.stdout.splitlines()
    return lines[lines.index("osd.train") + 1 :]


@pytest.mark.parametrize("script", sorted(OUR_SCRIPTS))
def test_per_dataset_scripts_keep_the_references_settings(script, tmp_path):
    _, reference = next(c for c in COMMANDS if c[0].split()[0] == script)
    ours = script_call(script, OUR_SCRIPTS[script], tmp_path)
    (_, ref_data, ref_args), (_, our_data, our_args) = (
        parse_cli(parser(), on_cpu(a)) for a in (reference, ours)
    )
    assert our_data.model_max_length == ref_data.model_max_length
    for name in SETTINGS:
        assert getattr(our_args, name) == getattr(ref_args, name), name
    if ref_args.lr_scheduler_type != "constant":  # a constant schedule has no warmup
        assert our_args.warmup_steps == ref_args.warmup_steps


def test_defaults_are_the_references():
    args = DistillTrainingArguments(output_dir="unused", use_cpu=True)
    assert (args.sample_source, args.max_grad_norm, args.kl_method, args.optim) == (
        "student",
        0.0,
        "forward",
        "adamw_torch",
    )
