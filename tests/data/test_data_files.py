"""Every data tool: outputs never replace inputs, inputs without usable records and non-UTF-8 files
are errors that name the file (and line, and counts)."""

import json
from pathlib import Path

import pytest

from osd.conversations import ConversationFormatError, load_conversations
from osd.datafiles import DataFileError


def conversations(n: int) -> list[dict]:
    return [
        {
            "id": f"r{i}",
            "conversation": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"}],
        }
        for i in range(n)
    ]


def write(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(records))
    return path


def test_split_refuses_an_output_that_is_its_input(tmp_path):
    import split_train_test

    src = write(tmp_path / "in.json", conversations(30))
    before = src.read_bytes()
    alias = tmp_path / "sub" / ".." / "in.json"  # the same file, spelled differently
    (tmp_path / "sub").mkdir()
    with pytest.raises(DataFileError, match=r"--train_output .* is the input file .*in\.json"):
        split_train_test.main(["--input", str(src), "--eval_size", "5", "--train_output", str(alias)])
    with pytest.raises(DataFileError, match="--eval_output .* and --train_output .* are the same file"):
        split_train_test.main(
            ["--input", str(src), "--eval_size", "5", "--train_output", "o.json", "--eval_output", "o.json"]
        )
    assert src.read_bytes() == before


def test_prepare_online_refuses_an_output_that_is_an_input(tmp_path):
    import prepare_online

    a, b = write(tmp_path / "a.json", conversations(4)), write(tmp_path / "b.json", conversations(4))
    before = b.read_bytes()
    argv = ["--kind", "abrupt", "--inputs", f"a={a}", f"b={b}", "--lengths", "2", "2", "--output", str(b)]
    with pytest.raises(DataFileError, match=r"--output .*b\.json is the input file"):
        prepare_online.main(argv)
    assert b.read_bytes() == before


def test_label_arena_refuses_to_write_over_its_input(tmp_path):
    import label_arena

    recs = [{**r, "language": "English"} for r in conversations(3)]
    src = write(tmp_path / "English.json", recs)
    before = src.read_bytes()
    with pytest.raises(DataFileError, match=r"English\.json is the input file"):
        label_arena.main(["--input", str(src), "--mode", "language", "--output_dir", str(tmp_path)])
    assert src.read_bytes() == before


def test_clean_script_refuses_to_write_over_its_raw_file(tmp_path):
    import clean_gsm8k

    raw = tmp_path / "gsm8k_train.json"  # the name the script writes
    raw.write_text(json.dumps([{"question": "1+1?", "answer": "#### 2"}]))
    before = raw.read_bytes()
    with pytest.raises(DataFileError, match=r"gsm8k_train\.json is the input file"):
        clean_gsm8k.main(["--raw_path", str(raw), "--output_dir", str(tmp_path)])
    assert raw.read_bytes() == before


@pytest.mark.parametrize("strict", [False, True])
def test_csv_with_wrong_columns_is_an_error_with_counts(tmp_path, strict):
    import clean_cnn_dailymail
    from collector import MissingFieldError

    raw = tmp_path / "train.csv"
    raw.write_text("id,text,summary\n1,an article,a summary\n2,another,one more\n")
    argv = ["--raw_path", str(raw), "--output_dir", str(tmp_path / "out"), *(["--strict"] if strict else [])]
    error = MissingFieldError if strict else DataFileError
    with pytest.raises(error, match=r"train\.csv") as err:
        clean_cnn_dailymail.main(argv)
    if not strict:
        assert "no usable records (2 in the input, 2 read, 2 missing a required field, 0 filtered" in str(
            err.value
        )
        assert "'article'" in str(err.value) and "['id', 'summary', 'text']" in str(err.value)
    assert not (tmp_path / "out").exists()


def test_filtered_to_nothing_is_an_error(tmp_path):
    import clean_arena

    raw = write(
        tmp_path / "train.json",
        [{"conversation_a": [{"role": "user", "content": "hola"}], "language": "Spanish"}],
    )
    with pytest.raises(
        DataFileError,
        match=r"train\.json: no usable records \(1 in the input, 1 read, 0 missing .*, 1 filtered",
    ):
        clean_arena.main(["--raw_path", str(raw), "--output_dir", str(tmp_path / "out"), "--english_only"])


