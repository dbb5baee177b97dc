"""Fig. 2 analogue: online distillation on a single-domain stream vs Standard SD vs an offline-distilled draft.

    python -m benchmarks.online_single                                   # defaults below, a few CPU minutes
    python -m benchmarks.online_single --domain sql --queries 400 --update_interval 8

Three runs serve the same stream of --queries training queries of --domain with the demo
teacher: the demo draft distilled online (update every --update_interval queries), the demo draft
untouched (Standard), and the offline-distilled draft untouched (--offline_draft, written by the
issue-3/4 demo distillation). Writes {out}/alpha.png, results.json and table.md: alpha per
quarter of the stream, the first query from which the online windowed alpha stays at 95% of
the offline draft's alpha, and the cost of the updates (share of serving time, buffer memory).
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
from osd.plots import alpha_series, plot_alpha


def reach_query(entries: list[dict], target: float, window: int) -> int | None:
    """First query count from which the windowed alpha never drops below `target` again."""
    reached = None
    for i in range(len(entries)):
        windowed = alpha_over(entries, max(0, i + 1 - window), i + 1)
        if windowed >= target:
            reached = reached or i + 1
        else:
            reached = None
    return reached


def main(argv: list[str] | None = None) -> dict:
    parser = make_parser(__doc__)
    parser.add_argument("--domain", default=DOMAINS[0])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--update_interval", type=int, default=8)
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--window", type=int, default=25, help="moving-average window (queries)")
    parser.add_argument("--offline_draft", default="outputs/demo_distilled_draft")
    parser.add_argument("--out", default="outputs/online_single")
    args = parse(parser, argv)
    out = Path(args.out)
    stream = load_sources([args.domain])[args.domain][: args.queries]
    common = {"learning_rate": args.learning_rate}
    runs = {
        "online": run_online(out / "online", stream, update_interval=args.update_interval, **common),
        "Standard": run_online(out / "standard", stream, update_interval=NEVER, **common),
    }
    if Path(args.offline_draft).exists():
        runs["offline-distilled"] = run_online(
            out / "offline", stream, student=args.offline_draft, update_interval=NEVER, **common
        )
    n = len(stream)
    quarters = [(round(n * q / 4), round(n * (q + 1) / 4)) for q in range(4)]
    rows = [
        {"run": name, **{f"Q{q + 1} ({a + 1}-{b})": alpha_over(e, a, b) for q, (a, b) in enumerate(quarters)}}
        for name, e in runs.items()
    ]
    results = {"args": vars(args), "quarters": rows}
    online = runs["online"]
    last = online[-1]
    results["cost"] = {
        "update_time_share": last["update_time_share"],
        "buffer_mb_max": last["buffer_peak_mb"],
        "updates": last["online_updates"],
    }
    if "offline-distilled" in runs:
        offline_alpha = alpha_over(runs["offline-distilled"], 0, n)
        results["offline_alpha"] = offline_alpha
        results["online_reaches_95pct_offline_at_query"] = reach_query(
            online, 0.95 * offline_alpha, args.window
        )
    plot_alpha(
        {name: alpha_series(e) for name, e in runs.items()},
        out / "alpha.png",
        window=args.window,
        references={"offline-distilled": results["offline_alpha"]} if "offline_alpha" in results else None,
        title=f"{args.domain}: online (update every {args.update_interval}) vs Standard vs offline",
    )
    table = markdown_table(rows, list(rows[0]))
    table += (
        f"\n\nupdates: {last['online_updates']}, update time / serving time: {last['update_time_share']:.3f}, "
        f"max buffer: {last['buffer_peak_mb']:.2f} MB"
    )
    if "offline_alpha" in results:
        table += (
            f"\noffline-distilled alpha on the stream: {results['offline_alpha']:.3f}; online windowed alpha "
            f"(window {args.window}) stays >= 95% of it from query {results['online_reaches_95pct_offline_at_query']}"
            f" of {n}"
        )
    save_results(out, results, table)
    return results


if __name__ == "__main__":
    main()
