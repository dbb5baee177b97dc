"""Each clean script on hand-written raw files in its dataset's real schema, checked field by field.

Expected values are read from the fixture files directly (json/csv), not from the collector.
"""

import csv
import importlib
import json
from pathlib import Path

import pytest

from osd.conversations import assistant_answer, load_conversations, user_query

FIX = Path(__file__).resolve().parent / "fixtures"


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run(script: str, tmp_path: Path, *flags: str) -> Path:
    importlib.import_module(script).main(argv=["--output_dir", str(tmp_path), *flags])
    return tmp_path


def by_index(records: list[dict], name: str, split: str) -> dict[int, dict]:
    """Records keyed by the raw index their id ends in (ids are {name}_{split}_{index})."""
    prefix = f"{name}_{split}_"
    assert all(r["id"].startswith(prefix) for r in records), [r["id"] for r in records]
    return {int(r["id"][len(prefix) :]): r for r in records}


def test_gsm8k_question_to_answer_and_incomplete_records_skipped(tmp_path, capsys):
    run("clean_gsm8k", tmp_path, "--raw_path", str(FIX / "gsm8k"))
    raw = jsonl(FIX / "gsm8k" / "train.jsonl")
    got = by_index(load_conversations(tmp_path / "gsm8k_train.json"), "gsm8k", "train")
    # records 2 (no answer) and 4 (empty question) are incomplete
    assert sorted(got) == [0, 1, 3]
    for i, rec in got.items():
        assert rec["conversation"] == [
            {"role": "user", "content": raw[i]["question"]},
            {"role": "assistant", "content": raw[i]["answer"]},
        ]
        assert rec["dataset"] == "gsm8k"
    test = load_conversations(tmp_path / "gsm8k_test.json")
    assert [user_query(r) for r in test] == [r["question"] for r in jsonl(FIX / "gsm8k" / "test.jsonl")]
    assert "3 records written (5 read, 2 skipped" in capsys.readouterr().out


def test_spider_instruction_question_to_query_and_dev_file_as_validation(tmp_path):
    from clean_spider import INSTRUCTION

    run("clean_spider", tmp_path, "--raw_path", str(FIX / "spider"))
    raw = json.loads((FIX / "spider" / "train.json").read_text())
    got = by_index(load_conversations(tmp_path / "spider_train.json"), "spider", "train")
    assert sorted(got) == [0, 1, 3]  # record 2 has no query
    for i, rec in got.items():
        assert user_query(rec) == INSTRUCTION + raw[i]["question"]
        assert assistant_answer(rec) == raw[i]["query"]
    dev = json.loads((FIX / "spider" / "dev.json").read_text())
    val = load_conversations(tmp_path / "spider_validation.json")
    assert [assistant_answer(r) for r in val] == [r["query"] for r in dev]


def test_finance_input_appended_and_eval_carved_from_train(tmp_path):
    raw = json.loads((FIX / "finance" / "Cleaned_date.json").read_text())
    run(
        "clean_finance",
        tmp_path,
        "--raw_path",
        str(FIX / "finance" / "Cleaned_date.json"),
        "--eval_size",
        "2",
    )
    train = by_index(
        load_conversations(tmp_path / "gbharti_finance-alpaca_train.json"), "gbharti_finance-alpaca", "train"
    )
    evals = by_index(
        load_conversations(tmp_path / "gbharti_finance-alpaca_eval.json"), "gbharti_finance-alpaca", "eval"
    )
    assert len(evals) == 2 and len(train) == 3 and not set(train) & set(evals)
    assert 3 not in train | evals  # empty output
    for i, rec in (train | evals).items():
        query = raw[i]["instruction"] + (f"\n{raw[i]['input']}" if raw[i]["input"] else "")
        assert rec["conversation"] == [
            {"role": "user", "content": query},
            {"role": "assistant", "content": raw[i]["output"]},
        ]
        assert rec["dataset"] == "finance"
    assert "Principal: 1000" in user_query((train | evals)[2])


