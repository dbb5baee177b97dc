"""data/token_counts.py: counts of the answers' tokens, the file a sub-vocabulary head picks from."""

import json

import pytest
import token_counts
from transformers import AutoTokenizer

from osd.paths import TINY_TEACHER_PATH
from osd.spec.draft_vocab import load_token_counts, select_token_ids


def test_counts_every_answer_token_and_one_eos_per_answer(tmp_path):
    answers = ["SELECT name FROM users", "The answer is 4.", "SELECT name FROM t"]
    records = [{"id": str(i), "conversation": [{"role": "user", "content": "q"}, {"role": "assistant", "content": a}]}
               for i, a in enumerate(answers)] + [{"id": "x", "conversation": [{"role": "user", "content": "no answer"}]}]  # fmt: skip
    src, out = tmp_path / "answers.json", tmp_path / "counts.json"
    src.write_text(json.dumps(records))
    token_counts.main(["--data", str(src), "--tokenizer", str(TINY_TEACHER_PATH), "--output", str(out)])
    data = load_token_counts(out)
    tok = AutoTokenizer.from_pretrained(TINY_TEACHER_PATH)
    ids = [t for a in answers for t in tok(a, add_special_tokens=False).input_ids]
    assert data["num_answers"] == 3
    assert data["num_tokens"] == len(ids) + 3
    assert data["counts"][tok.eos_token_id] == 3
    for t in set(ids):
        assert data["counts"][t] == ids.count(t) + (3 if t == tok.eos_token_id else 0)
    most = select_token_ids(data["counts"], 2)
    assert len(most) == 2 and all(data["counts"][t] >= ids.count(t) for t in most)


def test_refuses_to_write_over_its_input_and_to_count_nothing(tmp_path):
    src = tmp_path / "q.json"
    src.write_text(json.dumps([{"id": "0", "conversation": [{"role": "user", "content": "q"}]}]))
    with pytest.raises(Exception, match="input file"):
        token_counts.main(["--data", str(src), "--tokenizer", str(TINY_TEACHER_PATH), "--output", str(src)])
    with pytest.raises(ValueError, match="no assistant answers"):
        token_counts.main(
            ["--data", str(src), "--tokenizer", str(TINY_TEACHER_PATH), "--output", str(tmp_path / "c.json")]
        )


def test_a_file_that_is_not_a_counts_file_is_named(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"counts": "nope"}))
    with pytest.raises(ValueError, match="bad.json: not a token-frequency file"):
        load_token_counts(bad)
    with pytest.raises(FileNotFoundError, match="missing.json"):
        load_token_counts(tmp_path / "missing.json")
