"""The one conversation-JSON format every tool in this repository reads and writes.

A file is a JSON list of records::

    {"id": "gsm8k_train_17",
     "conversation": [{"role": "user", "content": "..."},
                      {"role": "assistant", "content": "..."}],   # assistant turn optional
     "dataset": "gsm8k", "topic": "...", "language": "..."}       # grouping fields optional

Only the first user turn (the query) and the first assistant turn (the answer, when known)
are used by the distillation and serving tools.

`load_conversation_dataset` reads such records as a `datasets.Dataset` from any of the forms
`--data_path` accepts: a conversation file, a folder (of conversation files, split by file name as
`datasets` does, or one written by `Dataset.save_to_disk`), a hub dataset name (with a split; from
the local cache when offline), or a `datasets.Dataset` / `DatasetDict` object.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import datasets

from osd.datafiles import json_lines, read_text, write_text

GROUP_FIELDS = ("dataset", "topic", "language")


class ConversationFormatError(ValueError):
    """A conversation file or record does not follow the format above."""


def validate_record(record: Any, index: int, source: str | Path) -> dict:
    """Return `record` if it is well formed, else raise naming the file and record index."""
    where = f"{source}, record {index}"
    if not isinstance(record, dict):
        raise ConversationFormatError(f"{where}: expected a JSON object, got {type(record).__name__}")
    conv = record.get("conversation")
    if not isinstance(conv, list) or not conv:
        raise ConversationFormatError(f"{where}: missing a non-empty 'conversation' list")
    for t, turn in enumerate(conv):
        if (
            not isinstance(turn, dict)
            or not isinstance(turn.get("content"), str)
            or turn.get("role")
            not in (
                "user",
                "assistant",
                "system",
            )
        ):
            raise ConversationFormatError(
                f"{where}: conversation turn {t} must be {{'role': user|assistant|system, 'content': str}}, got {turn!r:.200}"
            )
    query = next((turn["content"] for turn in conv if turn["role"] == "user"), None)
    if query is None:
        raise ConversationFormatError(f"{where}: the conversation has no user turn")
    if not query.strip():
        raise ConversationFormatError(
            f"{where}: the first user turn (the query) is empty; give it a query or remove the record"
        )
    for key in GROUP_FIELDS:  # alpha is grouped by their values: a number would silently drop out
        if record.get(key) is not None and not isinstance(record[key], str):
            raise ConversationFormatError(
                f"{where}: {key!r} is {record[key]!r} ({type(record[key]).__name__}); a grouping field is a "
                f'string, e.g. "{record[key]}"'
            )
    return record


def load_conversations(path: str | Path) -> list[dict]:
    """Read and validate a conversation-JSON file (a JSON list; `.jsonl` with one record per line also works).

    A file without records is an error: every tool needs at least one.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such conversation file")
    text = read_text(path)
    if not text.strip():
        raise ConversationFormatError(f"{path}: empty file; expected a JSON list of conversation records")
    if path.suffix == ".jsonl":
        records = json_lines(text, path, "expected one record per line", ConversationFormatError)
    else:
        try:
            records = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConversationFormatError(
                f"{path}: not valid JSON ({e}); expected a JSON list of conversation records"
            ) from e
    if not isinstance(records, list):
        raise ConversationFormatError(
            f"{path}: expected a JSON list of records, got {type(records).__name__}"
        )
    if not records:
        raise ConversationFormatError(
            f"{path}: 0 records (an empty list); expected at least one conversation"
        )
    return [validate_record(r, i, path) for i, r in enumerate(records)]


CONVERSATION_SUFFIXES = (".json", ".jsonl")
# the flag that picks the split, for each flag that names a source
SPLIT_FLAGS = {
    "--data_path": "--data_split",
    "--eval_data_path": "--eval_data_split",
    "--filename": "--split",  # data/generate_answer.py
    "--input": "--split",  # data/split_train_test.py
}
ConversationSource = str | os.PathLike | datasets.Dataset | datasets.DatasetDict


def is_saved_dataset(folder: Path) -> bool:
    """A folder written by `Dataset.save_to_disk` / `DatasetDict.save_to_disk`."""
    return (folder / "state.json").is_file() or (folder / "dataset_dict.json").is_file()


