r"""Split a converted conversation file into train and eval files, deterministically.

Random mode (default): --eval_size records drawn with --seed go to eval, the rest to train;
both keep the input's order. Time-bins mode (the reference's split for Arena data): records are
sorted by `tstamp`, the time range is cut into --eval_size equal bins and one random record of
each non-empty bin goes to eval, truncated to its first user turn; the rest, sorted by time, is train.

    python data/split_train_test.py --input data/raw_data/gsm8k_train.json --eval_size 200 --seed 0
    python data/split_train_test.py --input data/raw_data/arena_train.json --mode time_bins \
        --train_output data/arena/train.json --eval_output data/arena/eval.json
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from collector import REPO_ROOT  # noqa: F401  (puts the repository on sys.path)
from transformers import HfArgumentParser

from osd.conversations import conversations_text, read_conversations
from osd.datafiles import refuse_foreign_file, refuse_overwrite, write_output
from osd.user_errors import run_main

TOOL = "data/split_train_test.py"  # the writer named beside its outputs


@dataclass
class SplitArgs:
    input: str = field(
        metadata={
            "help": "A conversation-JSON file, a folder or a hub dataset name (as osd.train's --data_path)."
        }
    )
    split: str = field(default="train", metadata={"help": "Split of an --input folder or hub dataset."})
    eval_size: int = field(
        default=200, metadata={"help": "Eval records (time_bins: the number of time bins)."}
    )
    seed: int = field(default=0, metadata={"help": "Seed of the draw."})
    mode: str = field(
        default="random", metadata={"help": "How eval records are drawn.", "choices": ["random", "time_bins"]}
    )
    train_output: str | None = field(
        default=None, metadata={"help": "Default: {input stem}_split_train.json next to the input."}
    )
    eval_output: str | None = field(
        default=None, metadata={"help": "Default: {input stem}_split_eval.json next to the input."}
    )


def random_split(records: list[dict], eval_size: int, seed: int) -> tuple[list[dict], list[dict]]:
    """(train, eval): `eval_size` records drawn with `seed`, both parts in input order."""
    if not 0 < eval_size < len(records):
        raise ValueError(
            f"--eval_size {eval_size}: expected between 1 and {len(records) - 1} for {len(records)} records"
        )
    chosen = set(random.Random(seed).sample(range(len(records)), eval_size))
    train = [r for i, r in enumerate(records) if i not in chosen]
    return train, [r for i, r in enumerate(records) if i in chosen]


def first_user_turn(record: dict) -> dict:
    turn = next(t for t in record["conversation"] if t["role"] == "user")
    return {**record, "conversation": [turn]}


def time_bin_split(
    records: list[dict], num_bins: int, seed: int, source: str = "input"
) -> tuple[list[dict], list[dict]]:
    """(train, eval): one random record per non-empty equal-width time bin goes to eval.

    The reference crashed on an empty bin; here empty bins are skipped, so eval may be smaller.
    """
    for i, rec in enumerate(records):
        if not isinstance(rec.get("tstamp"), int | float):
            raise ValueError(f"{source}, record {i}: time_bins mode needs a numeric 'tstamp' field")
    if num_bins < 1 or not records:
        raise ValueError(
            f"--eval_size {num_bins} bins over {len(records)} records: expected at least one of each"
        )
    ordered = sorted(records, key=lambda r: r["tstamp"])
    start, width = ordered[0]["tstamp"], (ordered[-1]["tstamp"] - ordered[0]["tstamp"]) / num_bins
    bins: dict[int, list[int]] = {}
    for i, rec in enumerate(ordered):
        b = min(int((rec["tstamp"] - start) / width), num_bins - 1) if width > 0 else 0
        bins.setdefault(b, []).append(i)
    rng = random.Random(seed)
    chosen = {rng.choice(members) for _, members in sorted(bins.items())}
    print(f"{len(bins)} of {num_bins} time bins are non-empty")
    train = [r for i, r in enumerate(ordered) if i not in chosen]
    return train, [first_user_turn(r) for i, r in enumerate(ordered) if i in chosen]


def main(argv: list[str] | None = None) -> None:
    (args,) = HfArgumentParser(SplitArgs).parse_args_into_dataclasses(args=argv)
    path = Path(args.input)
    if not path.is_file() and not (args.train_output and args.eval_output):
        raise ValueError(
            f"--input {args.input} is not a file: name the outputs with --train_output and --eval_output"
        )
    outputs = {
        f"--{kind}_output": Path(out) if out else path.with_name(f"{path.stem}_split_{kind}.json")
        for kind, out in (("train", args.train_output), ("eval", args.eval_output))
    }
    refuse_overwrite(outputs, {"--input": path})
    for flag, out_path in outputs.items():
        refuse_foreign_file(out_path, flag, TOOL)
    records = read_conversations(args.input, args.split, "--input")
    if args.mode == "random":
        train, evals = random_split(records, args.eval_size, args.seed)
    else:
        train, evals = time_bin_split(records, args.eval_size, args.seed, str(path))
    for (kind, part), (flag, out_path) in zip(
        (("train", train), ("eval", evals)), outputs.items(), strict=True
    ):
        write_output(out_path, conversations_text(part), flag, TOOL)
        print(f"{out_path}: {len(part)} {kind} records")


if __name__ == "__main__":
    raise SystemExit(run_main(main))