def test_code_search_hub_and_original_field_names_and_language_filter(tmp_path, capsys):
    from clean_code_search import INSTRUCTION

    run("clean_code_search", tmp_path, "--raw_path", str(FIX / "code_search_net"))
    raw = jsonl(FIX / "code_search_net" / "train.jsonl")
    got = by_index(load_conversations(tmp_path / "code_search_net_train.json"), "code_search_net", "train")
    assert sorted(got) == [0, 1]  # 2: empty docstring (skipped), 3: javascript (filtered)
    for i, rec in got.items():
        assert user_query(rec) == INSTRUCTION + raw[i]["func_documentation_string"]
        assert assistant_answer(rec) == raw[i]["func_code_string"]
    orig = jsonl(FIX / "code_search_net" / "test.jsonl")
    test = load_conversations(tmp_path / "code_search_net_test.json")
    assert [(user_query(r), assistant_answer(r)) for r in test] == [
        (INSTRUCTION + r["docstring"], r["code"]) for r in orig
    ]
    assert "2 records written (4 read, 1 skipped for a missing field, 1 filtered)" in capsys.readouterr().out


def test_piqa_label_picks_solution_and_hidden_test_labels_give_no_answer(tmp_path):
    run("clean_piqa", tmp_path, "--raw_path", str(FIX / "piqa"))
    with (FIX / "piqa" / "train.csv").open(newline="") as f:
        raw = list(csv.DictReader(f))
    got = by_index(load_conversations(tmp_path / "piqa_train.json"), "piqa", "train")
    assert sorted(got) == [0, 1, 2]  # record 3 has no sol1
    for i, rec in got.items():
        assert user_query(rec) == raw[i]["goal"]
        assert assistant_answer(rec) == raw[i]["sol1" if raw[i]["label"] == "0" else "sol2"]
    test = load_conversations(tmp_path / "piqa_test.json")
    assert len(test) == 2 and all(assistant_answer(r) is None and len(r["conversation"]) == 1 for r in test)


def test_starcoder_query_is_token_window_and_answer_its_continuation(tmp_path):
    from clean_starcoder import whitespace_pieces

    flags = ["--prompt_start", "4", "--prompt_end", "12", "--answer_tokens", "6", "--eval_size", "1"]
    run("clean_starcoder", tmp_path, "--raw_path", str(FIX / "starcoderdata"), *flags)
    raw = jsonl(FIX / "starcoderdata" / "train.jsonl")
    name = "assembly_bigcode_starcoderdata"
    train = by_index(load_conversations(tmp_path / f"{name}_train.json"), name, "train")
    evals = by_index(load_conversations(tmp_path / f"{name}_eval.json"), name, "eval")
    assert len(evals) == 1 and sorted(train | evals) == [0, 1, 3]  # 2 is too short, 4 has no content
    for i, rec in (train | evals).items():
        words = raw[i]["content"].split()
        assert user_query(rec).split() == words[4:12]
        assert assistant_answer(rec).split() == words[12:18]
        assert rec["dataset"] == "starcoder"
    assert "".join(whitespace_pieces(raw[0]["content"])) == raw[0]["content"].rstrip()


def test_arena_first_user_turn_with_language_and_english_only(tmp_path):
    raw = jsonl(FIX / "arena" / "train.json")  # JSON lines under .json, as `datasets` exports
    run("clean_arena", tmp_path, "--raw_path", str(FIX / "arena"))
    got = by_index(load_conversations(tmp_path / "arena_train.json"), "arena", "train")
    assert sorted(got) == [0, 1, 2, 3, 6]  # 4: no conversation_a (skipped), 5: empty user turn (filtered)
    for i, rec in got.items():
        conv = raw[i]["conversation_a"]
        assert rec["conversation"] == conv[:2]  # first user turn and model_a's reply
        assert rec["language"] == raw[i]["language"] and rec["tstamp"] == raw[i]["tstamp"]
    assert len(got[1]["conversation"]) == 2  # a multi-turn conversation keeps its first exchange only
    run("clean_arena", tmp_path, "--raw_path", str(FIX / "arena"), "--english_only")
    english = load_conversations(tmp_path / "arena_train.json")
    assert [r["id"] for r in english] == ["arena_train_0", "arena_train_1", "arena_train_6"]


