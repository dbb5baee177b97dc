"""Cost of online updates: wall time in updates as a share of serving time, and the buffer's memory.

    python -m benchmarks.online_cost                                     # sql, 24 queries, intervals 1 and 8
    python -m benchmarks.online_cost --domain code --queries 128 --intervals 8 16 --modes background
    python -m benchmarks.online_cost --intervals 1 --loss_positions all --steps_per_update 1 4 --max_propose_num 3

Serves --queries queries of one domain with the demo pair and distils online at each update
interval, with the loss on wrong tokens only (the paper) and on all generated tokens, each update
either on the serving path (synchronous: the reference's loop) or in a background thread on the
spare core (--online_background_update: its forward and backward overlap the next query; only
the wait, the optimizer step and the swap of the serving copy stay on the serving path).

Columns: "update time / serving time" is the update time on the serving path (what a user waits
for) over the engine's serving time; "background / serving time" is the worker thread's forward and
backward, which run beside serving; "serving s / query" shows whether the background thread
slows serving down (memory bandwidth, the GIL). Buffer memory is the peak of the buffered queries'
token ids and target logits (float16, on the CPU). Also prints the buffer estimate for a
32000-token vocabulary (Vicuna/LLaMA). Writes {out}/results.json and table.md.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

from osd.distill.demo_runs import BENCHMARK_PRESET, run_online
from osd.drivers import make_parser, parse
from osd.metric_keys import QUERIES_SERVED
from osd.online.config import LOSS_POSITIONS
from osd.paths import DOMAINS
from osd.results import markdown_table, save_results
from osd.spec.gamma import STANDARD_TIMING
from osd.streams import load_sources
from osd.user_errors import run_main

MODES = {"synchronous": False, "background": True}  # --online_background_update


def main(argv: list[str] | None = None) -> dict:
    parser = make_parser(__doc__)
    parser.add_argument("--domain", default=DOMAINS[0])
    parser.add_argument("--queries", type=int, default=24)
    parser.add_argument("--intervals", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--loss_positions", nargs="+", default=list(LOSS_POSITIONS), choices=LOSS_POSITIONS)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument(
        "--steps_per_update", type=int, nargs="+", default=[1], help="--online_steps_per_update values"
    )
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--max_new_tokens", type=int, default=64)
    parser.add_argument(
        "--max_propose_num",
        type=int,
        default=STANDARD_TIMING,
        help="gamma (1: the cost model's choice for the demo pair)",
    )
    parser.add_argument("--out", default="outputs/online_cost")
    args = parse(parser, argv)
    out = Path(args.out)
    stream = load_sources([args.domain])[args.domain][: args.queries]
    rows = []
    for interval, positions, steps, mode in itertools.product(
        args.intervals, args.loss_positions, args.steps_per_update, args.modes
    ):
        online = replace(
            BENCHMARK_PRESET,
            online_update_interval=interval,
            online_loss_positions=positions,
            online_steps_per_update=steps,
            online_background_update=MODES[mode],
        )
        entries = run_online(
            out / f"interval{interval}_{positions}_steps{steps}_{mode}",
            stream,
            online,
            learning_rate=args.learning_rate,
            max_new_tokens=args.max_new_tokens,
            gamma=args.max_propose_num,
        )
        last = entries[-1]
        rows.append(
            {
                "update interval": interval,
                "loss positions": positions,
                "steps per update": steps,
                "update": mode,
                "updates": last["online_updates"],
                "update time / serving time": last["update_time_share"],
                "background / serving time": last["background_update_share"],
                "serving s / query": last["serve_time_s"] / last[QUERIES_SERVED],
                "peak buffer (MB)": last["buffer_peak_mb"],
                "alpha (cumulative)": last["alpha_cumulative"],
            }
        )
    note = (
        "buffer for V = 32000 (float16): 62.5 KB per loss position; interval 8 x 128 positions (all) = 64 MB"
    )
    save_results(
        out,
        {"args": vars(args), "rows": rows, "note": note},
        markdown_table(rows, list(rows[0])) + f"\n\n{note}",
        "benchmarks.online_cost",
        argv,
    )
    return {"rows": rows}


if __name__ == "__main__":
    raise SystemExit(run_main(main, "benchmarks.online_cost"))
