"""Chatbot Arena conversations: the first user turn of conversation_a -> model_a's first reply.

Keeps `language` and `tstamp` (for per-language alpha and the time-binned split of
split_train_test.py). Writes data/raw_data/arena_train.json (--size, 10000).

    python data/clean_arena.py                                   # from the hub: lmsys/chatbot_arena_conversations
    python data/clean_arena.py --raw_path ~/arena/data --english_only
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

from collector import DatasetSpec, Split, collect, conversation, parse, present, run_main

SPEC = DatasetSpec(
    name="arena",
    tag="arena",
    hub_name="lmsys/chatbot_arena_conversations",
    hub_config=None,
    splits=(Split("train", "train"),),
    required=("conversation_a",),
)


@dataclass
class ArenaOptions:
    english_only: bool = field(
        default=False, metadata={"help": "Keep only records whose `language` is English."}
    )


def first_exchange(turns: list[dict]) -> tuple[str | None, str | None]:
    """The first non-empty user turn and the first assistant reply after it."""
    for i, turn in enumerate(turns):
        if turn.get("role") == "user" and present(turn.get("content")):
            replies = (
                t["content"]
                for t in turns[i + 1 :]
                if t.get("role") == "assistant" and present(t.get("content"))
            )
            return turn["content"], next(replies, None)
    return None, None


def transform(case: dict, opts: ArenaOptions) -> dict | None:
    if opts.english_only and case.get("language") != "English":
        return None
    turns = case["conversation_a"]
    query, answer = first_exchange(turns) if isinstance(turns, list) else (None, None)
    if query is None:
        return None
    fields = {"conversation": conversation(query, answer)}
    fields.update({k: case[k] for k in ("language", "tstamp") if case.get(k) is not None})
    return fields


def main(argv: list[str] | None = None) -> None:
    args, opts = parse(argv, ArenaOptions)
    collect(SPEC, args, partial(transform, opts=opts))


if __name__ == "__main__":
    raise SystemExit(run_main(main))
