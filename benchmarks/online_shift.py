"""Fig. 3-5 analogues: the query distribution shifts, drifts or mixes; online vs Standard vs static drafts.

    python -m benchmarks.online_shift                                    # abrupt: 4 domains x 80 queries
    python -m benchmarks.online_shift --per_domain 16 --static_fractions 0.3 0.5 0.7 1.0 --out outputs/online_shift_static
    python -m benchmarks.online_shift --kind drift --queries 320 --domains sql math --out outputs/online_drift
    python -m benchmarks.online_shift --kind mix --queries 320 --out outputs/online_mix
    python -m benchmarks.online_shift --kind mix --topics school savings tkinter return loan --queries 96 \\
        --out outputs/online_topics                                      # alpha per topic (Fig. 5)

Streams from osd.streams over the local workload's train splits: `abrupt` (--per_domain queries
of each source in turn), `drift` (the share moves linearly from the first source to the last),
`mix` (i.i.d. uniform). The sources are the --domains or, with --topics, the records of each topic
(the workload's `topic` field, from any of the domains). Runs serving the same stream: the demo
draft distilled online, the untouched draft (Standard) and, with --static_fractions, one static
draft per fraction f, distilled offline once on the stream's first f of queries and never updated
(the paper's static 30/50/70/100% drafts; Fig. 2's budget: --offline_steps on-policy steps of 8).

Writes to --out: alpha.png (source bands for abrupt streams; static drafts as dotted lines per
segment or quarter), results.json and table.md with alpha per segment (abrupt: also the online
draft's first and last --window queries) or per quarter of the stream, and for drift and mix
streams alpha per source (domain or topic) per half of the stream, with alpha_groups.png (one line
per source, windowed over the queries served: online solid, Standard dashed).
"""

from __future__ import annotations

from pathlib import Path

from osd.distill.demo_runs import (
    BENCHMARK_PRESET,
    alpha_over,
    of_group,
    prefix_samples,
    run_online,
    static,
    static_runs,
)
from osd.drivers import make_parser, parse
from osd.online.config import add_online_flags, online_arguments
from osd.paths import DOMAINS
from osd.plots import alpha_series, dataset_bands, plot_alpha
from osd.results import markdown_table, save_results
from osd.streams import abrupt_stream, drift_stream, load_sources, mix_stream, topic_sources
from osd.user_errors import run_main


def build_stream(
    kind: str, sources: dict[str, list[dict]], per_domain: int, queries: int, seed: int
) -> list[dict]:
    if kind == "abrupt":
        return abrupt_stream(sources, [per_domain] * len(sources))
    if kind == "drift":
        start = [1.0] + [0.0] * (len(sources) - 1)
        return drift_stream(sources, queries, start, start[::-1], seed)
    return mix_stream(sources, queries, seed=seed)


