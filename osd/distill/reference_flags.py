"""The reference's command lines, accepted as they are: its flags rewritten to ours before parsing.

`parse_cli` parses the command lines of the reference's `distill/train.py` and `distill/train_mlm.py`
(T5) with the reference's meaning; tests/distill/fixtures/reference_command_lines.txt holds every line
its bash scripts build. `translate` rewrites, with a one-line notice each:
- flags HF renamed since: --evaluation_strategy -> --eval_strategy, --gradient_checkpointing ->
  --activation_checkpointing, --warmup_ratio R -> --warmup_steps R (installed transformers: a
  --warmup_steps value below 1 is a ratio of the training steps);
- --model_name_or_path -> --student_model_path;
- the T5 entry point's flags: --dataset_name/--dataset_config_name (with --do_eval) -> --data_path/
  --eval_data_path (REFERENCE_DATASETS), --source_max_length -> --model_max_length, --all_token_mask ->
  --online_loss_positions, --fast_eval -> --max_eval_samples 200;
- flags the reference parsed but its distillation never read (NO_EFFECT): dropped, saying so.
--max_train_samples, --max_eval_samples and --source_prefix are our own flags (osd.distill.config).
A reference flag whose meaning cannot hold here (--do_predict, --max_predict_samples: no predict stage)
is an error.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from transformers import HfArgumentParser

from osd.distill.config import DistillTrainingArguments

logger = logging.getLogger(__name__)

RENAMED = {
    "--evaluation_strategy": "--eval_strategy",
    "--gradient_checkpointing": "--activation_checkpointing",
    "--model_name_or_path": "--student_model_path",
    "--source_max_length": "--model_max_length",
}
# T5 flags the reference parsed but never used in distillation: it trained on generate(128) outputs
# (never on the data set's targets) and measured alpha with its own generator (never beam search or a metric)
NO_EFFECT = {
    "--train_target_max_length": "the reference truncated the data set's targets, which it never trained on",
    "--val_target_max_length": "the reference used --train_target_max_length for every split",
    "--test_target_max_length": "the reference used --train_target_max_length for every split",
    "--ignore_pad_token_for_loss": "pads never count in the loss here; the reference's padded targets were unused",
    "--num_beams": "alpha is measured by speculative decoding; the reference never beam-searched either",
    "--metric": "the reference computed no metric in distillation (rouge only with --predict_with_generate)",
}
FAST_EVAL_SAMPLES = 200  # the reference's --fast_eval kept 200 random eval records
RAW_DATA = Path("data/raw_data")
# the reference's --dataset_name -> (train, eval) file stems under data/raw_data (data/clean_*.py);
# "<name>_with_answers" trains on the teacher's answers (data/generate_answer.py: <train stem>_with_answer.json)
REFERENCE_DATASETS: dict[str, tuple[str, str]] = {
    "gsm8k": ("gsm8k_train", "gsm8k_test"),
    "spider": ("spider_train", "spider_validation"),
    "gbharti/finance-alpaca": ("gbharti_finance-alpaca_train", "gbharti_finance-alpaca_eval"),
    "code_search_net": ("code_search_net_train", "code_search_net_test"),
}
WITH_ANSWERS = {
    "gsm8k_with_answers": "gsm8k",
    "spider_with_answers": "spider",
    "finance_with_answers": "gbharti/finance-alpaca",
    "python_with_answers": "code_search_net",
}
DATASET_CONFIGS = {"code_search_net": "python"}  # the only configuration with local files
PREDICT = ("--do_predict", "--max_predict_samples")  # the reference's T5 predict stage: none here
HANDLED = {
    *RENAMED,
    *NO_EFFECT,
    *PREDICT,
    "--warmup_ratio",
    "--all_token_mask",
    "--fast_eval",
    "--dataset_name",
    "--dataset_config_name",
}


def _to_bool(flag: str, value: str | None) -> bool:
    if value is None:  # a bare flag means True, as in HfArgumentParser
        return True
    if value.lower() in ("true", "yes", "1", "t", "y"):
        return True
    if value.lower() in ("false", "no", "0", "f", "n"):
        return False
    raise ValueError(f"{flag} takes True or False, got {value!r}")


def split_flags(argv: Sequence[str]) -> list[tuple[str, str | None]]:
    """argv -> (flag, value) pairs; a flag without a value (a bare boolean, -h) has None.

    `--flag=value` and `--flag value` both work; a value never starts with "--". A stray token
    becomes a flag of its own, which HfArgumentParser then refuses by name.
    """
    pairs: list[tuple[str, str | None]] = []
    i = 0
    while i < len(argv):
        flag, eq, inline = argv[i].partition("=")
        value: str | None = inline if eq else None
        if not eq and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            value, i = argv[i + 1], i + 1
        pairs.append((flag, value))
        i += 1
    return pairs


def _dataset_paths(name: str, config: str | None) -> tuple[Path, Path]:
    """--dataset_name [--dataset_config_name] -> (train file, eval file) under RAW_DATA."""
    base = WITH_ANSWERS.get(name, name)
    if base not in REFERENCE_DATASETS:
        known = sorted([*REFERENCE_DATASETS, *WITH_ANSWERS])
        raise ValueError(
            f"--dataset_name {name}: no local conversation files for it (known: {known}); "
            "write them with data/clean_*.py and pass --data_path/--eval_data_path instead"
        )
    if config not in (None, DATASET_CONFIGS.get(base)):
        raise ValueError(
            f"--dataset_config_name {config}: {name} has local files only for "
            f"{DATASET_CONFIGS.get(base) or 'no configuration'}; pass --data_path for another one"
        )
    train, evaluation = REFERENCE_DATASETS[base]
    if name in WITH_ANSWERS:
        train = f"{train}_with_answer"
    return RAW_DATA / f"{train}.json", RAW_DATA / f"{evaluation}.json"


def translate(argv: Sequence[str]) -> list[str]:
    """The reference's flags rewritten to ours (module docstring); every other flag unchanged."""
    pairs = split_flags(argv)
    given = {flag: value for flag, value in pairs}
    out: list[str] = []
    for flag, value in pairs:
        if flag not in HANDLED:
            out += [flag] if value is None else [flag, value]
        elif flag in RENAMED:
            new = RENAMED[flag]
            if new in given and given[new] != value:
                raise ValueError(f"{flag} {value} and {new} {given[new]} disagree; pass only {new}")
            logger.warning("reference flag %s -> %s", flag, new)
            out += [new] if value is None else [new, value]
        elif flag in NO_EFFECT:
            logger.warning("reference flag %s has no effect: %s", flag, NO_EFFECT[flag])
        elif flag == "--warmup_ratio":
            ratio = float(_required(flag, value))
            if not 0 <= ratio < 1:
                raise ValueError(
                    f"--warmup_ratio must be in [0, 1), got {ratio}; pass --warmup_steps N for N steps"
                )
            logger.warning(
                "reference flag --warmup_ratio %s -> --warmup_steps %s (below 1: a ratio)", value, ratio
            )
            out += ["--warmup_steps", str(ratio)]
        elif flag == "--all_token_mask":
            positions = "all" if _to_bool(flag, value) else "wrong"
            logger.warning("reference flag --all_token_mask -> --online_loss_positions %s", positions)
            out += ["--online_loss_positions", positions]
        elif flag == "--fast_eval":
            if _to_bool(flag, value) and "--max_eval_samples" not in given:
                logger.warning("reference flag --fast_eval -> --max_eval_samples %d", FAST_EVAL_SAMPLES)
                out += ["--max_eval_samples", str(FAST_EVAL_SAMPLES)]
        elif flag in PREDICT:
            if flag == "--max_predict_samples" or _to_bool(flag, value):
                raise ValueError(
                    f"{flag}: osd.train has no predict stage; measure alpha on held-out records "
                    "with --eval_data_path and --max_eval_samples"
                )
        # --dataset_name and --dataset_config_name: below, as they need each other and --do_eval
    if "--dataset_name" in given:
        out += _dataset_flags(given)
    elif "--dataset_config_name" in given:
        raise ValueError("--dataset_config_name needs --dataset_name")
    return out


