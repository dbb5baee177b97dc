"""Latency report for `llama-osd-stream` runs: measured speedup against the Eq. 2 prediction.

    python -m llamacpp_patches.report runs/llamacpp/*.jsonl
    python -m llamacpp_patches.report runs/llamacpp/*.jsonl --json runs/llamacpp/summary.json

Each input file holds the JSON lines of one `llama-osd-stream` invocation. A speculative run
(target T, draft D, gamma) is compared, per dataset and on the same query ids, with the
target-only (`mode=baseline`, model T) and draft-only (`mode=baseline`, model D, for c) lines of the
same file when it has them (`--osd-mode both` runs the three interleaved, query by query, so they
see the same machine load), else with such lines from the other files.

Columns (ms/token is total decode time / total generated tokens, prefill excluded):
  base, spec   target-only and speculative ms/token; speedup = base / spec (measured)
  accept       llama.cpp's acceptance rate, accepted / drafted. A draft token after the first
               mismatch of a step counts as drafted and not accepted, so this is not Eq. 2's alpha.
  alpha        the alpha of the i.i.d. model behind Eq. 2 that explains the measured counts:
               E[tokens per step](alpha, gamma) = 1 + gamma * accepted / drafted
               (= 1 + accepted per full-length step; `osd.cost_model.alpha_from_tokens_per_step`)
  c            draft-only ms/token / target-only ms/token
  eq2          `osd.cost_model.speedup(alpha, gamma, c)`: Eq. 2, verification costs one target step
  v            measured verification cost (below)
  eq2_v        Eq. 2 with the measured verification cost v = (verify ms per step) / (target ms per
               token); on a CPU v > 1 because a pass over gamma + 1 tokens costs more than one token
  same_out     fraction of queries whose speculative output equals the baseline's token for token
               (needs `--osd-dump-ids`; greedy speculative decoding must reproduce the target)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

# `python llamacpp_patches/report.py`: the repository, not this folder, is the import root
if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from osd.cost_model import alpha_from_tokens_per_step, speedup, speedup_measured_verify  # noqa: E402
from osd.datafiles import read_text, refuse_overwrite  # noqa: E402
from osd.user_errors import run_main  # noqa: E402

REQUIRED_KEYS = (
    "id",
    "mode",
    "model",
    "gamma",
    "generated_tokens",
    "decode_ms",
    "steps",
    "drafted",
    "accepted",
)
ALL = "all"


@dataclass
class Row:
    draft: str
    dataset: str
    queries: int
    gamma: int
    base_ms_per_token: float
    spec_ms_per_token: float
    speedup: float
    acceptance: float
    alpha: float
    c: float
    predicted: float
    verify_cost: float
    predicted_verify: float
    same_output: float | None


def load_lines(path: str | Path) -> list[dict]:
    """The JSON lines of one llama-osd-stream output file, each tagged with its `file`."""
    path = Path(path)
    lines = []
    for n, text in enumerate(read_text(path).splitlines(), start=1):
        if not text.strip():
            continue
        try:
            line = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{n}: not a JSON line ({e})") from e
        missing = [k for k in REQUIRED_KEYS if k not in line]
        if missing:
            raise ValueError(f"{path}:{n}: missing {missing}; expected a line written by llama-osd-stream")
        if line["mode"] not in ("baseline", "speculative"):
            raise ValueError(f"{path}:{n}: mode must be 'baseline' or 'speculative', got {line['mode']!r}")
        line["file"] = str(path)
        line["dataset"] = line.get("dataset") or "-"
        lines.append(line)
    return lines


def ms_per_token(lines: list[dict]) -> float:
    """Token-weighted decode ms per generated token."""
    tokens = sum(x["generated_tokens"] for x in lines)
    if tokens == 0:
        raise ValueError("no generated tokens to time")
    return sum(x["decode_ms"] for x in lines) / tokens


def alpha_from_acceptance(acceptance: float, gamma: int) -> float:
    """The i.i.d. acceptance probability whose E[tokens per step] is 1 + gamma * acceptance."""
    return alpha_from_tokens_per_step(1.0 + gamma * acceptance, gamma)


def _same_output(spec: list[dict], base: list[dict]) -> float | None:
    by_query = {(x["file"], x["index"]): x.get("output_ids") for x in base}
    pairs = [(x["output_ids"], by_query.get((x["file"], x["index"]))) for x in spec if "output_ids" in x]
    pairs = [(s, b) for s, b in pairs if b is not None]
    return sum(s == b for s, b in pairs) / len(pairs) if pairs else None


def _row(draft: str, dataset: str, gamma: int, spec: list[dict], base: list[dict], dbase: list[dict]) -> Row:
    drafted = sum(x["drafted"] for x in spec)
    acceptance = sum(x["accepted"] for x in spec) / drafted if drafted else 0.0
    alpha = alpha_from_acceptance(acceptance, gamma)
    base_mpt, spec_mpt = ms_per_token(base), ms_per_token(spec)
    c = ms_per_token(dbase) / base_mpt
    verify_cost = sum(x["verify_ms"] for x in spec) / sum(x["steps"] for x in spec) / base_mpt
    return Row(
        draft=draft,
        dataset=dataset,
        queries=len(spec),
        gamma=gamma,
        base_ms_per_token=base_mpt,
        spec_ms_per_token=spec_mpt,
        speedup=base_mpt / spec_mpt,
        acceptance=acceptance,
        alpha=alpha,
        c=c,
        predicted=speedup(alpha, gamma, c),
        verify_cost=verify_cost,
        predicted_verify=speedup_measured_verify(alpha, gamma, c, verify_cost),
        same_output=_same_output(spec, base),
    )


def _baseline(
    baselines: dict[str, list[dict]], model: str, file: str, ids: set[str], role: str
) -> list[dict]:
    """`model`'s baseline lines for the queries `ids`: from `file` when it has them, else from any file."""
    pool = [x for x in baselines[model] if x["file"] == file] or baselines[model]
    got = [x for x in pool if x["id"] in ids]
    missing = ids - {x["id"] for x in got}
    if missing:
        raise ValueError(
            f"{file}: no {role}-only baseline lines for {model} on queries {sorted(missing)[:5]}; "
            f"run llama-osd-stream --osd-mode both, or -m {model} --osd-mode baseline on the same data"
        )
    return got