def group_rows(runs: dict[str, list[dict]], groups: list[str], n: int) -> list[dict]:
    """Alpha of each group's queries per half of the stream and over all of it, Standard and online."""
    halves = [(0, n // 2), (n // 2, n)]
    rows = []
    for group in [None, *groups]:
        row = {"group": group or "all", "queries": len(of_group(runs["online"], group)) if group else n}
        for a, b in [*halves, (0, n)]:
            for name in ("Standard", "online"):
                row[f"{name} {a + 1}-{b}"] = alpha_over(runs[name], a, b, group)
        online, standard = row[f"online 1-{n}"], row[f"Standard 1-{n}"]
        row["online - Standard"] = None if online is None or standard is None else online - standard
        rows.append(row)
    return rows


def plot_groups(runs: dict[str, list[dict]], groups: list[str], out: Path, window: int, title: str) -> Path:
    """alpha of each group's queries over the queries served, online (solid) and Standard (dashed)."""
    curves, styles = {}, {}
    for i, group in enumerate(groups):
        for name, ls in (("online", "-"), ("Standard", "--")):
            curves[f"{group}, {name}"] = alpha_series(of_group(runs[name], group))
            styles[f"{group}, {name}"] = {"color": f"C{i % 10}", "ls": ls}
    return plot_alpha(
        curves, out, window=window, styles=styles, title=f"{title}: online (solid), Standard (dashed)"
    )


def main(argv: list[str] | None = None) -> dict:
    parser = make_parser(__doc__)
    parser.add_argument("--kind", choices=["abrupt", "drift", "mix"], default="abrupt")
    parser.add_argument("--domains", nargs="+", default=list(DOMAINS))
    parser.add_argument("--topics", nargs="+", help="sources: these topics' records instead of the domains")
    parser.add_argument("--per_domain", type=int, default=80, help="abrupt: queries per segment")
    parser.add_argument("--queries", type=int, default=320, help="drift/mix: stream length")
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    add_online_flags(parser, BENCHMARK_PRESET)
    parser.add_argument("--window", type=int, default=20, help="queries per table cell and moving average")
    parser.add_argument(
        "--static_fractions", nargs="*", type=float, default=[], help="static drafts on the stream's first f"
    )
    parser.add_argument("--offline_steps", type=int, default=60, help="steps of each static draft (batch 8)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="outputs/online_shift")
    args = parse(parser, argv)
    recipe = online_arguments(args)
    out = Path(args.out)
    sources = topic_sources(args.domains, args.topics) if args.topics else load_sources(args.domains)
    field = "topic" if args.topics else "dataset"
    stream = build_stream(args.kind, sources, args.per_domain, args.queries, args.seed)
    samples = prefix_samples(stream, args.static_fractions)
    runs = {
        "online": run_online(out / "online", stream, recipe, learning_rate=args.learning_rate),
        "Standard": run_online(out / "standard", stream, static(recipe)),
    }
    static_drafts = static_runs(out, stream, samples, args.offline_steps, args.learning_rate, recipe)
    online, n = runs["online"], len(stream)
    bands = dataset_bands([r[field] for r in stream])
    if args.kind == "abrupt":
        parts = [(a, b, f"{name} ({a + 1}-{b})") for a, b, name in bands]
    else:
        parts = [(round(n * q / 4), round(n * (q + 1) / 4)) for q in range(4)]
        parts = [(a, b, f"{a + 1}-{b}") for a, b in parts]
    rows = []
    for a, b, label in parts:
        row = {"segment" if args.kind == "abrupt" else "queries": label}
        row |= {name: alpha_over(e, a, b) for name, e in runs.items()}
        if args.kind == "abrupt":
            row[f"online first {args.window}"] = alpha_over(online, a, min(b, a + args.window))
            row[f"online last {args.window}"] = alpha_over(online, max(a, b - args.window), b)
        row |= {name: alpha_over(e, a, b) for name, e in static_drafts.items()}
        rows.append(row)
    results = {
        "args": vars(args),
        "static_records": {name: len(records) for name, records in samples.items()},
        "rows": rows,
        "final_update_time_share": online[-1]["update_time_share"],
    }
    title = (
        f"{args.kind} stream, {len(sources)} {field}s: online (update every {recipe.online_update_interval})"
    )
    plot_alpha(
        {name: alpha_series(e) for name, e in runs.items()},
        out / "alpha.png",
        window=args.window,
        bands=bands if args.kind == "abrupt" else (),
        title=f"{title} vs Standard" + (" vs static drafts" if static_drafts else ""),
        segment_references={
            name: [(a, b, alpha_over(e, a, b)) for a, b, _ in parts] for name, e in static_drafts.items()
        },
    )
    table = markdown_table(rows, list(rows[0]))
    if args.kind != "abrupt":  # the sources are interleaved: alpha of each one's queries (Fig. 5)
        results["groups"] = group_rows(runs, list(sources), n)
        table += f"\n\nalpha per {field}:\n\n" + markdown_table(results["groups"], list(results["groups"][0]))
        plot_groups(
            runs,
            list(sources),
            out / "alpha_groups.png",
            args.window,
            f"{args.kind} stream: alpha per {field}",
        )
    save_results(out, results, table, "benchmarks.online_shift", argv)
    return results


if __name__ == "__main__":
    raise SystemExit(run_main(main, "benchmarks.online_shift"))
