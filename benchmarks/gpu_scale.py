"""The paper's scale on one GPU, by measurement: does distilling the draft on spare FLOPs cost serving nothing?

    python -m benchmarks.gpu_scale --out outputs/gpu_scale                        # on a GPU: 7B / 160M shapes
    python -m benchmarks.gpu_scale --shapes tiny --device cpu --queries 2 --out outputs/gpu_scale_tiny

A target with Llama-2-7B's shapes and a draft with LLaMA-160M's (JackFram/llama-160m), random weights in
--dtype built on --device from their configs (latency does not depend on the weights; nothing is
downloaded). Measured:
- costs: the target's cached one-token step, the draft's (c), and the verification of k = 1..--max_gamma
  draft tokens (a target pass over k + 1 tokens, in target steps), after --prompt_tokens + half an answer;
- serving: --queries random prompts served by the osd engine through the one online loop (osd.online), first
  with the draft as it is (Standard SD), then online with the flags' recipe (default: the main job's, an
  update after every query, its forward and backward on the buffer of the target's logits in a background
  worker while a --draft_serving_dtype copy serves): serving time per verification step in both runs, the
  update's time on the serving path and in the worker as shares of serving time, peak GPU memory;
- Eq. 2 (a prediction, labelled so): per domain, with these costs and the alphas the main job measured on
  the CPU (--alphas), the speedup at --gamma and at the best gamma, and the online draft's with its update
  charged (the serving slowdown and the serving path's share measured above).
Alpha itself is not measured here: random weights accept almost nothing. Writes {out}/results.json and
{out}/table.md.
"""

from __future__ import annotations

import argparse
import copy
import json
from dataclasses import replace
from pathlib import Path

import torch
from transformers import LlamaConfig, PreTrainedModel

from osd.cost_model import expected_tokens_per_step, speedup_measured_verify
from osd.demo.online_demo import PRESET
from osd.drivers import make_parser, parse
from osd.models import SERVING_DTYPES, random_model
from osd.online.config import OnlineArguments, add_online_flags, online_arguments
from osd.online.engine_server import EngineServer
from osd.online.loop import OnlineLoop, Query
from osd.online.records import OnlineState
from osd.paths import DOMAINS, REPO_ROOT
from osd.results import markdown_table, save_results
from osd.serving.distiller import DraftDistiller
from osd.spec.timing import machine, pair_costs
from osd.user_errors import run_main

LLAMA2_7B = dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096, rms_norm_eps=1e-5)  # fmt: skip
LLAMA_160M = dict(vocab_size=32000, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                  num_attention_heads=12, num_key_value_heads=12, max_position_embeddings=2048, rms_norm_eps=1e-6)  # fmt: skip
# the same family a few MB large: the CPU dry run of the GPU checks
TINY = (dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4),
        dict(vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2))  # fmt: skip
SHAPES = {"paper": (LLAMA2_7B, LLAMA_160M), "tiny": TINY}
# the main job's per-domain alphas on the CPU (every recorded run has the same ones)
CPU_ALPHAS = REPO_ROOT / "benchmarks/results/online_demo/v3_45x32_lean/summary_run1_fresh_clone.json"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = make_parser(__doc__)
    add = parser.add_argument
    add(
        "--shapes",
        choices=list(SHAPES),
        default="paper",
        help="paper: Llama-2-7B / LLaMA-160M; tiny: a dry run",
    )
    add("--device", default="cuda")
    add(
        "--dtype",
        default="bfloat16",
        choices=SERVING_DTYPES,
        help="the target's dtype (the draft trains in float32)",
    )
    add("--prompt_tokens", type=int, default=128)
    add("--max_new_tokens", type=int, default=64)
    add("--queries", type=int, default=8, help="queries served by each run (after one untimed warm-up query)")
    add("--gamma", type=int, default=3, help="draft tokens per verification when serving, and Eq. 2's gamma")
    add("--max_gamma", type=int, default=8, help="verification costs and Eq. 2's best gamma over 1..this")
    add("--learning_rate", type=float, default=1e-4)
    add("--reps", type=int, default=10, help="timed calls per round of each step cost")
    add("--rounds", type=int, default=3, help="rounds of each step cost (the best median counts)")
    add("--alphas", default=str(CPU_ALPHAS), help="a main-job summary.json: its per-domain alphas feed Eq. 2")
    add("--seed", type=int, default=0)
    add("--out", default="outputs/gpu_scale")
    add_online_flags(parser, PRESET)
    args = parse(parser, argv)
    if not 1 <= args.gamma <= args.max_gamma:
        parser.error(f"--gamma must lie in 1..--max_gamma ({args.max_gamma}), got {args.gamma}")
    return args


def build_pair(shapes: str, dtype: torch.dtype, device: str) -> tuple[PreTrainedModel, PreTrainedModel]:
    """(target in `dtype`, draft in float32: the weights the optimizer trains), random, on `device`."""
    target_shape, draft_shape = SHAPES[shapes]
    target = random_model(LlamaConfig(**target_shape), dtype, device)
    return target, random_model(LlamaConfig(**draft_shape), torch.float32, device)


