"""data/split_train_test.py: the random split and the Arena time-binned split."""

import json
from pathlib import Path

import pytest
import split_train_test

from osd.conversations import load_conversations


def records(n: int, tstamps: list[float] | None = None) -> list[dict]:
    return [
        {
            "id": f"r{i}",
            "conversation": [
                {"role": "user", "content": f"q{i}"},
                {"role": "assistant", "content": f"a{i}"},
                {"role": "user", "content": f"follow-up {i}"},
            ],
            **({"tstamp": tstamps[i]} if tstamps else {}),
        }
        for i in range(n)
    ]


def run(tmp_path: Path, recs: list[dict], *flags: str) -> tuple[list[dict], list[dict]]:
    src = tmp_path / "in.json"
    src.write_text(json.dumps(recs))
    split_train_test.main(["--input", str(src), *flags])
    return load_conversations(tmp_path / "in_split_train.json"), load_conversations(
        tmp_path / "in_split_eval.json"
    )


def test_random_split_is_a_deterministic_partition(tmp_path):
    recs = records(40)
    train, evals = run(tmp_path, recs, "--eval_size", "7", "--seed", "5")
    assert len(evals) == 7 and len(train) == 33
    ids = [r["id"] for r in train + evals]
    assert sorted(ids) == sorted(r["id"] for r in recs)  # nothing lost, nothing duplicated
    assert [r["id"] for r in train] == [
        r["id"] for r in recs if r["id"] in {t["id"] for t in train}
    ]  # input order
    assert run(tmp_path, recs, "--eval_size", "7", "--seed", "5")[1] == evals
    assert run(tmp_path, recs, "--eval_size", "7", "--seed", "6")[1] != evals
    with pytest.raises(ValueError, match="--eval_size 40: expected between 1 and 39"):
        run(tmp_path, recs, "--eval_size", "40")


def test_time_bins_skip_empty_bins_and_truncate_eval(tmp_path, capsys):
    # two bursts of activity with a long gap: most of the 10 bins are empty (the reference crashed here)
    tstamps = [100.0 + i for i in range(6)] + [1000.0 + i for i in range(6)]
    recs = records(12, tstamps)[::-1]  # unsorted input
    train, evals = run(tmp_path, recs, "--mode", "time_bins", "--eval_size", "10", "--seed", "0")
    assert "2 of 10 time bins are non-empty" in capsys.readouterr().out
    assert len(evals) == 2 and len(train) == 10
    assert sorted(r["tstamp"] < 500 for r in evals) == [False, True]  # one per non-empty bin
    assert all(
        r["conversation"] == [r["conversation"][0]] and r["conversation"][0]["role"] == "user" for r in evals
    )
    assert all(len(r["conversation"]) == 3 for r in train)  # train keeps whole conversations
    assert [r["tstamp"] for r in train] == sorted(r["tstamp"] for r in train)


def test_time_bins_need_tstamps(tmp_path):
    with pytest.raises(ValueError, match="record 0: time_bins mode needs a numeric 'tstamp'"):
        run(tmp_path, records(3), "--mode", "time_bins")


def test_a_folder_input_splits_like_its_file(tmp_path):
    recs = records(20, [float(i) for i in range(20)])
    recs[3]["topic"] = "Games"  # a field on one record only: the others' rows hold None, dropped again
    train, evals = run(tmp_path, recs, "--eval_size", "5", "--seed", "2")
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "train.json").write_text(json.dumps(recs))
    outputs = {"--train_output": tmp_path / "f_train.json", "--eval_output": tmp_path / "f_eval.json"}
    argv = ["--input", str(folder), "--eval_size", "5", "--seed", "2"]
    with pytest.raises(
        ValueError, match="is not a file: name the outputs with --train_output and --eval_output"
    ):
        split_train_test.main(argv)
    split_train_test.main([*argv, *(str(x) for item in outputs.items() for x in item)])
    assert load_conversations(outputs["--train_output"]) == train
    assert load_conversations(outputs["--eval_output"]) == evals
