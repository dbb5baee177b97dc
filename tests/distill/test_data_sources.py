"""`--data_path` forms through `datasets`: a file, a folder, a saved dataset, a hub name from the local
cache, a `datasets.Dataset`; errors naming source, split and record; the cached `Dataset.map`."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import datasets
import huggingface_hub.constants
import pytest
from distill_fixtures import write_conversations

from osd.conversations import ConversationFormatError, load_conversations, save_conversations
from osd.distill import flags
from osd.distill.callbacks import read_metrics
from osd.distill.data import ConversationDataset
from osd.distill.run_dir import data_digest
from osd.paths import TINY_DRAFT_PATH, TINY_TEACHER_PATH, workload_path
from osd.train import main

HUB_NAME = "osd-test/convs"
COMMIT = "0123456789abcdef0123456789abcdef01234567"  # the hub revision a download would record


def cache_hub_dataset(repo: Path, name: str, cache: Path) -> Path:
    """Put the data-files repository `repo` into the `datasets` cache as a download of hub dataset
    `name` leaves it: `{namespace}___{name}/{config}/{version}/{commit}/` holding dataset_info.json and
    `{name}-{split}.arrow` (datasets.load.CachedDatasetModuleFactory and packaged_modules/cache read
    this layout when the hub is offline). The builder is the one `datasets` infers for the repo's files."""
    namespace, short = name.split("/")
    assert repo.name == short  # the builder names its arrow files after the folder, as after the repo
    target = cache / f"{namespace}___{short}" / "default" / "0.0.0" / COMMIT
    datasets.load_dataset_builder(str(repo)).download_and_prepare(output_dir=str(target))
    return target


@pytest.fixture
def repo(tmp_path) -> Path:
    """A dataset repository as users upload it: conversation files named after their splits."""
    folder = tmp_path / "convs"
    folder.mkdir()
    write_conversations(folder / "train.json")
    records = load_conversations(folder / "train.json")
    (folder / "test.json").write_text(json.dumps(records[:2][::-1]))
    return folder


def items(ds: ConversationDataset) -> list[dict]:
    return [ds[i] for i in range(len(ds))]


def test_every_form_gives_the_file_s_items(tokenizer, repo, tmp_path, datasets_cache):
    expected = items(ConversationDataset(repo / "train.json", tokenizer))
    assert expected[1]["dataset"] == "sql" and "topic" not in expected[1]  # absent fields stay absent
    records = load_conversations(repo / "train.json")
    saved = tmp_path / "saved"
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(records), "test": datasets.Dataset.from_list(records[:2])}
    ).save_to_disk(str(saved))
    cache_hub_dataset(repo, HUB_NAME, datasets_cache)
    assert not Path(HUB_NAME).exists()  # resolved as a hub name, not a path
    for source in (repo, saved, HUB_NAME, datasets.Dataset.from_list(records)):
        assert items(ConversationDataset(source, tokenizer)) == expected, source
    evals = [ConversationDataset(s, tokenizer, split="test") for s in (repo, HUB_NAME)]
    assert [it["index"] for it in items(evals[0])] == [0, 1] and items(evals[0]) == items(evals[1])
    assert items(evals[0])[0]["prompt_ids"] == expected[1]["prompt_ids"]  # test.json is records 1, 0


def test_a_hub_name_missing_from_the_cache_is_named(tokenizer):
    with pytest.raises(
        FileNotFoundError, match=r"--eval_data_path osd-test/absent: not a local file or folder"
    ):
        ConversationDataset("osd-test/absent", tokenizer, flag="--eval_data_path")
    for path in ("/no/such/file.json", "no_such_file.json"):
        with pytest.raises(FileNotFoundError, match=rf"--data_path {path}: no such file or folder"):
            ConversationDataset(path, tokenizer)


def test_a_missing_split_lists_the_splits_and_names_the_flag(tokenizer, repo):
    with pytest.raises(
        ConversationFormatError,
        match=r"no split 'validation'; it has \['test', 'train'\] .*--eval_data_split",
    ):
        ConversationDataset(repo, tokenizer, split="validation", flag="--eval_data_path")


def test_bad_records_are_named_in_a_folder_and_in_a_dataset(tokenizer, repo):
    (repo / "test.json").write_text(
        json.dumps([{"conversation": [{"role": "user", "content": "ok"}]}, {"id": 1}])
    )
    with pytest.raises(
        ConversationFormatError, match=r"convs/test\.json, record 1: missing a non-empty 'conversation'"
    ):
        ConversationDataset(repo, tokenizer)
    rows = [
        {"conversation": [{"role": "user", "content": "ok"}]},
        {"conversation": [{"role": "user", "content": " "}]},
    ]
    with pytest.raises(
        ConversationFormatError, match=r"a datasets\.Dataset\), record 1: the first user turn"
    ):
        ConversationDataset(datasets.Dataset.from_list(rows), tokenizer)


