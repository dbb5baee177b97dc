"""The one conversation-JSON format every tool in this repository reads and writes.

A file is a JSON list of records::

    {"id": "gsm8k_train_17",
     "conversation": [{"role": "user", "content": "..."},
                      {"role": "assistant", "content": "..."}],   # assistant turn optional
     "dataset": "gsm8k", "topic": "...", "language": "..."}       # grouping fields optional

Only the first user turn (the query) and the first assistant turn (the answer, when known)
are used by the distillation and serving tools.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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
    if not any(turn["role"] == "user" for turn in conv):
        raise ConversationFormatError(f"{where}: the conversation has no user turn")
    return record


def load_conversations(path: str | Path) -> list[dict]:
    """Read and validate a conversation-JSON file (a JSON list; `.jsonl` with one record per line also works)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such conversation file")
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix == ".jsonl":
            records = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            records = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConversationFormatError(
            f"{path}: not valid JSON ({e}); expected a JSON list of conversation records"
        ) from e
    if not isinstance(records, list):
        raise ConversationFormatError(
            f"{path}: expected a JSON list of records, got {type(records).__name__}"
        )
    return [validate_record(r, i, path) for i, r in enumerate(records)]


def save_conversations(records: list[dict], path: str | Path) -> None:
    """Write records as an indented JSON list (creating parent folders)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(records, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def user_query(record: dict) -> str:
    """The first user turn: the query that is served."""
    return next(turn["content"] for turn in record["conversation"] if turn["role"] == "user")


def assistant_answer(record: dict) -> str | None:
    """The first assistant turn, or None when the answer is not known."""
    return next((turn["content"] for turn in record["conversation"] if turn["role"] == "assistant"), None)


def record_groups(record: dict) -> dict[str, str]:
    """The grouping fields (`dataset`, `topic`, `language`) a record carries."""
    return {k: record[k] for k in GROUP_FIELDS if isinstance(record.get(k), str)}
