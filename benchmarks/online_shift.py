"""Fig. 3 analogue: the query distribution shifts; online alpha dips at each boundary and recovers.

    python -m benchmarks.online_shift                                    # abrupt: 4 domains x 80 queries
    python -m benchmarks.online_shift --kind drift --queries 320 --domains sql math --out outputs/online_drift
    python -m benchmarks.online_shift --kind mix --queries 320 --out outputs/online_mix

Streams from osd.streams over the local workload's train splits: `abrupt` (--per_domain queries
of each domain in turn), `drift` (the share moves linearly from the first domain to the last),
`mix` (i.i.d. uniform). Two runs serve the same stream: the demo draft distilled online and the
untouched draft (Standard). Writes {out}/alpha.png (dataset bands), results.json and table.md:
per segment (abrupt) the first and last --window queries; per stream quarter and per domain
otherwise.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.online_common import (
    NEVER,
    alpha_over,
    load_sources,
    make_parser,
    markdown_table,
    parse,
    run_online,
    save_results,
)
from osd.demo import DOMAINS
from osd.metric_keys import group_key
from osd.plots import alpha_series, dataset_bands, plot_alpha
from osd.streams import abrupt_stream, drift_stream, mix_stream


def build_stream(kind: str, domains: list[str], per_domain: int, queries: int, seed: int) -> list[dict]:
    sources = load_sources(domains)
    if kind == "abrupt":
        return abrupt_stream(sources, [per_domain] * len(domains))
    if kind == "drift":
        start = [1.0] + [0.0] * (len(domains) - 1)
        return drift_stream(sources, queries, start, start[::-1], seed)
    return mix_stream(sources, queries, seed=seed)


def main(argv: list[str] | None = None) -> dict:
    parser = make_parser(__doc__)
    parser.add_argument("--kind", choices=["abrupt", "drift", "mix"], default="abrupt")
    parser.add_argument("--domains", nargs="+", default=list(DOMAINS))
    parser.add_argument("--per_domain", type=int, default=80, help="abrupt: queries per segment")
    parser.add_argument("--queries", type=int, default=320, help="drift/mix: stream length")
    parser.add_argument("--update_interval", type=int, default=1)
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--window", type=int, default=20, help="queries per table cell and moving average")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="outputs/online_shift")
    args = parse(parser, argv)
    out = Path(args.out)
    stream = build_stream(args.kind, args.domains, args.per_domain, args.queries, args.seed)
    runs = {
        "online": run_online(
            out / "online", stream, update_interval=args.update_interval, learning_rate=args.learning_rate
        ),
        "Standard": run_online(out / "standard", stream, update_interval=NEVER),
    }
    online, standard = runs["online"], runs["Standard"]
    bands = dataset_bands([r["dataset"] for r in stream])
    if args.kind == "abrupt":
        rows = []
        for start, end, domain in bands:
            head, tail = (start, min(end, start + args.window)), (max(start, end - args.window), end)
            rows.append(
                {
                    "segment": f"{domain} ({start + 1}-{end})",
                    "Standard": alpha_over(standard, start, end),
                    f"online first {args.window}": alpha_over(online, *head),
                    f"online last {args.window}": alpha_over(online, *tail),
                }
            )
    else:
        n = len(stream)
        rows = []
        for q in range(4):
            a, b = round(n * q / 4), round(n * (q + 1) / 4)
            row = {
                "queries": f"{a + 1}-{b}",
                "Standard": alpha_over(standard, a, b),
                "online": alpha_over(online, a, b),
            }
            for d in args.domains:
                row[f"online {d}"] = alpha_over(online, a, b, group_key("dataset", d))
            rows.append(row)
    curves = {name: alpha_series(e) for name, e in runs.items()}
    if args.kind != "abrupt":  # the domains are interleaved: one online curve per domain too
        curves |= {
            f"online, {d} queries": alpha_series(online, group_key("dataset", d)) for d in args.domains
        }
    plot_alpha(
        curves,
        out / "alpha.png",
        window=args.window,
        bands=bands if args.kind == "abrupt" else (),
        title=f"{args.kind} stream over {', '.join(args.domains)}: online (update every {args.update_interval}) vs Standard",
    )
    results = {"args": vars(args), "rows": rows, "final_update_time_share": online[-1]["update_time_share"]}
    save_results(out, results, markdown_table(rows, list(rows[0])))
    return results


if __name__ == "__main__":
    main()
