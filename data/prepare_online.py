r"""Build the query streams of the online experiments (a CLI over osd/streams.py).

Without --kind it writes the reference's files from data/raw_data (run the clean scripts first):
data/sharp.json (abrupt: gsm8k[0:2000] + spider[2000:4000] + finance[4000:6000]),
data/smooth.json (gradual drift of 6000 records from (0.1, 0.8, 0.1) to (0.8, 0.1, 0.1) over
[gsm8k, spider, finance]) and data/online_sample.json (200 records of each, which the
reference meant to write). Every record gets `dataset` and `stream_index`.

    python data/prepare_online.py
    python data/prepare_online.py --kind abrupt --inputs gsm8k=data/raw_data/gsm8k_train.json \
        spider=data/raw_data/spider_train.json finance=data/raw_data/gbharti_finance-alpaca_train.json \
        code=data/raw_data/code_search_net_train.json --lengths 2000 2000 2000 8000 --output data/sharp4.json
    python data/prepare_online.py --kind drift --inputs a=a.json b=b.json --n 1000 \
        --start_weights 0.9 0.1 --end_weights 0.1 0.9 --seed 1 --output data/drift.json
    python data/prepare_online.py --kind mix --inputs a=a.json b=b.json --n 500 --weights 3 1 --output data/mix.json
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from collector import RAW_DATA_DIR, REPO_ROOT
from transformers import HfArgumentParser

from osd.conversations import conversations_text, load_conversation_dataset
from osd.datafiles import refuse_foreign_file, refuse_overwrite, write_output
from osd.streams import Records, abrupt_stream, drift_stream, mix_stream
from osd.user_errors import run_main

REFERENCE_INPUTS = {
    "gsm8k": "gsm8k_train.json",
    "spider": "spider_train.json",
    "finance": "gbharti_finance-alpaca_train.json",
}

TOOL = "data/prepare_online.py"  # the writer named beside its outputs
STREAM_KINDS = ("abrupt", "drift", "mix")
KIND_FLAGS = {"inputs": STREAM_KINDS, "output": STREAM_KINDS, "lengths": ("abrupt",),
              "start_weights": ("drift",), "end_weights": ("drift",), "weights": ("mix",)}  # fmt: skip


@dataclass
class PrepareArgs:
    kind: str | None = field(
        default=None,
        metadata={
            "help": "Stream kind; leave out to write the reference's sharp/smooth/online_sample files.",
            "choices": list(STREAM_KINDS),
        },
    )
    inputs: list[str] | None = field(
        default=None,
        metadata={
            "help": "Sources as name=path, in stream order; a path is a conversation file, a folder or a "
            "hub dataset name, as --data_path (its train split)."
        },
    )
    lengths: list[int] | None = field(
        default=None, metadata={"help": "abrupt: records per segment, one per input."}
    )
    n: int = field(default=6000, metadata={"help": "drift/mix: stream length."})
    start_weights: list[float] | None = field(
        default=None, metadata={"help": "drift: source proportions at the start."}
    )
    end_weights: list[float] | None = field(
        default=None, metadata={"help": "drift: source proportions at the end."}
    )
    weights: list[float] | None = field(
        default=None, metadata={"help": "mix: source proportions (default uniform)."}
    )
    seed: int = field(default=0, metadata={"help": "Seed of drift/mix draws."})
    output: str | None = field(default=None, metadata={"help": "Output file (default data/{kind}.json)."})
    raw_dir: str = field(
        default=str(RAW_DATA_DIR),
        metadata={"help": "Without --kind: where the cleaned *_train.json files are."},
    )
    output_dir: str = field(
        default=str(REPO_ROOT / "data"), metadata={"help": "Without --kind: where the three files go."}
    )

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"--n must be >= 1, got {self.n}")
        for flag, kinds in KIND_FLAGS.items():
            if getattr(self, flag) is not None and self.kind not in kinds:
                given = f"--kind {self.kind}" if self.kind else "no --kind (the reference's files)"
                raise ValueError(f"--{flag} is for --kind {' or '.join(kinds)}, not {given}")


def check_per_input(flag: str, values: list[float] | None, inputs: int) -> None:
    """A --lengths or --*weights flag: one non-negative value per input, not all 0."""
    if values is None:
        return
    if len(values) != inputs:
        raise ValueError(f"{flag} has {len(values)} values for {inputs} --inputs; give one per input")
    if any(v < 0 for v in values) or not sum(values):
        typed = " ".join(f"{v:g}" for v in values)
        raise ValueError(f"{flag} {typed}: expected values >= 0, not all 0")


def parse_inputs(items: list[str]) -> dict[str, Path]:
    """--inputs name=path.json ... as {name: path}, in stream order."""
    sources = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"--inputs {item!r}: expected name=path.json")
        if name in sources:
            raise ValueError(f"--inputs: source name {name!r} given twice")
        sources[name] = Path(path)
    return sources


def load_sources(paths: dict[str, Path], outputs: dict[str, Path]) -> dict[str, Records]:
    """The records of each source (any --data_path form: a conversation file, a folder or a hub
    dataset name, whose train split is used), after checking that no output would replace a source
    nor a file this script did not write."""
    refuse_overwrite(outputs, {f"--inputs {name}": path for name, path in paths.items()})
    for flag, path in outputs.items():
        refuse_foreign_file(path, flag, TOOL)
    return {
        name: load_conversation_dataset(path, "train", f"--inputs {name}")[0] for name, path in paths.items()
    }


def build(args: PrepareArgs, sources: dict[str, Records]) -> list[dict]:
    if args.kind == "abrupt":
        if args.lengths is None:
            raise ValueError("--kind abrupt needs --lengths, one per input")
        return abrupt_stream(sources, args.lengths)
    if args.kind == "drift":
        if args.start_weights is None or args.end_weights is None:
            raise ValueError("--kind drift needs --start_weights and --end_weights, one per input")
        return drift_stream(sources, args.n, args.start_weights, args.end_weights, args.seed)
    return mix_stream(sources, args.n, args.weights, args.seed)


def write(stream: list[dict], path: Path, flag: str) -> None:
    """Write the stream to `path` (given with `flag`) and print its records per dataset."""
    write_output(path, conversations_text(stream), flag, TOOL)
    counts = Counter(rec["dataset"] for rec in stream)
    print(f"{path}: {len(stream)} records ({', '.join(f'{k} {v}' for k, v in counts.items())})")


def main(argv: list[str] | None = None) -> None:
    (args,) = HfArgumentParser(PrepareArgs).parse_args_into_dataclasses(args=argv)
    if args.kind is not None:
        if not args.inputs:
            raise ValueError(f"--kind {args.kind} needs --inputs name=path.json ...")
        output = Path(args.output or REPO_ROOT / "data" / f"{args.kind}.json")
        paths = parse_inputs(args.inputs)
        for flag in ("lengths", "start_weights", "end_weights", "weights"):
            check_per_input(f"--{flag}", getattr(args, flag), len(paths))
        write(build(args, load_sources(paths, {"--output": output})), output, "--output")
        return
    out = {name: Path(args.output_dir) / f"{name}.json" for name in ("sharp", "smooth", "online_sample")}
    flags = {name: f"--output_dir file {path.name}" for name, path in out.items()}
    sources = load_sources(
        {name: Path(args.raw_dir) / file for name, file in REFERENCE_INPUTS.items()},
        {flags[name]: path for name, path in out.items()},
    )
    write(abrupt_stream(sources, [2000, 2000, 2000]), out["sharp"], flags["sharp"])
    write(
        drift_stream(sources, 6000, [0.1, 0.8, 0.1], [0.8, 0.1, 0.1], args.seed),
        out["smooth"],
        flags["smooth"],
    )
    write(abrupt_stream(sources, [200, 200, 200]), out["online_sample"], flags["online_sample"])


if __name__ == "__main__":
    raise SystemExit(run_main(main))
