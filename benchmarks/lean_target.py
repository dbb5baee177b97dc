"""The target's passes through HF's forward and through the lean step, in each serving layout on offer here.

`SpeculativeDecoder` and the target-alone baseline (`osd.spec.evaluate.target_only_greedy`) run a Llama target
through `osd.spec.lean_llama.target_cache`: the lean step, each product in the layout of the target's own layers.
This times, for every layout `osd.spec.serving_choice` offers on this machine, the target's one-token step and its
passes over 2..--max_length tokens after --context cached tokens, through both paths in alternating rounds (the
best median of each), and writes them with the machine to --out. Latency does not depend on the weights: the
target is built with random weights from its config.json.

    python -m benchmarks.lean_target
    python -m benchmarks.lean_target --out benchmarks/results/lean_target/v1/avx512.json
"""

from __future__ import annotations

import argparse

import torch

from osd.models import random_model
from osd.paths import TARGET_PATH
from osd.results import write_result
from osd.spec.serving_choice import available_layouts, serving_copy
from osd.spec.timing import target_pass_time
from osd.user_errors import run_main

PATHS = ("hf", "lean")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=str(TARGET_PATH), help="a folder with the target's config.json")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--context", type=int, default=80, help="tokens in the KV cache when a pass is timed")
    ap.add_argument("--max_length", type=int, default=6, help="the longest pass timed, in new tokens")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of both paths; the best counts")
    ap.add_argument("--reps", type=int, default=10, help="timed passes per length and round (their median)")
    ap.add_argument("--out", default="outputs/lean_target.json")
    return ap.parse_args(argv)


def time_paths(target: torch.nn.Module, args: argparse.Namespace) -> dict[str, list[float]]:
    """Milliseconds of a pass over 1..max_length tokens through each path, the best of the rounds."""
    best = {path: [float("inf")] * args.max_length for path in PATHS}
    for _ in range(args.rounds):
        for path in PATHS:
            times = [
                1e3 * target_pass_time(target, args.context, n, args.reps, rounds=1, lean=path == "lean")
                for n in range(1, args.max_length + 1)
            ]
            best[path] = [min(a, b) for a, b in zip(best[path], times, strict=True)]
    return best


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    target = random_model(args.target, torch.bfloat16, "cpu")
    layouts = {}
    print(f"{'layout':13s} {'path':5s} {'step ms':>8s}  passes over 2..{args.max_length} tokens, in steps")
    for layout in available_layouts():
        ms = time_paths(serving_copy(target, layout), args)
        layouts[layout] = {path: {"pass_ms": ms[path]} for path in PATHS}
        layouts[layout]["lean_over_hf_step"] = ms["lean"][0] / ms["hf"][0]
        for path in PATHS:
            steps = " ".join(f"{t / ms[path][0]:.2f}" for t in ms[path][1:])
            print(f"{layout:13s} {path:5s} {ms[path][0]:8.1f}  {steps}")
    return write_result(args.out, "benchmarks.lean_target", argv, args, {"layouts": layouts})


if __name__ == "__main__":
    raise SystemExit(run_main(main, "benchmarks.lean_target"))
