"""Fig. 6 analogue: one draft per query class (routed) vs one shared draft, on the same mixed stream.

    python -m benchmarks.online_routed                                   # 4 domains, 320 mixed queries
    python -m benchmarks.online_routed --queries 600 --route_by dataset --out outputs/online_routed_long

The stream mixes the local workload's domains i.i.d. (osd.streams.mix_stream). Three runs serve
it: one shared draft distilled online, one draft per --route_by value distilled online on its
own queries (osd.distill.routing), and the untouched draft (Standard). Every draft starts from
the demo draft; updates every --online_update_interval queries (per draft for the routed run). Writes
{out}/alpha.png, results.json and table.md: alpha per domain over the second half of the stream.
"""

from __future__ import annotations

from pathlib import Path

from osd.distill.demo_runs import BENCHMARK_PRESET, alpha_over, run_online, static
from osd.drivers import make_parser, parse
from osd.online.config import add_online_flags, online_arguments
from osd.paths import DOMAINS
from osd.plots import alpha_series, plot_alpha
from osd.results import markdown_table, save_results
from osd.streams import load_sources, mix_stream
from osd.user_errors import run_main


def main(argv: list[str] | None = None) -> dict:
    parser = make_parser(__doc__)
    parser.add_argument("--domains", nargs="+", default=list(DOMAINS))
    parser.add_argument("--queries", type=int, default=320)
    parser.add_argument("--route_by", default="dataset")
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    add_online_flags(parser, BENCHMARK_PRESET)
    parser.add_argument("--window", type=int, default=40, help="moving average (queries)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="outputs/online_routed")
    args = parse(parser, argv)
    out = Path(args.out)
    stream = mix_stream(load_sources(args.domains), args.queries, seed=args.seed)
    recipe, lr = online_arguments(args), args.learning_rate
    runs = {
        "shared draft": run_online(out / "shared", stream, recipe, learning_rate=lr),
        "routed drafts": run_online(out / "routed", stream, recipe, learning_rate=lr, route_by=args.route_by),
        "Standard": run_online(out / "standard", stream, static(recipe)),
    }
    half, n = len(stream) // 2, len(stream)
    rows = []
    for group in [None, *args.domains]:
        row = {"queries": "all" if group is None else group}
        row |= {name: alpha_over(e, half, n, group) for name, e in runs.items()}
        rows.append(row)
    plot_alpha(
        {name: alpha_series(e) for name, e in runs.items()},
        out / "alpha.png",
        window=args.window,
        title=f"mixed stream of {len(args.domains)} domains: routed ({args.route_by}) vs shared draft",
    )
    results = {"args": vars(args), "second_half": rows}
    table = f"alpha over queries {half + 1}-{n}:\n\n" + markdown_table(rows, list(rows[0]))
    save_results(out, results, table, "benchmarks.online_routed", argv)
    return results


if __name__ == "__main__":
    raise SystemExit(run_main(main, "benchmarks.online_routed"))
