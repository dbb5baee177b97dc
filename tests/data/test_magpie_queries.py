"""data/magpie_queries.py on the tiny teacher: seeded batches, resume to the same queries, openers."""

import json

import magpie_queries
import pytest

from osd.conversations import load_conversations
from osd.paths import TINY_TEACHER_PATH

FLAGS = ["--model", str(TINY_TEACHER_PATH), "--batch_size", "2", "--max_new_tokens", "24", "--min_chars", "1"]


def queries(path) -> list[str]:
    return [r["conversation"][0]["content"] for r in load_conversations(path)]


def test_a_stopped_run_continues_to_the_queries_of_an_uninterrupted_one(tmp_path):
    magpie_queries.main([*FLAGS, "--num_queries", "6", "--output", str(tmp_path / "whole.json")])
    magpie_queries.main([*FLAGS, "--num_queries", "3", "--output", str(tmp_path / "parts.json")])
    magpie_queries.main([*FLAGS, "--num_queries", "6", "--output", str(tmp_path / "parts.json")])
    assert queries(tmp_path / "parts.json") == queries(tmp_path / "whole.json")
    assert len(set(queries(tmp_path / "whole.json"))) == 6
    with pytest.raises(ValueError, match="other settings"):
        magpie_queries.main(
            [*FLAGS, "--seed", "1", "--num_queries", "8", "--output", str(tmp_path / "parts.json")]
        )


def test_openers_start_the_user_turn_in_turn(tmp_path):
    out = tmp_path / "q.json"
    magpie_queries.main(
        [*FLAGS, "--num_queries", "5", "--openers", "SELECT", "What is", "--output", str(out)]
    )
    lines = (tmp_path / "q.partial.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["settings"]["openers"] == ["SELECT", "What is"]
    batches = [json.loads(line)["queries"] for line in lines[1:]]
    assert len(batches) >= 3
    for b, batch in enumerate(batches):
        opener = magpie_queries.opener_of(["SELECT", "What is"], b)
        assert all(q.startswith(opener) for q in batch if q is not None), (b, batch)
    assert [magpie_queries.opener_of(["A", "B"], b) for b in range(4)] == ["", "A", "B", ""]


def test_a_quota_no_sample_can_fill_stops_saying_what_each_filter_rejected(tmp_path):
    """Issue 49: with a --min_chars no query reaches, the sampling loop ran forever."""
    out = tmp_path / "q.json"
    argv = [*FLAGS, "--num_queries", "2", "--tries_per_query", "2", "--output", str(out)]
    with pytest.raises(ValueError) as error:
        magpie_queries.main([*argv, "--min_chars", "100000"])
    message = str(error.value)
    assert message.startswith("0 of --num_queries 2 kept after 4 sampled (--tries_per_query 2): ")
    unfinished, short = (
        int(message.split(word)[0].split()[-1]) for word in (" did not end", " were shorter")
    )
    # which filter rejects a sample depends on the model's text; every sample is counted by one of them
    assert unfinished + short == 4 and "shorter than --min_chars 100000" in message
    assert not out.exists()
    sampled = (tmp_path / "q.partial.jsonl").read_text().splitlines()
    assert len(sampled) == 1 + 2  # the settings and the 2 batches sampled
    magpie_queries.main(
        [*argv, "--tries_per_query", "50"]
    )  # --min_chars 1: continues from the batches sampled
    assert len(queries(out)) == 2
    assert (tmp_path / "q.partial.jsonl").read_text().splitlines()[: len(sampled)] == sampled


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--top_p", "1.5"), ("--top_p", "0"), ("--temperature", "0"), ("--min_chars", "0"),
     ("--tries_per_query", "0"), ("--num_threads", "-1")],
)  # fmt: skip
def test_a_flag_out_of_range_is_refused_naming_it(flag, value, tmp_path):
    with pytest.raises(ValueError, match=f"^{flag} must be"):
        magpie_queries.main([*FLAGS, flag, value, "--output", str(tmp_path / "q.json")])
    assert not (tmp_path / "q.partial.jsonl").exists()


def test_a_dtype_typo_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit):
        magpie_queries.main([*FLAGS, "--dtype", "bf16", "--output", str(tmp_path / "q.json")])
    assert "argument --dtype: invalid choice: 'bf16'" in capsys.readouterr().err
