r"""The alpha a head would need for a speedup over the draft model's, by Eq. 2 with the costs one run measured.

Reads the summary of a main job run with `--compare_head` (`osd.demo.online_demo`): both drafters served the same
stream on the same machine, and each has its measured c, verification cost and tokens/s. For Standard SD and for
online SD, the goal is --ratio times the draft model's measured speedup over the target alone. The alpha the head
needs for it (the mean over the domains, at the run's gamma) is Eq. 2 (`osd.cost_model`) inverted with the head's
costs, twice: if the head realised Eq. 2 in full, and if it realised it as the draft model did in that run
(measured / Eq. 2). Beside them, the mean alpha the head reached there, and its offline ceiling where the run drew
one: what distilling it on the workload's own earlier queries gives.

    python -m benchmarks.head_targets --summary outputs/online_demo_both/summary.json --ratio 1.3 \
        --out outputs/head_targets.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from osd.alpha import format_alpha
from osd.cost_model import alpha_from_tokens_per_step
from osd.datafiles import write_output
from osd.demo.report import mean_tail_alpha, speedups_over_alone
from osd.paths import repo_relative
from osd.results import command_line
from osd.user_errors import run_main

RUNS = ("standard", "online")


def needed_alpha(speedup: float, costs: dict, gamma: int) -> float | None:
    """The alpha at which Eq. 2 with `costs` (a drafter's measured c, verification cost and the target alone's
    step, in served target steps) gives `speedup` over the target alone; None if no alpha <= 1 does at `gamma`."""
    tokens = speedup / costs["baseline_step"] * (gamma * costs["c"] + costs["verify_cost"])
    return alpha_from_tokens_per_step(tokens, gamma) if tokens <= gamma + 1 else None


def head_targets(summary: dict, ratio: float) -> dict:
    """Per run (Standard SD, online SD): the draft model's measured speedup and its share of Eq. 2, the goal, the
    alpha the head needs for it (in full, at the draft model's share), and the head's measured and ceiling alphas."""
    gamma, model, head = summary["serving"]["gamma"], summary, summary["head"]
    measured = {name: dict(zip(RUNS, speedups_over_alone(d["domains"]), strict=True)) for name, d in
                (("model", model), ("head", head))}  # fmt: skip
    table = {}
    for run in RUNS:
        share = measured["model"][run] / model["costs"][f"eq2_{run}"]  # Eq. 2 at its mean tail alpha
        goal = ratio * measured["model"][run]
        table[run] = {
            "model_speedup": measured["model"][run],
            "model_share_of_eq2": share,
            "head_speedup": measured["head"][run],
            "goal": goal,
            "head_alpha_needed_full_eq2": needed_alpha(goal, head["costs"], gamma),
            "head_alpha_needed_at_model_share": needed_alpha(goal / share, head["costs"], gamma),
            "head_alpha": mean_tail_alpha(head["domains"], run),
            "head_ceiling": mean_tail_alpha(head["domains"], "ceiling"),
        }
    return {"gamma": gamma, "ratio": ratio, "runs": table}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--summary", required=True, help="summary.json of osd.demo.online_demo --compare_head"
    )
    parser.add_argument(
        "--ratio", type=float, default=1.3, help="the goal: this times the draft model's speedup"
    )
    parser.add_argument("--out", default=None, help="JSON file: the table and the command")
    args = parser.parse_args(argv)
    summary = json.loads(Path(args.summary).read_text())
    if "head" not in summary:
        raise ValueError(f"--summary {args.summary}: no head; run the main job with --compare_head")
    result = head_targets(summary, args.ratio)
    print(f"gamma {result['gamma']}; goal: {args.ratio} x the draft model's measured speedup")
    print("run       draft model (share of Eq. 2)  head  goal   head alpha needed: Eq. 2 in full, at the draft's "
          "share   head alpha reached, ceiling")  # fmt: skip
    for run, r in result["runs"].items():
        print(f"{run:<9} {r['model_speedup']:.2f}x ({r['model_share_of_eq2']:.2f})"
              f"{'':>15}{r['head_speedup']:.2f}x {r['goal']:.2f}x {format_alpha(r['head_alpha_needed_full_eq2']):>22}, "
              f"{format_alpha(r['head_alpha_needed_at_model_share'])}{'':>18}{format_alpha(r['head_alpha'])}, {format_alpha(r['head_ceiling'])}")  # fmt: skip
    result = {"command": command_line("benchmarks.head_targets", argv),
              "summary_command": summary["command"], **result}  # fmt: skip
    if args.out:
        write_output(
            args.out, json.dumps(repo_relative(result), indent=1) + "\n", "--out", "benchmarks.head_targets"
        )
    return result


if __name__ == "__main__":
    raise SystemExit(run_main(main, "benchmarks.head_targets"))