def test_tokenization_is_cached_and_truncation_still_reported(tokenizer, tmp_path, caplog):
    long = " ".join(["one two three"] * 20)
    path = tmp_path / "long.json"
    path.write_text(
        json.dumps([{"conversation": [{"role": "user", "content": q}]} for q in ("one two", long)])
    )
    first = ConversationDataset(path, tokenizer, model_max_length=40)
    (cache_file,) = {f["filename"] for f in first.items.cache_files}
    written = os.stat(cache_file).st_mtime_ns
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="osd.distill.data"):
        second = ConversationDataset(path, tokenizer, model_max_length=40)
    assert {f["filename"] for f in second.items.cache_files} == {cache_file}
    assert os.stat(cache_file).st_mtime_ns == written  # read back, not tokenized again
    assert second.truncated == [1] and len(second[1]["prompt_ids"]) == 39
    messages = [r.getMessage() for r in caplog.records]
    assert any("long.json, record 1: prompt of" in m for m in messages)
    assert any("1 of 2 prompts truncated" in m for m in messages)


def test_folder_digest_follows_the_contents_not_map_caches(repo):
    before = data_digest(str(repo), "train", "data_path")
    (repo / "cache-0123.arrow").write_bytes(b"map output")
    assert data_digest(str(repo), "train", "data_path") == before
    assert data_digest(str(repo), "test", "data_path") != before
    (repo / "test.json").write_text("[]")
    assert data_digest(str(repo), "train", "data_path") != before


@pytest.mark.slow
def test_osd_train_reads_a_file_a_folder_and_a_cached_hub_name_alike(tmp_path, datasets_cache):
    """Offline runs on the tiny pair with each --data_path form: the same records, so the same run."""
    records = load_conversations(workload_path("sql", "train"))[:4]
    folder = tmp_path / "sql_queries"
    save_conversations(records, folder / "train.json")
    save_conversations(records[2:], folder / "test.json")
    cache_hub_dataset(folder, "osd-test/sql_queries", datasets_cache)
    forms = {
        "file": (str(folder / "train.json"), str(folder / "test.json")),
        "folder": (str(folder), str(folder)),
        "hub": ("osd-test/sql_queries", "osd-test/sql_queries"),
    }
    runs = {}
    for form, (train, evaluation) in forms.items():
        out = tmp_path / form
        metrics = main([
            "--student_model_path", str(TINY_DRAFT_PATH), "--teacher_model_path", str(TINY_TEACHER_PATH),
            "--data_path", train, "--eval_data_path", evaluation, "--output_dir", str(out),
            "--max_steps", "2", "--per_device_train_batch_size", "2", "--max_new_tokens", "4",
            "--report_to", "none", "--disable_tqdm", "True", "--logging_steps", "1", "--save_strategy", "no",
            "--seed", "0", "--use_cpu", "True",
        ])  # fmt: skip
        losses = [m["loss"] for m in read_metrics(out) if "loss" in m]
        runs[form] = (losses, metrics["eval_alpha"], json.loads((out / "run.json").read_text()))
        assert len(losses) == 2 and 0 <= metrics["eval_alpha"] <= 1
    assert runs["file"][:2] == runs["folder"][:2] == runs["hub"][:2]
    assert runs["hub"][2]["data_path"] == data_digest("osd-test/sql_queries", "train", "data_path")  # stable
    assert runs["hub"][2]["data_path"].startswith("osd-test/sql_queries[train]@")
    assert runs["hub"][2]["eval_data_path"].startswith("osd-test/sql_queries[test]@")


def test_a_cached_hub_dataset_loads_at_once_when_the_hub_is_unreachable(
    monkeypatch, tokenizer, repo, datasets_cache
):
    """As for models (tests/test_cli_parser.py): without HF_HUB_OFFLINE and with the hub unreachable,
    osd.train's check switches datasets to offline mode too, and the cached hub dataset loads."""
    cache_hub_dataset(repo, HUB_NAME, datasets_cache)
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr(datasets.config, "HF_ENDPOINT", "http://127.0.0.1:9")
    assert flags.go_offline_if_unreachable([str(TINY_TEACHER_PATH), str(TINY_DRAFT_PATH), HUB_NAME, None])
    assert datasets.config.HF_HUB_OFFLINE
    start = time.monotonic()
    assert len(ConversationDataset(HUB_NAME, tokenizer, split="test")) == 2
    assert time.monotonic() - start < 20
