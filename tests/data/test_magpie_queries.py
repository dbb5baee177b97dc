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