LATIN1 = "caf\xe9".encode("latin-1")


@pytest.mark.parametrize("name", ["train.csv", "train.jsonl", "train.json"])
def test_non_utf8_raw_file_names_file_and_line(tmp_path, name):
    from collector import read_raw_file

    header = b"question,answer\n" if name.endswith(".csv") else b""
    body = (
        b'"ok","fine"\n"' + LATIN1 + b'","x"\n'
        if name.endswith(".csv")
        else (b'{"question": "ok", "answer": "1"}\n{"question": "' + LATIN1 + b'", "answer": "2"}\n')
    )
    path = tmp_path / name
    path.write_bytes(header + body)
    line = 3 if header else 2
    with pytest.raises(DataFileError, match=rf"{name}, line {line}: not UTF-8 text \(byte 0xe9"):
        read_raw_file(path)


def test_non_utf8_conversation_file_names_file_and_line(tmp_path):
    path = tmp_path / "conv.json"
    path.write_bytes(b'[{"conversation":\n [{"role": "user", "content": "' + LATIN1 + b'"}]}]')
    with pytest.raises(DataFileError, match=r"conv\.json, line 2: not UTF-8"):
        load_conversations(path)


@pytest.mark.parametrize(
    ("text", "message"), [("", "empty file"), ("[]", "0 records"), ("\n\n", "empty file")]
)
def test_conversation_file_without_records_is_an_error(tmp_path, text, message):
    path = tmp_path / "empty.json"
    path.write_text(text)
    with pytest.raises(ConversationFormatError, match=rf"empty\.json: {message}"):
        load_conversations(path)


def test_empty_user_turn_is_an_error_naming_the_record(tmp_path):
    recs = conversations(3)
    recs[1]["conversation"][0]["content"] = "  \n"
    path = write(tmp_path / "c.json", recs)
    with pytest.raises(
        ConversationFormatError, match=r"c\.json, record 1: the first user turn \(the query\) is empty"
    ):
        load_conversations(path)


def test_jsonl_conversation_error_names_the_line(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps(conversations(1)[0]) + "\n\n{broken\n")
    with pytest.raises(ConversationFormatError, match=r"c\.jsonl, line 3: not valid JSON"):
        load_conversations(path)


def test_label_arena_selection_without_records_is_an_error_with_counts(tmp_path):
    import label_arena

    src = write(tmp_path / "arena.json", [{**r, "language": "English"} for r in conversations(3)])
    out = tmp_path / "out"
    with pytest.raises(
        DataFileError,
        match=r"arena\.json: no record with language 'Klingon' \(3 records; by value \{'English': 3\}\)",
    ):
        label_arena.main(
            ["--input", str(src), "--mode", "language", "--languages", "Klingon", "--output_dir", str(out)]
        )
    with pytest.raises(DataFileError, match=r"no record with a topic in \['Games'\]"):
        label_arena.main(
            [
                "--input",
                str(src),
                "--mode",
                "mix",
                "--classifier",
                "local",
                "--topics",
                "Games",
                "--output_dir",
                str(out),
            ]
        )
    assert not out.exists()


def test_an_output_folder_is_claimed_once_and_only_its_own_outputs_are_replaced(tmp_path):
    from osd.datafiles import claim_output_dir

    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(DataFileError, match="holds files tool did not write"):
        claim_output_dir(folder, "tool", ["result.json"], {})
    assert (folder / "notes.txt").read_text() == "mine"
    fresh = tmp_path / "fresh"
    claim_output_dir(fresh, "tool", ["result.json", "draft"], {})
    (fresh / "result.json").write_text("{}")
    (fresh / "draft").mkdir()
    (fresh / "keep.txt").write_text("a user's")
    claim_output_dir(fresh, "tool", ["result.json", "draft"], {})  # a rerun: its own outputs go, nothing else
    assert not (fresh / "result.json").exists() and not (fresh / "draft").exists()
    assert (fresh / "keep.txt").read_text() == "a user's"
    with pytest.raises(DataFileError, match="holds files other did not write"):
        claim_output_dir(fresh, "other", ["result.json"], {})
    (tmp_path / "model").mkdir()
    with pytest.raises(DataFileError, match="inside the input folder"):
        claim_output_dir(tmp_path / "model" / "out", "tool", [], {"--draft": tmp_path / "model"})
