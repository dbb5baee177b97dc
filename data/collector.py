"""The shared collector behind every `data/clean_{name}.py` script.

A clean script declares a `DatasetSpec` (hub name, splits, required raw fields) and a
`transform(case) -> record fields | None`; the collector reads each split, from the Hugging Face
hub (`datasets.load_dataset`, the default) or from local raw files (`--raw_path`), converts it to
the conversation format of `osd/conversations.py` and writes `{output_dir}/{name}_{split}.json`.

Local raw files are read as the datasets ship them, with `datasets.load_dataset` as the hub's
are: `.json` (a JSON list, or JSON lines as `datasets` exports them), `.jsonl`, `.parquet`, `.csv`.
`--raw_path` is either one file (used for the first selected split) or a folder in which a split's
files are named `{split}.{ext}` or `{split}-*.{ext}` (the hub's parquet shards), searched recursively.

A record missing a required field is skipped and counted, or, with `--strict`, stops the run
with the file and the record index. Records a transform rejects on purpose (a language filter,
a too-short file) are counted as "filtered".
"""

from __future__ import annotations

import csv
import io
import json
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
from transformers import HfArgumentParser

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # lets `python data/clean_x.py` run without `pip install -e .`
    sys.path.append(str(REPO_ROOT))

from osd.conversations import save_conversations, validate_record  # noqa: E402
from osd.datafiles import DataFileError, read_text, refuse_overwrite  # noqa: E402
from osd.user_errors import run_main  # noqa: E402, F401  (for the clean scripts' __main__)

RAW_DATA_DIR = REPO_ROOT / "data" / "raw_data"
RAW_SUFFIXES = (".json", ".jsonl", ".parquet", ".csv")
# Raw file names used for a split besides its own name (Spider ships `dev.json`).
SPLIT_ALIASES = {"validation": ("validation", "dev", "valid")}

Transform = Callable[[dict], dict | None]
Requirement = str | tuple[str, ...]  # a field name, or alternatives of which one must be present


class RawFormatError(ValueError):
    """A raw file is not in the format the dataset ships."""


class MissingFieldError(ValueError):
    """A raw record lacks a required field (raised under --strict)."""


@dataclass(frozen=True)
class Split:
    source: str  # split name on the hub and in raw file names
    output: str  # suffix of the output file
    is_eval: bool = False  # sized by --eval_size instead of --size


@dataclass(frozen=True)
class DatasetSpec:
    name: str  # output files are {name}_{split}.json (the reference's names)
    tag: str  # the `dataset` field of every record
    hub_name: str
    hub_config: str | None
    splits: tuple[Split, ...]
    required: tuple[Requirement, ...]
    # The reference's `split_train`: the first --eval_size sampled records of the first split
    # go to {name}_{carve_eval}.json instead (for datasets that ship no test split).
    carve_eval: str | None = None
    hub_kwargs: dict = field(default_factory=dict)


@dataclass
class CollectArgs:
    raw_path: str | None = field(
        default=None,
        metadata={
            "help": "Local raw file or folder (json/jsonl/parquet/csv as the dataset ships). "
            "Default: download with datasets.load_dataset."
        },
    )
    dataset_name: str | None = field(
        default=None, metadata={"help": "Hub dataset id (default: the script's)."}
    )
    dataset_config: str | None = field(
        default=None, metadata={"help": "Hub config name (default: the script's)."}
    )
    output_dir: str = field(
        default=str(RAW_DATA_DIR), metadata={"help": "Where {name}_{split}.json files go."}
    )
    size: int = field(
        default=10000, metadata={"help": "Records per training split (random sample); <= 0 keeps all."}
    )
    eval_size: int = field(
        default=200, metadata={"help": "Records per test/validation/eval split; <= 0 keeps all."}
    )
    seed: int = field(default=0, metadata={"help": "Seed of the random sample."})
    strict: bool = field(
        default=False, metadata={"help": "Fail on a record missing a required field instead of skipping it."}
    )
    splits: list[str] | None = field(
        default=None, metadata={"help": "Output splits to write (default: all of the script's)."}
    )


@dataclass
class SplitReport:
    split: str
    path: Path
    read: int  # raw records looked at
    written: int
    skipped: int  # missing a required field
    filtered: int  # rejected by the transform


def conversation(query: str, answer: str | None = None) -> list[dict]:
    """A one-exchange conversation; the assistant turn only when the answer is known."""
    turns = [{"role": "user", "content": query}]
    if answer is not None:
        turns.append({"role": "assistant", "content": answer})
    return turns


def present(value: Any) -> bool:
    return value is not None and not (isinstance(value, str) and not value.strip())


def first_present(case: dict, names: Sequence[str]) -> Any:
    """The value of the first of `names` that `case` has (None when none)."""
    return next((case[n] for n in names if present(case.get(n))), None)


