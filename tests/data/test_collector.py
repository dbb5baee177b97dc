"""The shared collector: raw file formats, promised errors, sampling, and the hub path."""

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from collector import MissingFieldError, RawFormatError, read_raw_file

from osd.conversations import load_conversations

FIX = Path(__file__).resolve().parent / "fixtures"


def gsm8k(*flags: str) -> None:
    import clean_gsm8k

    clean_gsm8k.main(argv=list(flags))


def write_gsm8k_jsonl(path: Path, n: int) -> list[dict]:
    rows = [
        {"question": f"What is {i} plus {i}?", "answer": f"{i}+{i}={2 * i}\n#### {2 * i}"} for i in range(n)
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("object.json", "a JSON object; expected a JSON list of records or JSON lines"),
        ("broken.jsonl", "broken.jsonl, line 2: not valid JSON"),
        ("scalars.json", "scalars.json, record 0: expected a JSON object, got int"),
        ("data.tsv", "unsupported raw file type '.tsv'; expected one of .json, .jsonl, .parquet, .csv"),
    ],
)
def test_wrong_format_file_names_file_and_expectation(name, message):
    with pytest.raises(RawFormatError, match=message.replace(".", r"\.").replace("(", r"\(")) as err:
        read_raw_file(FIX / "malformed" / name)
    assert str(FIX / "malformed" / name) in str(err.value)


def test_broken_parquet_names_file(tmp_path):
    (tmp_path / "raw").mkdir()
    bad = tmp_path / "raw" / "train-00000-of-00001.parquet"
    bad.write_bytes(b"PAR1 this is not a parquet file")
    with pytest.raises(RawFormatError, match="not a readable parquet file") as err:
        gsm8k("--raw_path", str(tmp_path / "raw"), "--output_dir", str(tmp_path / "out"), "--splits", "train")
    assert str(bad) in str(err.value)


def test_strict_fails_with_the_record_index(tmp_path):
    with pytest.raises(MissingFieldError, match=r"train\.jsonl, record 2: missing required field 'answer'"):
        gsm8k("--raw_path", str(FIX / "gsm8k"), "--output_dir", str(tmp_path), "--strict")


def test_missing_split_file_is_named(tmp_path):
    write_gsm8k_jsonl(tmp_path / "raw" / "train.jsonl", 3)
    with pytest.raises(FileNotFoundError, match="no raw file for split 'test'"):
        gsm8k("--raw_path", str(tmp_path / "raw"), "--output_dir", str(tmp_path / "out"))
    gsm8k("--raw_path", str(tmp_path / "raw"), "--output_dir", str(tmp_path / "out"), "--splits", "train")
    assert len(load_conversations(tmp_path / "out" / "gsm8k_train.json")) == 3


def test_parquet_shards_read_like_jsonl(tmp_path):
    rows = write_gsm8k_jsonl(tmp_path / "jsonl" / "train.jsonl", 7)
    shards = tmp_path / "pq" / "main"  # the hub's shard naming, in a config folder
    shards.mkdir(parents=True)
    for k, part in enumerate((rows[:4], rows[4:])):
        pq.write_table(pa.Table.from_pylist(part), shards / f"train-0000{k}-of-00002.parquet")
    for src in ("jsonl", "pq"):
        gsm8k(
            "--raw_path",
            str(tmp_path / src),
            "--output_dir",
            str(tmp_path / f"out_{src}"),
            "--splits",
            "train",
        )
    a = load_conversations(tmp_path / "out_jsonl" / "gsm8k_train.json")
    b = load_conversations(tmp_path / "out_pq" / "gsm8k_train.json")
    assert a == b and len(a) == 7


def test_size_samples_deterministically_in_source_order(tmp_path):
    write_gsm8k_jsonl(tmp_path / "raw" / "train.jsonl", 50)

    def ids(seed: int, out: str) -> list[str]:
        gsm8k(
            "--raw_path",
            str(tmp_path / "raw"),
            "--output_dir",
            str(tmp_path / out),
            "--splits",
            "train",
            "--size",
            "10",
            "--seed",
            str(seed),
        )
        return [r["id"] for r in load_conversations(tmp_path / out / "gsm8k_train.json")]

    first, again, other = ids(0, "a"), ids(0, "b"), ids(1, "c")
    assert len(first) == 10 and len(set(first)) == 10
    assert first == again and first != other
    idx = [int(i.rsplit("_", 1)[1]) for i in first]
    assert idx == sorted(idx)  # written in source order
    assert idx != list(range(10))  # a random sample, not the head of the file


def test_hub_path_calls_load_dataset_and_matches_raw(tmp_path, monkeypatch):
    import datasets

    rows = write_gsm8k_jsonl(tmp_path / "raw" / "train.jsonl", 5)
    write_gsm8k_jsonl(tmp_path / "raw" / "test.jsonl", 2)
    calls = []

    def fake_load_dataset(name, config, split, **kw):
        calls.append((name, config, split, kw))
        return datasets.Dataset.from_list(rows if split == "train" else rows[:2])

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    gsm8k("--output_dir", str(tmp_path / "hub"))
    assert calls == [("openai/gsm8k", "main", "train", {}), ("openai/gsm8k", "main", "test", {})]
    monkeypatch.undo()  # raw files are read with the real load_dataset
    gsm8k("--raw_path", str(tmp_path / "raw"), "--output_dir", str(tmp_path / "local"))
    for split in ("train", "test"):
        assert load_conversations(tmp_path / "hub" / f"gsm8k_{split}.json") == load_conversations(
            tmp_path / "local" / f"gsm8k_{split}.json"
        )


def test_raw_files_are_read_with_load_dataset_csv_cells_as_text(tmp_path):
    import datasets

    path = tmp_path / "train.csv"
    path.write_text('question,answer\nq1,007\n"a, b",\n', encoding="utf-8")
    read = read_raw_file(path)
    assert isinstance(read, datasets.Dataset)  # what datasets.load_dataset("csv") returns
    assert read.to_list() == [{"question": "q1", "answer": "007"}, {"question": "a, b", "answer": ""}]
    (tmp_path / "train.json").write_text(json.dumps(read.to_list()))
    assert read_raw_file(tmp_path / "train.json").to_list() == read.to_list()