def open_conversation_dataset(
    source: ConversationSource, split: str = "train", flag: str = "--data_path"
) -> tuple[datasets.Dataset, str]:
    """(the records of `source` as a `datasets.Dataset`, a name for messages), not yet validated.

    A file is read with the format's own reader first (errors name file, line and record), then
    with `datasets.load_dataset("json")` (one split: `split` does not apply); a folder of files and
    a hub name with `datasets.load_dataset`, a saved folder with `datasets.load_from_disk`, and the
    split `split` is taken from the result. A hub name is resolved from the local `datasets` cache
    when offline (HF_DATASETS_OFFLINE=1 or HF_HUB_OFFLINE=1).
    """
    if isinstance(source, datasets.Dataset):
        return source, f"{flag} (a datasets.Dataset)"
    if isinstance(source, datasets.DatasetDict):
        return _pick_split(source, split, flag, f"{flag} (a datasets.DatasetDict)")
    path = Path(source)
    if path.is_file():
        load_conversations(path)
        return datasets.load_dataset("json", data_files=str(path), split="train"), str(path)
    if path.is_dir():
        if is_saved_dataset(path):
            loaded = datasets.load_from_disk(str(path))
        else:
            for file in sorted(path.rglob("*")):
                if file.suffix in CONVERSATION_SUFFIXES and not file.name.startswith("."):
                    load_conversations(file)
            loaded = datasets.load_dataset(str(path))
        if isinstance(loaded, datasets.Dataset):
            return loaded, str(path)
        return _pick_split(loaded, split, flag, str(path))
    if (
        path.is_absolute()
        or str(source).startswith(".")
        or str(source).count("/") > 1
        or path.suffix in CONVERSATION_SUFFIXES
    ):  # a path, not a hub name
        raise FileNotFoundError(f"{flag} {source}: no such file or folder")
    try:
        loaded = datasets.load_dataset(str(source))
    except (ConnectionError, FileNotFoundError, datasets.exceptions.DatasetNotFoundError) as e:
        raise FileNotFoundError(
            f"{flag} {source}: not a local file or folder, and not a hub dataset that can be loaded ({e})"
        ) from e
    return _pick_split(loaded, split, flag, str(source))


def _pick_split(
    loaded: datasets.DatasetDict, split: str, flag: str, name: str
) -> tuple[datasets.Dataset, str]:
    if split not in loaded:
        choose = f" (choose one with {SPLIT_FLAGS[flag]})" if flag in SPLIT_FLAGS else ""
        raise ConversationFormatError(f"{flag} {name}: no split {split!r}; it has {sorted(loaded)}{choose}")
    return loaded[split], f"{name}[{split}]"


def load_conversation_dataset(
    source: ConversationSource, split: str = "train", flag: str = "--data_path"
) -> tuple[datasets.Dataset, str]:
    """`open_conversation_dataset`, every record validated (errors name the source and the record)."""
    data, name = open_conversation_dataset(source, split, flag)
    if len(data) == 0:
        raise ConversationFormatError(f"{name}: 0 records; expected at least one conversation")
    for i, record in enumerate(data):
        validate_record(record, i, name)
    return data, name


def read_conversations(
    source: ConversationSource, split: str = "train", flag: str = "--data_path"
) -> list[dict]:
    """The records of any `load_conversation_dataset` source as a list: a file exactly as
    `load_conversations` reads it; otherwise the validated rows, without the fields a row holds as
    None (a field that other records of the set have)."""
    if not isinstance(source, datasets.Dataset | datasets.DatasetDict) and Path(source).is_file():
        return load_conversations(source)
    data, _ = load_conversation_dataset(source, split, flag)
    return [{k: v for k, v in row.items() if v is not None} for row in data]


def save_conversations(records: list[dict], path: str | Path) -> None:
    """Write records as an indented JSON list, whole or not at all (creating parent folders)."""
    write_text(path, conversations_text(records))


def conversations_text(records: list[dict]) -> str:
    """The text of a conversation file holding `records`: an indented JSON list."""
    return json.dumps(records, ensure_ascii=False, indent=1) + "\n"


def user_query(record: dict) -> str:
    """The first user turn: the query that is served."""
    return next(turn["content"] for turn in record["conversation"] if turn["role"] == "user")


def assistant_answer(record: dict) -> str | None:
    """The first assistant turn, or None when the answer is not known."""
    return next((turn["content"] for turn in record["conversation"] if turn["role"] == "assistant"), None)


def record_groups(record: dict) -> dict[str, str]:
    """The grouping fields (`dataset`, `topic`, `language`) a record carries."""
    return {k: record[k] for k in GROUP_FIELDS if isinstance(record.get(k), str)}
