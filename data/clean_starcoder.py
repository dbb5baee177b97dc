"""StarCoder data (one language folder of bigcode/starcoderdata): code-completion queries.

As in the reference, a file shorter than --prompt_end tokens is dropped and the query is tokens
[--prompt_start, --prompt_end) of the file; the known continuation (the next --answer_tokens
tokens) is the assistant turn. Tokens come from --tokenizer (e.g. bigcode/starcoderbase) or, by
default, whitespace-delimited pieces that keep their leading whitespace. --eval_size (200)
sampled files go to data/raw_data/{data_dir}_bigcode_starcoderdata_eval.json, up to --size
(10000) others to ..._train.json.

    python data/clean_starcoder.py                               # hub: bigcode/starcoderdata, --data_dir assembly
    python data/clean_starcoder.py --data_dir rust --tokenizer bigcode/starcoderbase
    python data/clean_starcoder.py --raw_path ~/starcoderdata/assembly   # train-*.parquet
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial

from collector import DatasetSpec, Split, collect, conversation, parse, run_main

SPEC = DatasetSpec(
    name="{data_dir}_bigcode_starcoderdata",
    tag="starcoder",
    hub_name="bigcode/starcoderdata",
    hub_config=None,
    splits=(Split("train", "train"),),
    required=("content",),
    carve_eval="eval",
)


@dataclass
class StarcoderOptions:
    data_dir: str = field(
        default="assembly", metadata={"help": "Language folder of starcoderdata (also the file prefix)."}
    )
    tokenizer: str | None = field(
        default=None, metadata={"help": "Tokenizer name or path; default: whitespace pieces."}
    )
    prompt_start: int = field(default=100, metadata={"help": "First token of the query."})
    prompt_end: int = field(
        default=150, metadata={"help": "End of the query (files with fewer tokens are dropped)."}
    )
    answer_tokens: int = field(default=128, metadata={"help": "Tokens of continuation kept as the answer."})

    def __post_init__(self):
        if not 0 <= self.prompt_start < self.prompt_end:
            raise ValueError(
                f"--prompt_start {self.prompt_start} / --prompt_end {self.prompt_end}: expected 0 <= start < end"
            )


def whitespace_pieces(text: str) -> list[str]:
    """Pieces that concatenate back to the text (leading whitespace kept with each piece)."""
    return re.findall(r"\s*\S+", text)


def piece_splitter(tokenizer_name: str | None) -> tuple[Callable[[str], list], Callable[[list], str]]:
    """(split, join) over whitespace pieces, or over a tokenizer's ids."""
    if tokenizer_name is None:
        return whitespace_pieces, "".join
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_name)
    return (lambda text: tok(text, add_special_tokens=False).input_ids), tok.decode


def transform(case: dict, opts: StarcoderOptions, split, join) -> dict | None:
    pieces = split(case["content"])
    if len(pieces) < opts.prompt_end:
        return None
    answer = pieces[opts.prompt_end : opts.prompt_end + opts.answer_tokens]
    return {
        "conversation": conversation(
            join(pieces[opts.prompt_start : opts.prompt_end]), join(answer) if answer else None
        )
    }


def main(argv: list[str] | None = None) -> None:
    args, opts = parse(argv, StarcoderOptions)
    spec = replace(
        SPEC, name=SPEC.name.format(data_dir=opts.data_dir), hub_kwargs={"data_dir": opts.data_dir}
    )
    split, join = piece_splitter(opts.tokenizer)
    collect(spec, args, partial(transform, opts=opts, split=split, join=join))


if __name__ == "__main__":
    raise SystemExit(run_main(main))
