"""Average tokens matched per iteration, per prompt and per dataset (DSD's `analyze_output.py` report),
plus alpha and the mean accepted length where the input carries them.

    python -m osd.analysis.analyze outputs/analysis/tiny_sql_draft.jsonl     # osd.analysis.simulate's
    python -m osd.analysis.analyze llama-796m-hellaswag-lookahead-4.txt       # DSD's own output

Inputs: `simulate`'s per-iteration JSONL, or DSD's text output: one line per iteration holding the
tokens matched so far of each batch row in brackets (`tensor([12, 9], device='cuda:0', ...)`); a
drop in the first row's count starts the next prompt (batch), as in DSD's script. "Tokens matched"
in an iteration is the rise of that count: the accepted draft tokens plus the target's own token.
DSD's text has no prompt boundaries: a prompt whose first count does not drop below the previous
prompt's last (a prompt that ended after one token) merges with it; `simulate`'s JSONL names them.

The numbers differ from DSD's script in two places where it drops iterations: it never counts the
first iteration of the first prompt, and its per-prompt averages leave out each prompt's last
iteration (and its dataset average counts the very last one twice). Here every iteration counts once.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from osd.alpha import format_alpha, pooled_alpha
from osd.datafiles import json_lines, read_text, refuse_foreign_file, refuse_overwrite, write_output
from osd.user_errors import run_main

BRACKETS = re.compile(r"\[(.*?)\]")
ITERATION_FIELDS = {"prompt", "matched_so_far"}  # what every row of simulate's JSONL has


def read_dsd(path: str | Path) -> list[dict]:
    """Rows `{"prompt": "segment.row", "matched_so_far": m}` from DSD's output text."""
    rows, segment, previous = [], 0, None
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        groups = BRACKETS.findall(line)
        if not groups:
            continue
        try:
            counts = [int(x) for x in groups[0].split(",") if x.strip()]
        except ValueError as e:
            raise ValueError(
                f"{path}, line {number}: expected integers in brackets, got {groups[0]!r}"
            ) from e
        if previous is not None and counts[0] < previous:
            segment += 1
        previous = counts[0]
        rows += [{"prompt": f"{segment}.{row}", "matched_so_far": m} for row, m in enumerate(counts)]
    if not rows:
        raise ValueError(
            f"{path}: no bracketed counts; expected DSD's output or an osd.analysis.simulate .jsonl"
        )
    return rows


def read_iterations(path: str | Path) -> list[dict]:
    """Per-iteration rows of a `simulate` JSONL file or of DSD's text output (by content)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    text = read_text(path)
    if not text.strip():
        raise ValueError(f"{path}: empty file; expected simulate's .jsonl or DSD's output text")
    if not text.lstrip().startswith("{"):
        return read_dsd(path)
    rows = json_lines(text, path, "the file is torn")
    for number, row in enumerate(rows, 1):
        check_row(row, number, path)
    return rows


def check_row(row: object, number: int, path: Path) -> None:
    """Raise unless `row` (the number-th of a JSONL file) is one of simulate's iteration rows."""
    if isinstance(row, dict) and "format" in row:
        raise ValueError(
            f"{path}: a recording ({row['format']}), not per-iteration rows; replay a draft on it with "
            "`python -m osd.analysis.simulate --recording ... --output STEM`, then analyze STEM.jsonl"
        )
    if not isinstance(row, dict) or not ITERATION_FIELDS <= row.keys():
        raise ValueError(f"{path}, row {number}: not an iteration row with fields {sorted(ITERATION_FIELDS)}")


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def summarize(rows: Iterable[dict]) -> dict:
    """Per prompt and dataset: tokens matched per iteration, and alpha and mean accepted length
    where the rows carry `counted`/`alpha_sum`/`accepted` (dataset figures weight every iteration,
    or every counted position for alpha, equally)."""
    prompts: dict[str, list[dict]] = {}
    for row in rows:
        prompts.setdefault(str(row["prompt"]), []).append(row)
    per_prompt, steps, all_rows = {}, [], []
    for key, its in prompts.items():
        counts = [it["matched_so_far"] for it in its]
        matched = [b - a for a, b in zip([0] + counts[:-1], counts, strict=True)]
        entry = {
            "id": its[0].get("id", key),
            "iterations": len(its),
            "tokens_matched_per_iteration": _mean(matched),
        }
        entry |= _acceptance(its)
        per_prompt[key] = entry
        steps += matched
        all_rows += its
    return {
        "per_prompt": list(per_prompt.values()),
        "dataset": {
            "prompts": len(per_prompt),
            "iterations": len(steps),
            "tokens_matched_per_iteration": _mean(steps),
        }
        | _acceptance(all_rows),
    }


def _acceptance(rows: Sequence[dict]) -> dict:
    if not rows or "accepted" not in rows[0]:
        return {}
    return {
        "alpha": pooled_alpha(sum(r["alpha_sum"] for r in rows), sum(r["counted"] for r in rows)),
        "mean_accepted_length": _mean([r["accepted"] for r in rows]),
    }


def _list(values: Iterable[float | None]) -> str:
    return "[" + ", ".join(format_alpha(v, ".4f") for v in values) + "]"


def format_report(summary: dict) -> str:
    """DSD's two lines, then alpha and accepted lengths when known."""
    per, data = summary["per_prompt"], summary["dataset"]
    lines = [
        f"Average tokens matched per prompt: {_list(p['tokens_matched_per_iteration'] for p in per)}",
        f"Average tokens matched per dataset: [{data['tokens_matched_per_iteration']:.4f}]",
    ]
    if "alpha" in data:
        lines += [
            f"Alpha per prompt: {_list(p['alpha'] for p in per)}",
            f"Alpha per dataset: [{format_alpha(data['alpha'], '.4f')}]",
            f"Mean accepted length per dataset: [{data['mean_accepted_length']:.4f}] "
            f"({data['iterations']} iterations, {data['prompts']} prompts)",
        ]
    return "\n".join(lines)


TOOL = "osd.analysis.analyze"  # the writer named beside its --json


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("path", help="simulate's .jsonl or DSD's output text")
    parser.add_argument("--json", default=None, help="also write the summary as JSON here")
    args = parser.parse_args(argv)
    if args.json:
        refuse_overwrite({"--json": args.json}, {"path": args.path})
        refuse_foreign_file(args.json, "--json", TOOL)
    summary = summarize(read_iterations(args.path))
    print(format_report(summary))
    if args.json:
        write_output(args.json, json.dumps(summary, indent=1) + "\n", "--json", TOOL)


if __name__ == "__main__":
    raise SystemExit(run_main(main, "osd.analysis.analyze"))