def _required(flag: str, value: str | None) -> str:
    if value is None:
        raise ValueError(f"{flag} needs a value")
    return value


def _dataset_flags(given: dict[str, str | None]) -> list[str]:
    """--dataset_name's files as --data_path (and --eval_data_path with --do_eval, as the reference)."""
    if "--data_path" in given:
        raise ValueError("pass either --dataset_name or --data_path, not both")
    name = _required("--dataset_name", given["--dataset_name"])
    train, evaluation = _dataset_paths(name, given.get("--dataset_config_name"))
    flags = ["--data_path", str(train)]
    do_eval = "--do_eval" in given and _to_bool("--do_eval", given["--do_eval"])
    if do_eval and "--eval_data_path" not in given:
        flags += ["--eval_data_path", str(evaluation)]
    logger.warning(
        "reference flag --dataset_name %s -> %s (for --do_eval the reference held out part of its train split)",
        name,
        " ".join(flags),
    )
    return flags


def parse_cli(parser: HfArgumentParser, argv: Sequence[str]) -> tuple:
    """`parser`'s dataclasses (one of them DistillTrainingArguments) from a command line that may use the
    reference's flags; logs the start-up notices."""
    translated = translate(argv)
    parsed = parser.parse_args_into_dataclasses(args=translated)
    training = next(p for p in parsed if isinstance(p, DistillTrainingArguments))
    if training.kl_method == "jsd":
        logger.warning(
            "--kl_method jsd is the generalised Jensen-Shannon divergence (beta %s); the reference code's 'jsd' "
            "was 0.9 * forward KL + 0.1 * reverse KL, available as --kl_method reference_mix",
            training.jsd_beta,
        )
    explicit = {flag for flag, _ in split_flags(translated)}
    if training.mode == "online" and "--sample_source" in explicit and training.sample_source != "teacher":
        logger.warning(
            "--sample_source %s is ignored in online mode: the draft is distilled on the served sequence, "
            "which the target's verification produced",
            training.sample_source,
        )
    return parsed