def serve(target: PreTrainedModel, draft: PreTrainedModel, online: OnlineArguments, queries: list[Query],
          args: argparse.Namespace) -> dict[str, float]:  # fmt: skip
    """Serve `queries` through the online loop (static when --online_update_interval is 0); its times."""
    server = EngineServer(target, args.gamma, args.max_new_tokens, eos_token_id=None, pad_token_id=0)
    learns = online.online_update_interval > 0
    updater = DraftDistiller(draft, target, learning_rate=args.learning_rate).updater(
        online, OnlineState(), learns
    )
    state = OnlineLoop(server, updater, online).run(queries)
    steps = sum(q.steps for q in state.queries)
    return {
        "queries": len(state.queries),
        "tokens": sum(q.num_generated for q in state.queries),
        "steps": steps,
        "serve_ms_per_step": 1e3 * state.serve_time_s / steps,
        "updates": state.updates,
        "update_ms": 1e3 * state.background_update_time_s / state.updates if state.updates else None,
        "serving_path_share": state.update_time_s / state.serve_time_s,
        "background_share": state.background_update_time_s / state.serve_time_s,
        "buffer_peak_mb": state.max_buffer_bytes / 2**20,
    }


def eq2_rows(costs: dict, alphas: dict[str, dict[str, float]], gamma: int, charge: float) -> list[dict]:
    """Per domain and draft, Eq. 2 with the measured costs: speedup and ms/token at `gamma`, the best gamma;
    the online draft's speedup divided by `charge` (its update's cost to serving) as well."""
    c, verify = costs["c"], costs["verify_cost"]
    rows = []
    for domain, runs in alphas.items():
        for run, alpha in runs.items():
            per_gamma = {k: speedup_measured_verify(alpha, k, c, v) for k, v in verify.items()}
            best = max(per_gamma, key=per_gamma.get)
            ms = costs["target_ms"] * (gamma * c + verify[gamma]) / expected_tokens_per_step(alpha, gamma)
            rows.append({"domain": domain, "draft": run, "alpha (CPU)": alpha, f"Eq. 2 at gamma {gamma}": per_gamma[gamma],
                         "ms/token": ms, "best gamma": best, "Eq. 2 at best": per_gamma[best],
                         "with its update": per_gamma[gamma] / charge if run == "online" else None})  # fmt: skip
    return rows


def cpu_alphas(path: str) -> dict[str, dict[str, float]]:
    """{domain: {"standard": alpha, "online": alpha}} of a main-job summary.json."""
    try:
        summary = json.loads(Path(path).read_text())
        return {
            r["domain"]: {run: r[run]["alpha"] for run in ("standard", "online")} for r in summary["domains"]
        }
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(
            f"--alphas {path}: not a main-job summary.json with per-domain alphas ({e})"
        ) from None


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    alphas = cpu_alphas(args.alphas)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(args.seed)
    dtype = getattr(torch, args.dtype)
    target, draft = build_pair(args.shapes, dtype, args.device)
    serving_draft = copy.deepcopy(draft).to(getattr(torch, args.draft_serving_dtype or "float32"))
    context = args.prompt_tokens + args.max_new_tokens // 2
    costs = pair_costs(target, serving_draft, context, args.max_gamma, args.reps, args.rounds)
    del serving_draft
    generator = torch.Generator().manual_seed(args.seed)
    queries = [Query(torch.randint(4, target.config.vocab_size, (args.prompt_tokens,), generator=generator).tolist())
               for _ in range(args.queries + 1)]  # fmt: skip
    online = online_arguments(args)
    static = replace(online, online_update_interval=0)
    serve(target, draft, static, queries[:1], args)  # warm-up: kernels chosen, caches allocated
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    runs = {"standard": serve(target, draft, static, queries[1:], args),
            "online": serve(target, draft, online, queries[1:], args)}  # fmt: skip
    slowdown = runs["online"]["serve_ms_per_step"] / runs["standard"]["serve_ms_per_step"]
    charge = slowdown * (1 + runs["online"]["serving_path_share"])
    peak = torch.cuda.max_memory_allocated() / 2**30 if args.device.startswith("cuda") else None
    rows = eq2_rows(costs, {d: alphas[d] for d in DOMAINS if d in alphas}, args.gamma, charge)
    results = {"args": vars(args), "device_machine": machine(args.device), "shapes": SHAPES[args.shapes],
               "context": context, "costs": costs, "runs": runs, "serving_slowdown": slowdown,
               "update_charge": charge, "peak_gpu_gib": peak, "eq2_prediction": rows}  # fmt: skip
    save_results(out, results, tables(results, args.gamma), "benchmarks.gpu_scale", argv)
    return results


def tables(results: dict, gamma: int) -> str:
    """The three Markdown tables: costs, serving with and without the update, Eq. 2 per domain."""
    costs, runs = results["costs"], results["runs"]
    cost_row = {"target step, ms": costs["target_ms"], "draft step, ms": costs["draft_ms"], "c": costs["c"]}
    cost_row |= {f"verify {k}": v for k, v in costs["verify_cost"].items()}
    run_rows = [{"run": name, **r} for name, r in runs.items()]
    peak = results["peak_gpu_gib"]
    return "\n\n".join([
        "Step costs (verify k: a target pass over k + 1 tokens, in target steps)",
        markdown_table([cost_row], list(cost_row)),
        f"Serving through the online loop; serving slowdown with the update beside it {results['serving_slowdown']:.3f}, "
        f"update charge {results['update_charge']:.3f}, peak GPU memory "
        + ("-" if peak is None else f"{peak:.2f} GiB"),
        markdown_table(run_rows, list(run_rows[0])),
        f"Eq. 2 prediction per domain: these costs and the alphas the main job measured on the CPU (gamma {gamma}; "
        "'with its update': the online speedup divided by the update charge)",
        markdown_table(results["eq2_prediction"], list(results["eq2_prediction"][0])),
    ])  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(run_main(main, "benchmarks.gpu_scale"))