@pytest.mark.parametrize(
    ("script", "folder", "name", "source", "target", "prefix_attr"),
    [
        ("clean_cnn_dailymail", "cnn_dailymail", "cnn_dailymail", "article", "highlights", "INSTRUCTION"),
        ("clean_xsum", "xsum", "xsum", "document", "summary", "INSTRUCTION"),
    ],
)
def test_summarisation_document_to_summary(tmp_path, script, folder, name, source, target, prefix_attr):
    prefix = getattr(importlib.import_module(script), prefix_attr)
    run(script, tmp_path, "--raw_path", str(FIX / folder))
    for split in ("train", "test"):
        files = list((FIX / folder).glob(f"{split}.*"))
        if files[0].suffix == ".csv":
            with files[0].open(newline="") as f:
                raw = list(csv.DictReader(f))
        else:
            raw = jsonl(files[0])
        complete = [i for i, r in enumerate(raw) if r.get(source) and r.get(target)]
        got = by_index(load_conversations(tmp_path / f"{name}_{split}.json"), name, split)
        assert sorted(got) == complete
        if split == "train":
            assert len(complete) < len(raw)  # the fixture has an incomplete record to skip
        for i, rec in got.items():
            assert rec["conversation"] == [
                {"role": "user", "content": prefix + raw[i][source]},
                {"role": "assistant", "content": raw[i][target]},
            ]


def test_script_runs_from_data_folder_as_in_the_reference(tmp_path):
    """`cd data && python clean_gsm8k.py ...` works without the package installed on the path."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    cmd = [sys.executable, "clean_gsm8k.py", "--raw_path", str(FIX / "gsm8k"), "--output_dir", str(tmp_path)]
    done = subprocess.run(
        cmd, cwd=FIX.parents[2] / "data", env=env, capture_output=True, text=True, check=True
    )
    assert "gsm8k_train.json: 3 records written" in done.stdout
    assert len(load_conversations(tmp_path / "gsm8k_test.json")) == 2


def test_hellaswag_ctx_to_labelled_ending_and_dsd_prompts_as_queries(tmp_path, capsys):
    run("clean_hellaswag", tmp_path, "--raw_path", str(FIX / "hellaswag"))
    raw = jsonl(FIX / "hellaswag" / "train.jsonl")
    got = by_index(load_conversations(tmp_path / "hellaswag_train.json"), "hellaswag", "train")
    assert sorted(got) == [0, 1, 3]  # record 2 has an empty ctx
    for i, rec in got.items():
        assert user_query(rec) == raw[i]["ctx"]
        assert assistant_answer(rec) == raw[i]["endings"][int(raw[i]["label"])]
        assert rec["topic"] == raw[i]["activity_label"] and rec["dataset"] == "hellaswag"
    val = load_conversations(tmp_path / "hellaswag_validation.json")
    assert sorted(assistant_answer(r) for r in val if assistant_answer(r)) == [
        "are then sprinkled with brown sugar."
    ]
    assert sum(assistant_answer(r) is None for r in val) == 1  # its label is hidden ("")

    dsd = FIX / "hellaswag" / "dsd_hellaswag.json"
    run(
        "clean_hellaswag",
        tmp_path / "dsd",
        "--raw_path",
        str(dsd),
        "--splits",
        "validation",
        "--eval_size",
        "0",
    )
    prompts = [r["prompt"] for r in jsonl(dsd) if r["prompt"]]
    got = load_conversations(tmp_path / "dsd" / "hellaswag_validation.json")
    assert sorted(user_query(r) for r in got) == sorted(prompts)
    assert all(len(r["conversation"]) == 1 for r in got)
