"""osd.spec.gamma: one rule for gamma everywhere (an int >= 0 or "auto"), refusals that name the flag and
the reason, and the same rule behind the engine, the trainer's flag, the analysis tools and the drivers."""

from __future__ import annotations

import argparse

import pytest

from osd.spec.gamma import AUTO, NEEDS_PROPOSALS, NO_POLICY, add_gamma_flag, parse_gamma
from tests.tiny_models import draft_from_target, tiny_model


@pytest.mark.parametrize(
    ("value", "expected"), [(3, 3), ("3", 3), (" 7 ", 7), (0, 0), ("0", 0), ("auto", AUTO)]
)
def test_valid_values_parse(value, expected):
    assert parse_gamma(value) == expected


@pytest.mark.parametrize("value", [-1, "-2", "2.5", 2.5, "fast", "", None, True, "03"])
def test_malformed_values_name_the_flag(value):
    with pytest.raises(ValueError, match=r"--draft_tokens must be an integer >= 0 or 'auto'"):
        parse_gamma(value, "--draft_tokens")


def test_refusals_name_the_flag_and_the_reason():
    with pytest.raises(ValueError, match=r"--max_propose_num 0 .* not available here: alpha is measured"):
        parse_gamma(0, plain_decoding=NEEDS_PROPOSALS)
    with pytest.raises(
        ValueError, match=r"--max_propose_num 'auto' is not available here: this tool measures"
    ):
        parse_gamma("auto", auto=NO_POLICY)
    assert parse_gamma(1, plain_decoding=NEEDS_PROPOSALS, auto=NO_POLICY) == 1


def test_driver_flag_takes_both_names_and_refuses_as_a_usage_error(capsys):
    parser = argparse.ArgumentParser()
    add_gamma_flag(parser, 4, plain_decoding=NEEDS_PROPOSALS)
    assert parser.parse_args([]).gamma == 4
    assert parser.parse_args(["--max_propose_num", "2"]).gamma == 2
    assert parser.parse_args(["--gamma", "auto"]).gamma == AUTO
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["--gamma", "0"])
    assert exit_info.value.code == 2 and "alpha is measured on proposed tokens" in capsys.readouterr().err


def test_engine_trainer_and_serving_apply_the_same_rule(tmp_path):
    from osd.distill.config import DistillTrainingArguments
    from osd.serving.config import ServingArguments
    from osd.spec import SpeculativeDecoder

    target = tiny_model("llama")
    draft = draft_from_target(target, noise=0.1)
    assert SpeculativeDecoder(draft, target, gamma=0).gamma == 0  # the engine's plain-decoding baseline
    assert SpeculativeDecoder(draft, target, gamma="2").gamma == 2
    with pytest.raises(ValueError, match="gamma must be an integer >= 0 or 'auto', got -1"):
        SpeculativeDecoder(draft, target, gamma=-1)
    assert DistillTrainingArguments(output_dir=str(tmp_path), max_propose_num="auto").max_propose_num == AUTO
    with pytest.raises(ValueError, match="--max_propose_num 0"):
        DistillTrainingArguments(output_dir=str(tmp_path), max_propose_num=0)
    assert ServingArguments(data_path="s", output_dir="o", max_propose_num=0).max_propose_num == 0
    with pytest.raises(ValueError, match="--max_propose_num 'auto' is not available here: vLLM"):
        ServingArguments(data_path="s", output_dir="o", max_propose_num="auto")
