"""A pair's step costs on a machine, from its configs alone: c, the verification cost, Eq. 2.

Latency does not depend on the weights, so the target and the draft are built with random weights
from their config.json (a folder holding config.json is enough: no weights need to travel to the
machine being measured; a draft config with `draft_vocab` gets its sub-vocabulary head). For each
device and dtype: the target's cached one-token step, the draft's (c = draft step / target step),
and a target pass over k + 1 tokens for k = 1..--max_gamma (its verification cost, in target
steps), each as the engine takes it (`osd.spec.timing.target_pass_time`, the draft by `draft_step_time`); then Eq. 2 with that verification cost at each
--alpha, at gamma 1..--max_gamma and at the best of them. This predicts what speculative decoding
can gain on a machine before a model is copied there; `bench_engine` measures it with real weights.

    python -m benchmarks.step_costs --threads 1
    python -m benchmarks.step_costs --devices cuda --dtypes bfloat16 --alpha 0.36 0.56 --out outputs/step_costs.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from osd.cost_model import speedup_measured_verify
from osd.models import SERVING_DTYPES, random_model
from osd.paths import DRAFT_PATH, TARGET_PATH, repo_relative
from osd.results import command_line
from osd.spec.timing import machine, pair_costs
from osd.spec.weight_major import use_weight_major_linears
from osd.user_errors import run_main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=str(TARGET_PATH), help="a folder with the target's config.json")
    ap.add_argument("--draft", default=str(DRAFT_PATH), help="a folder with the draft's config.json")
    ap.add_argument("--devices", nargs="+", default=["cpu"])
    ap.add_argument("--dtypes", nargs="+", default=["bfloat16", "float32"], choices=SERVING_DTYPES)
    ap.add_argument("--draft_dtype", choices=SERVING_DTYPES,
                    help="the draft's dtype in every run (default: each run's --dtypes entry, as the target's)")  # fmt: skip
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--context", type=int, default=100, help="tokens in the KV cache when a step is timed")
    ap.add_argument("--max_gamma", type=int, default=5)
    ap.add_argument("--alpha", type=float, nargs="+", default=[0.36, 0.42, 0.56],
                    help="acceptance rates to evaluate Eq. 2 at (defaults: the Standard demo draft on "
                    "the eval prompts, the main job's block drafts there, the main job's online tails)")  # fmt: skip
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="outputs/step_costs.json")
    return ap.parse_args(argv)


def eq2(c: float, verify: dict[int, float], alphas: list[float]) -> dict[float, dict[str, object]]:
    """Eq. 2 with the measured verification cost, per alpha: the speedup at every gamma and the best."""
    table = {}
    for a in alphas:
        per_gamma = {k: speedup_measured_verify(a, k, c, v) for k, v in verify.items()}
        best = max(per_gamma, key=per_gamma.get)
        table[a] = {"per_gamma": per_gamma, "best_gamma": best, "best_speedup": per_gamma[best]}
    return table


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    runs = []
    for device in args.devices:
        for name in args.dtypes:
            torch.manual_seed(args.seed)
            draft_name = args.draft_dtype or name
            target = random_model(args.target, getattr(torch, name), device)
            use_weight_major_linears(target)  # a float32 target's faster layout, as the benchmarks serve it
            draft = random_model(args.draft, getattr(torch, draft_name), device)
            run = {"device": device, "dtype": name, "draft_dtype": draft_name, "machine": machine(device)}
            run |= pair_costs(target, draft, args.context, args.max_gamma)
            run["eq2_measured_verify"] = eq2(run["c"], run["verify_cost"], args.alpha)
            runs.append(run)
            verify = " ".join(f"{v:.2f}" for v in run["verify_cost"].values())
            best = ", ".join(f"alpha {a}: {e['best_speedup']:.2f}x (gamma {e['best_gamma']})"
                             for a, e in run["eq2_measured_verify"].items())  # fmt: skip
            print(f"{device} {name} (draft {draft_name}): target {run['target_ms']:.2f} ms, draft {run['draft_ms']:.2f} ms, "
                  f"c {run['c']:.3f}, verify cost k=1..{args.max_gamma}: {verify}; Eq. 2 {best}")  # fmt: skip
    result = {
        "command": command_line("benchmarks.step_costs", argv),
        "target": args.target,
        "draft": args.draft,
        "context": args.context,
        "threads": args.threads,
        "runs": runs,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(repo_relative(result), indent=1) + "\n")
    return result


if __name__ == "__main__":
    raise SystemExit(run_main(main, "benchmarks.step_costs"))
