"""Cost of online updates: wall time in updates as a share of serving time, and the buffer's memory.

    python -m benchmarks.online_cost                                     # sql, 64 queries, intervals 1 and 8
    python -m benchmarks.online_cost --domain code --queries 128 --intervals 8 16

Serves --queries queries of one domain with the demo pair and distils online at each update
interval, with the loss on wrong tokens only (the paper) and on all generated tokens. Update time
counts the student forward/backward passes and the optimizer step of update queries; serving
time is the speculative decoding of every query. Buffer memory is the peak of the buffered
queries' token ids and target logits (float16, on the CPU). Also prints the buffer estimate for
a 32000-token vocabulary (Vicuna/LLaMA). Writes {out}/results.json and table.md.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.online_common import (
    load_sources,
    make_parser,
    markdown_table,
    parse,
    run_online,
    save_results,
)
from osd.demo import DOMAINS


def main(argv: list[str] | None = None) -> dict:
    parser = make_parser(__doc__)
    parser.add_argument("--domain", default=DOMAINS[0])
    parser.add_argument("--queries", type=int, default=64)
    parser.add_argument("--intervals", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--max_new_tokens", type=int, default=64)
    parser.add_argument("--out", default="outputs/online_cost")
    args = parse(parser, argv)
    out = Path(args.out)
    stream = load_sources([args.domain])[args.domain][: args.queries]
    rows = []
    for interval in args.intervals:
        for positions in ("wrong", "all"):
            entries = run_online(
                out / f"interval{interval}_{positions}",
                stream,
                update_interval=interval,
                learning_rate=args.learning_rate,
                max_new_tokens=args.max_new_tokens,
                extra=["--online_loss_positions", positions],
            )
            last = entries[-1]
            rows.append(
                {
                    "update interval": interval,
                    "loss positions": positions,
                    "updates": last["online_updates"],
                    "update time / serving time": last["update_time_share"],
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
    )
    return {"rows": rows}


if __name__ == "__main__":
    main()