def missing_field(case: dict, required: Sequence[Requirement]) -> str | None:
    """The first requirement `case` does not meet, as text, or None."""
    for req in required:
        names = (req,) if isinstance(req, str) else req
        if first_present(case, names) is None:
            return " or ".join(repr(n) for n in names)
    return None


def read_raw_file(path: str | Path) -> datasets.Dataset:
    """Records of one raw file, read with `datasets.load_dataset` (as a hub download is); raises
    RawFormatError naming the file (and line or record) and what was expected.

    Text files are checked first, since `datasets` would accept or blur these cases: UTF-8 (the
    line of a bad byte), a JSON list of objects or JSON lines (the line that does not parse), a CSV
    header. CSV cells stay the text they hold (no number or missing-value parsing)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in RAW_SUFFIXES:
        raise RawFormatError(
            f"{path}: unsupported raw file type {suffix!r}; expected one of {', '.join(RAW_SUFFIXES)}"
        )
    options: dict[str, Any] = {}
    if suffix == ".csv":
        header = next(csv.reader(io.StringIO(read_text(path), newline="")), None)
        if not header:
            raise RawFormatError(f"{path}: empty CSV; expected a header row of field names")
        options = {
            "features": datasets.Features(dict.fromkeys(header, datasets.Value("string"))),
            "na_filter": False,
        }
    elif suffix != ".parquet":
        for i, rec in enumerate(_read_json_records(path, lines_only=suffix == ".jsonl")):
            if not isinstance(rec, dict):
                raise RawFormatError(f"{path}, record {i}: expected a JSON object, got {type(rec).__name__}")
    builder = {".jsonl": "json"}.get(suffix, suffix[1:])
    try:
        return datasets.load_dataset(builder, data_files=str(path), split="train", **options)
    except Exception as e:  # pyarrow and pandas raise several types for a broken file
        raise RawFormatError(f"{path}: not a readable {builder} file ({e.__cause__ or e})") from e


def _read_json_records(path: Path, lines_only: bool) -> list:
    text = read_text(path)
    if not lines_only:
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            pass  # `datasets` exports JSON lines under a .json suffix
        else:
            if isinstance(data, list):
                return data
            if isinstance(data, dict) and len(text.strip().splitlines()) > 1:
                raise RawFormatError(f"{path}: a JSON object; expected a JSON list of records or JSON lines")
            return [data]
    records = []
    for n, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise RawFormatError(
                    f"{path}, line {n}: not valid JSON ({e.msg}); expected a JSON list of records or one JSON object per line"
                ) from e
    return records


def split_files(folder: Path, split: str) -> list[Path]:
    """Raw files of `split` under `folder`: `{split}.{ext}` or hub shards `{split}-*.{ext}`."""
    names = SPLIT_ALIASES.get(split, (split,))
    return sorted(
        p
        for p in folder.rglob("*")
        if p.is_file()
        and p.suffix.lower() in RAW_SUFFIXES
        and any(p.stem == n or p.stem.startswith(f"{n}-") for n in names)
    )


def load_raw_split(raw_path: Path, split: str) -> tuple[datasets.Dataset, str]:
    """Records of one split from a raw folder (or the given file), and where they came from."""
    if not raw_path.exists():
        raise FileNotFoundError(f"--raw_path {raw_path}: no such file or folder")
    if raw_path.is_file():
        return read_raw_file(raw_path), str(raw_path)
    files = split_files(raw_path, split)
    if not files:
        names = "/".join(SPLIT_ALIASES.get(split, (split,)))
        raise FileNotFoundError(
            f"--raw_path {raw_path}: no raw file for split {split!r}; expected {names}.{{json,jsonl,parquet,csv}} "
            f"or {names}-*.parquet shards (or pick splits with --splits)"
        )
    return datasets.concatenate_datasets([read_raw_file(f) for f in files]), ", ".join(map(str, files))


def load_hub_split(spec: DatasetSpec, args: CollectArgs, split: str) -> Sequence[dict]:
    return datasets.load_dataset(
        args.dataset_name or spec.hub_name,
        args.dataset_config or spec.hub_config,
        split=split,
        **spec.hub_kwargs,
    )


def convert(
    cases: Sequence[dict],
    spec: DatasetSpec,
    transform: Transform,
    source: str,
    want: int,
    seed: int,
    strict: bool,
) -> tuple[list[tuple[int, dict]], int, int, int]:
    """Convert up to `want` records (all when <= 0), visiting them in a seeded random order.

    Returns (index, record fields) pairs in visiting order and the read / skipped / filtered counts.
    """
    order = list(range(len(cases)))
    random.Random(seed).shuffle(order)
    out: list[tuple[int, dict]] = []
    read = skipped = filtered = 0
    for i in order:
        if 0 < want <= len(out):
            break
        case = cases[i]
        read += 1
        missing = missing_field(case, spec.required)
        if missing:
            if strict:
                raise MissingFieldError(f"{source}, record {i}: missing required field {missing}")
            skipped += 1
            continue
        fields = transform(case)
        if fields is None:
            filtered += 1
            continue
        out.append((i, fields))
    return out, read, skipped, filtered


def finish(pairs: list[tuple[int, dict]], spec: DatasetSpec, split: str, source: str) -> list[dict]:
    """Records in source order, with an id and the `dataset` field."""
    records = []
    for i, fields in sorted(pairs, key=lambda p: p[0]):
        rec = {"id": f"{spec.name}_{split}_{i}", "dataset": spec.tag, **fields}
        records.append(validate_record(rec, i, source))
    return records


def outputs(spec: DatasetSpec, split: Split) -> list[str]:
    """The output splits one source split writes (two when the eval split is carved from it)."""
    carve = spec.carve_eval is not None and split is spec.splits[0]
    return [split.output, spec.carve_eval] if carve else [split.output]


def collect(spec: DatasetSpec, args: CollectArgs, transform: Transform) -> list[SplitReport]:
    """Convert and write every selected split; print and return the counts."""
    splits = [s for s in spec.splits if args.splits is None or set(outputs(spec, s)) & set(args.splits)]
    if not splits:
        known = [out for s in spec.splits for out in outputs(spec, s)]
        raise ValueError(f"--splits {args.splits}: none of this dataset's splits {known}")
    raw_path = Path(args.raw_path) if args.raw_path else None
    if raw_path is not None and raw_path.is_file() and len(splits) > 1:
        print(f"{raw_path} is one file: writing split {splits[0].output!r} only")
        splits = splits[:1]
    written = {
        f"--output_dir file {spec.name}_{out}.json": Path(args.output_dir) / f"{spec.name}_{out}.json"
        for s in splits
        for out in outputs(spec, s)
    }
    refuse_overwrite(written, {"--raw_path": raw_path})
    reports = []
    for split in splits:
        if raw_path is not None:
            cases, source = load_raw_split(raw_path, split.source)
        else:
            cases, source = (
                load_hub_split(spec, args, split.source),
                f"{args.dataset_name or spec.hub_name}[{split.source}]",
            )
        want = args.eval_size if split.is_eval else args.size
        carve = spec.carve_eval is not None and split is spec.splits[0]
        if carve and want > 0 and args.eval_size > 0:
            want += args.eval_size
        pairs, read, skipped, filtered = convert(cases, spec, transform, source, want, args.seed, args.strict)
        if not pairs:
            raise DataFileError(no_records_message(spec, cases, source, read, skipped, filtered))
        parts = [(split.output, pairs)]
        if carve:
            n_eval = min(max(args.eval_size, 0), len(pairs))
            parts = [(split.output, pairs[n_eval:]), (spec.carve_eval, pairs[:n_eval])]
        parts = [(out, part) for out, part in parts if args.splits is None or out in args.splits]
        for out_split, part in parts:
            if not part:
                raise DataFileError(
                    f"{source}: all {len(pairs)} usable records go to split {spec.carve_eval!r} "
                    f"(--eval_size {args.eval_size}), none to {out_split!r}; lower --eval_size"
                )
        for out_split, part in parts:
            records = finish(part, spec, out_split, source)
            path = Path(args.output_dir) / f"{spec.name}_{out_split}.json"
            save_conversations(records, path)
            report = SplitReport(out_split, path, read, len(records), skipped, filtered)
            print_report(report, records)
            reports.append(report)
    return reports


def no_records_message(
    spec: DatasetSpec, cases: Sequence[dict], source: str, read: int, skipped: int, filtered: int
) -> str:
    """Why a split yielded nothing, with the counts and what the script needs."""
    needed = ", ".join(
        " or ".join(repr(n) for n in ((r,) if isinstance(r, str) else r)) for r in spec.required
    )
    found = f"; its first record has fields {sorted(cases[0])}" if len(cases) else ""
    return (
        f"{source}: no usable records ({len(cases)} in the input, {read} read, {skipped} missing a required "
        f"field, {filtered} filtered by the script); the script needs the fields {needed}{found}"
    )


def print_report(report: SplitReport, records: list[dict]) -> None:
    words = {w for rec in records for turn in rec["conversation"] for w in turn["content"].split()}
    print(
        f"{report.path}: {report.written} records written ({report.read} read, {report.skipped} skipped "
        f"for a missing field, {report.filtered} filtered); {len(words)} unique whitespace tokens"
    )


def parse(argv: Sequence[str] | None, options: type | None = None) -> tuple[CollectArgs, Any]:
    """Parse the shared flags and, when given, the script's own options dataclass."""
    types = (CollectArgs,) if options is None else (CollectArgs, options)
    parsed = HfArgumentParser(types).parse_args_into_dataclasses(args=argv)
    return parsed[0], (parsed[1] if options is not None else None)


def cli(spec: DatasetSpec, transform: Transform, argv: Sequence[str] | None = None) -> list[SplitReport]:
    """Entry point of a clean script without options of its own."""
    args, _ = parse(argv)
    return collect(spec, args, transform)