def summarize(lines: list[dict]) -> list[Row]:
    """One row per (speculative run, dataset) and one `all` row per run with several datasets."""
    runs: dict[tuple, list[dict]] = defaultdict(list)
    baselines: dict[str, list[dict]] = defaultdict(list)
    for x in lines:
        if x["mode"] == "speculative":
            runs[(x["file"], x["model"], x["draft_model"], x["gamma"])].append(x)
        else:
            baselines[x["model"]].append(x)
    rows = []
    for (file, target, draft, gamma), spec in runs.items():
        ids = {x["id"] for x in spec}
        base = _baseline(baselines, target, file, ids, "target")
        dbase = _baseline(baselines, draft, file, ids, "draft")
        datasets = sorted({x["dataset"] for x in spec})
        for dataset in [*datasets, ALL] if len(datasets) > 1 else datasets:

            def pick(xs: list[dict], dataset: str = dataset) -> list[dict]:
                return xs if dataset == ALL else [x for x in xs if x["dataset"] == dataset]

            rows.append(_row(Path(draft).stem, dataset, gamma, pick(spec), pick(base), pick(dbase)))
    return rows


def format_table(rows: list[Row]) -> str:
    header = "draft                dataset      n   g   base   spec speedup accept alpha     c     v   eq2 eq2_v same_out"
    out = [header, "-" * len(header)]
    for r in rows:
        same = "-" if r.same_output is None else f"{r.same_output:.2f}"
        out.append(
            f"{r.draft[:20]:20s} {r.dataset[:10]:10s} {r.queries:3d} {r.gamma:3d} {r.base_ms_per_token:6.2f} "
            f"{r.spec_ms_per_token:6.2f} {r.speedup:7.2f} {r.acceptance:6.3f} {r.alpha:5.3f} {r.c:5.3f} "
            f"{r.verify_cost:5.2f} {r.predicted:5.2f} {r.predicted_verify:5.2f} {same:>8s}"
        )
    out.append(
        "base/spec: ms/token; speedup measured; eq2 = Eq. 2 at (alpha, gamma, c); eq2_v adds the measured verify cost"
    )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(
        prog="python -m llamacpp_patches.report",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "files", nargs="+", help="llama-osd-stream JSONL outputs (speculative and baseline runs)"
    )
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    missing = [f for f in args.files if not Path(f).is_file()]
    if missing:  # an unmatched shell glob arrives as the pattern itself
        parser.error(
            f"no such file: {' '.join(missing)} (write them with llamacpp_patches/run.py or demo.sh)"
        )
    if args.json:
        refuse_overwrite({"--json": args.json}, {f"input {f}": f for f in args.files})
    rows = summarize([x for f in args.files for x in load_lines(f)])
    if not rows:
        parser.error(f"no speculative lines in {' '.join(args.files)}: nothing to compare")
    print(format_table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n", encoding="utf-8")
    return rows


if __name__ == "__main__":
    raise SystemExit(run_main(main, "llamacpp_patches.report"))
