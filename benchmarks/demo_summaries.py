"""Tables of recorded main-job runs: one row per `summary.json`, and per machine the median and range of each speedup.

The main job (`bash bash_scripts/demo.sh`) writes a summary.json per run; a results folder keeps several
(`summary_<machine>_<commit>_<n>.json`). This reads them and prints, as Markdown, what the results READMEs
tabulate: tokens/s of the target alone, Standard and online SD's speedups over it, each over its Eq. 2 (with the
measured costs, each query charged its prefill), the prefill a query pays (in served target steps), the update's
busy share and the job's time; then, for the runs of each machine (held to AVX2 or not), the medians with their
ranges, as the README's headline rows give them (--by_name: per file name without its run number, so a commit's
runs apart from another's). --out: the same as JSON, with the command that wrote it.

    python -m benchmarks.demo_summaries benchmarks/results/online_demo/v13_prompt_reuse
    python -m benchmarks.demo_summaries outputs/run_1/summary.json outputs/run_2/summary.json --out outputs/runs.json
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path

from osd.datafiles import read_text
from osd.demo.report import speedups_over_alone, tokens_per_s, total_row
from osd.results import command_line, markdown_table, write_json
from osd.user_errors import run_main

RUN_COLUMNS = ("file", "target alone, tok/s", "Standard SD", "online SD", "online, tok/s",
               "measured / Eq. 2 (Standard, online)", "prefill", "update busy", "job")  # fmt: skip
GROUP_COLUMNS = ("machine", "runs", "target alone, tok/s", "Standard SD", "online SD", "job")
SUMMARY_KEYS = ("machine", "costs", "domains", "serving", "wall_s", "background_update_share")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+", help="summary.json files, or folders of summary*.json files")
    ap.add_argument(
        "--by_name",
        action="store_true",
        help="group the runs by file name without its run number (summary_<machine>_<commit>: a commit's runs apart "
        "from another's), not by machine alone",
    )
    ap.add_argument("--out", default=None, help="also write the tables' figures here as JSON")
    return ap.parse_args(argv)


def summary_files(paths: list[str]) -> list[Path]:
    """The files `paths` name: each file as it is, a folder's summary*.json in name order."""
    files = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(path.glob("summary*.json"))
            if not found:
                raise ValueError(f"{path}: a folder without summary*.json files")
            files += found
        else:
            files.append(path)
    return files


def read_summary(path: Path) -> dict:
    """A main job's summary.json; a one-line error naming the file for anything else."""
    try:
        summary = json.loads(read_text(path))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON ({e})") from e
    missing = [k for k in SUMMARY_KEYS if k not in summary] if isinstance(summary, dict) else ["all"]
    if missing:
        raise ValueError(f"{path}: not a main job's summary.json (no {', '.join(missing)}; "
                         "python -m osd.demo.online_demo writes them)")  # fmt: skip
    return summary


def run_name(file: str) -> str:
    """A summary's file name without its run number and suffix: `summary_intel_xeon_9fe0846_2.json` ->
    `summary_intel_xeon_9fe0846`."""
    return re.sub(r"(_\d+)?\.json$", "", file)


def machine_label(machine: dict) -> str:
    """The CPU, and whether its instructions were held to AVX2 (`bash_scripts/hold_to_avx2.sh`)."""
    held = machine.get("isa_limits", {}).get("ATEN_CPU_CAPABILITY") == "avx2"
    return f"{machine['cpu']}{', held to AVX2' if held else ''}"


def over(measured: float, predicted: float | None) -> float | None:
    """measured / predicted; None without a prediction (Eq. 2 where no gamma proposes)."""
    return None if predicted is None else measured / predicted


def ratio_cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def run_row(name: str, summary: dict) -> dict:
    """One run's figures (`RUN_COLUMNS`'s, unformatted)."""
    rows, costs = summary["domains"], summary["costs"]
    alone, _, online_rate = tokens_per_s(total_row(rows))
    standard, online = speedups_over_alone(rows)
    return {
        "file": name, "machine": machine_label(summary["machine"]), "layout": summary["serving"]["layout"],
        "target_alone_tokens_per_s": alone, "standard": standard, "online": online, "online_tokens_per_s": online_rate,
        "standard_over_eq2": over(standard, costs["prefill_eq2_standard"]), "online_over_eq2": over(online, costs["prefill_eq2_online"]),
        "prefill_steps": costs["prefill"], "update_busy": summary["background_update_share"], "wall_s": summary["wall_s"],
    }  # fmt: skip


def group_row(machine: str, runs: list[dict]) -> dict:
    """The median and range of each figure over one machine's runs."""

    def spread(key: str) -> dict[str, float]:
        values = [r[key] for r in runs]
        return {"median": statistics.median(values), "min": min(values), "max": max(values)}

    keys = ("target_alone_tokens_per_s", "standard", "online", "wall_s")
    return {"machine": machine, "runs": len(runs), **{key: spread(key) for key in keys}}


def minutes(seconds: float) -> str:
    """m:ss, to the nearest second."""
    whole = round(seconds)
    return f"{whole // 60}:{whole % 60:02d}"


def speedup(s: dict[str, float], runs: int) -> str:
    """A median with its range, as the READMEs give them: 1.29x (1.27-1.31x); of an even count of runs, the mean
    of the middle two, with a third decimal: 1.295x (1.29-1.31x)."""
    return f"{s['median']:.{3 if runs % 2 == 0 else 2}f}x ({s['min']:.2f}-{s['max']:.2f}x)"


def tables(runs: list[dict], groups: list[dict]) -> str:
    run_cells = [
        {"file": f"`{r['file']}`", "target alone, tok/s": f"{r['target_alone_tokens_per_s']:.1f}",
         "Standard SD": f"{r['standard']:.2f}x", "online SD": f"{r['online']:.2f}x",
         "online, tok/s": f"{r['online_tokens_per_s']:.1f}",
         "measured / Eq. 2 (Standard, online)": f"{ratio_cell(r['standard_over_eq2'])}, {ratio_cell(r['online_over_eq2'])}",
         "prefill": f"{r['prefill_steps']:.2f} ({r['layout']})", "update busy": f"{r['update_busy']:.2f}",
         "job": minutes(r["wall_s"])}
        for r in runs
    ]  # fmt: skip
    group_cells = [
        {"machine": g["machine"], "runs": g["runs"],
         "target alone, tok/s": f"{g['target_alone_tokens_per_s']['min']:.1f}-{g['target_alone_tokens_per_s']['max']:.1f}",
         "Standard SD": speedup(g["standard"], g["runs"]), "online SD": speedup(g["online"], g["runs"]),
         "job": f"{minutes(g['wall_s']['min'])}-{minutes(g['wall_s']['max'])}"}
        for g in groups
    ]  # fmt: skip
    return f"{markdown_table(run_cells, RUN_COLUMNS)}\n\n{markdown_table(group_cells, GROUP_COLUMNS)}"


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    files = summary_files(args.paths)
    runs = [run_row(path.name, read_summary(path)) for path in files]
    keys = [f"{r['machine']} ({run_name(r['file'])})" if args.by_name else r["machine"] for r in runs]
    groups = [  # in the order first read
        group_row(key, [r for r, k in zip(runs, keys, strict=True) if k == key])
        for key in dict.fromkeys(keys)
    ]
    print(tables(runs, groups))
    result = {"command": command_line("benchmarks.demo_summaries", argv), "runs": runs, "groups": groups}
    if args.out:
        write_json(args.out, result)
    return result


if __name__ == "__main__":
    raise SystemExit(run_main(main, "benchmarks.demo_summaries"))
