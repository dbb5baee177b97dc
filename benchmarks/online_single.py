r"""Fig. 2 analogue: online distillation on a single-domain stream vs Standard SD vs offline-distilled drafts.

    python -m benchmarks.online_single                                   # defaults below
    python -m benchmarks.online_single --domain sql --queries 400 --online_update_interval 8
    # the online vs offline vs Standard ablation's drafts, recorded as its methods_training part
    python -m benchmarks.online_single --results benchmarks/results/ablations/v1 --domain finance --queries 40 \
        --online_update_interval 1 --learning_rate 3e-4 --offline_steps 16 --sample_fraction 0 \
        --out outputs/ablations/methods

The stream is the first --queries training queries of --domain. Every run serves it with the
demo target: the demo draft distilled online (update every --online_update_interval queries), the demo
draft untouched (Standard), and two static drafts distilled offline beforehand (on-policy, forward
KL, --offline_steps steps, as bash_scripts/demo/offline.sh):
  - "offline-distilled": on the domain's other training queries, disjoint from the stream (the
    paper's offline upper reference: a draft distilled on the domain in advance);
  - "offline, first 10%": on the stream's first --sample_fraction of queries (the reference's
    sample_online_distill.sh: distil once on a sample of the traffic, then serve statically).
The online recipe is `osd.distill.demo_runs.BENCHMARK_PRESET` with an update every 8 queries, changed
by the online flags (`osd.online.config.add_online_flags`: --steps_per_update, --loss_positions, ...).
Writes {out}/alpha.png, results.json and table.md: alpha per quarter of the stream, the first
query from which the online windowed alpha stays at 95% of the offline draft's alpha, and the
cost of the updates (share of serving time, buffer memory). With --results, the same record also
goes to `{results}/parts/methods_training.json` for the ablation report (`benchmarks.ablations report`;
training only: it may share the machine with one other 1-thread job).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from osd.alpha import format_alpha
from osd.distill.demo_runs import (
    BENCHMARK_PRESET,
    alpha_over,
    prefix_samples,
    run_online,
    static,
    static_runs,
)
from osd.drivers import make_parser, parse
from osd.online.config import add_online_flags, online_arguments
from osd.paths import DOMAINS
from osd.plots import alpha_series, plot_alpha
from osd.results import markdown_table, save_results, write_part
from osd.spec.gamma import ALPHA_FIGURES, NEEDS_PROPOSALS, add_gamma_flag
from osd.streams import load_sources
from osd.user_errors import run_main

PRESET = replace(BENCHMARK_PRESET, online_update_interval=8)


def reach_query(entries: list[dict], target: float, window: int) -> int | None:
    """First query count from which the windowed alpha never drops below `target` again."""
    reached = None
    for i in range(len(entries)):
        windowed = alpha_over(entries, max(0, i + 1 - window), i + 1)
        if windowed is not None and windowed >= target:
            reached = reached or i + 1
        else:
            reached = None
    return reached


def main(argv: list[str] | None = None) -> dict:
    parser = make_parser(__doc__)
    parser.add_argument("--domain", default=DOMAINS[0])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    add_gamma_flag(parser, ALPHA_FIGURES, plain_decoding=NEEDS_PROPOSALS)
    parser.add_argument("--max_new_tokens", type=int, default=64, help="new tokens per query, at most")
    add_online_flags(parser, PRESET)
    parser.add_argument("--window", type=int, default=25, help="moving-average window (queries)")
    parser.add_argument(
        "--offline_steps", type=int, default=60, help="steps of each offline baseline (batch 8)"
    )
    parser.add_argument("--sample_fraction", type=float, default=0.1, help="0: no 'first 10%%' baseline")
    parser.add_argument("--out", default="outputs/online_single")
    parser.add_argument(
        "--results",
        help="also record this run as the ablations' methods_training part: {results}/parts/methods_training.json",
    )
    args = parse(parser, argv)
    recipe = online_arguments(args)
    out = Path(args.out)
    records = load_sources([args.domain])[args.domain]
    stream, rest = records[: args.queries], records[args.queries :]
    offline = {"offline-distilled": rest}
    if args.sample_fraction > 0:
        offline |= prefix_samples(stream, [args.sample_fraction])
    serving = {"gamma": args.gamma, "max_new_tokens": args.max_new_tokens}
    common = {"learning_rate": args.learning_rate, **serving}
    runs = {
        "online": run_online(out / "online", stream, recipe, **common),
        "Standard": run_online(out / "standard", stream, static(recipe), **common),
    }
    runs |= static_runs(out, stream, offline, args.offline_steps, args.learning_rate, recipe, **serving)
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
    offline_alpha = alpha_over(runs["offline-distilled"], 0, n)
    results["offline_alpha"] = offline_alpha
    reach = None if offline_alpha is None else reach_query(online, 0.95 * offline_alpha, args.window)
    results["online_reaches_95pct_offline_at_query"] = reach
    plot_alpha(
        {name: alpha_series(e) for name, e in runs.items()},
        out / "alpha.png",
        window=args.window,
        references={"offline-distilled": offline_alpha} if offline_alpha is not None else None,
        title=f"{args.domain}: online (update every {recipe.online_update_interval}, "
        f"{recipe.online_steps_per_update} step(s), "
        f"gamma {args.gamma}, {args.max_new_tokens} tokens) vs Standard vs offline",
    )
    table = markdown_table(rows, list(rows[0]))
    table += (
        f"\n\nupdates: {last['online_updates']}, update time / serving time: {last['update_time_share']:.3f}, "
        f"max buffer: {last['buffer_peak_mb']:.2f} MB"
        f"\noffline-distilled alpha on the stream: {format_alpha(offline_alpha)}; online windowed alpha "
        f"(window {args.window}) stays >= 95% of it from query {results['online_reaches_95pct_offline_at_query']}"
        f" of {n}"
    )
    save_results(out, results, table, "benchmarks.online_single", argv)
    if args.results:
        write_part(Path(args.results), "methods_training", "benchmarks.online_single", argv, results)
    return results


if __name__ == "__main__":
    raise SystemExit(run_main(main, "benchmarks.online_single"))
