r"""Engine benchmark: target-only decoding vs HF assisted generation vs `osd.spec`, greedy.

Same prompts, same gamma, one process. Prints a table and writes JSON with tokens/s, alpha,
mean accepted length, measured speedup over target-only decoding (the target alone through the engine's own
cache, the lean Llama step where it applies, as `osd.spec` verifies; HF `generate` has a row of its own), the Eq. 2
prediction from the
measured alpha and c, measured / predicted, and where `osd.spec` spends a step (draft forwards,
verification, accept/reject, cache bookkeeping, the rest); with --profile, the ops that took most CPU time in one
fixed-gamma `generate` (torch.profiler; on CUDA with their device time). With --head, an EAGLE-3 head (`osd.spec.eagle3`) serves
the same prompts at the same gamma in the same run: a row of its own, its c and its Eq. 2 figures.

c is the draft's decode-step time over the target's (single-token forwards with a KV cache);
verify_cost is the target's (gamma + 1)-token forward over its single-token forward, for the
variant of Eq. 2 that charges verification at its measured price.

Usage:
    python benchmarks/bench_engine.py --threads 1                  # the demo pair (bf16), demo eval prompts
    python benchmarks/bench_engine.py --threads 1 --draft outputs/online_demo/draft --draft_dtype bfloat16
    python benchmarks/bench_engine.py --threads 1 --data_drafts outputs/online_demo/drafts/{domain}
    python benchmarks/bench_engine.py --threads 1 --head osd/demo/models/head   # beside it, an EAGLE-3 head
    python benchmarks/bench_engine.py --target lmsys/vicuna-7b-v1.3 --draft JackFram/llama-160m \
        --data data/raw_data/spider_validation.json --num_prompts 20 --device cuda --dtype bfloat16
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile
from transformers import AutoModelForCausalLM, AutoTokenizer

from osd.alpha import format_alpha
from osd.conversations import load_conversations, user_query
from osd.cost_model import speedup, speedup_measured_verify
from osd.demo.target import ensure_if_demo_target
from osd.models import SERVING_DTYPES
from osd.paths import TARGET_PATH, repo_relative
from osd.prompting import encode_prompt
from osd.results import markdown_table
from osd.spec import SpeculativeDecoder
from osd.spec.draft_vocab import apply_draft_vocab
from osd.spec.eagle3 import load_head
from osd.spec.evaluate import AcceptanceStats
from osd.spec.gamma import DEMO, NEEDS_PROPOSALS, NO_POLICY, add_gamma_flag
from osd.spec.hf_generate import timed_generate, timed_target_alone
from osd.spec.packed_linear import check_packed_dtype, use_packed_linears
from osd.spec.timing import draft_step_time, machine, mid_answer_context, target_pass_time
from osd.spec.weight_major import use_weight_major_linears
from osd.user_errors import run_main

PROFILED_OPS = 15


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from osd.paths import DRAFT_PATH, WORKLOAD_DIR

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=str(TARGET_PATH), help="target model: hub name or path")
    ap.add_argument("--draft", default=str(DRAFT_PATH), help="draft model: hub name or path")
    ap.add_argument(
        "--data_drafts",
        help="a draft per --data file instead of --draft: a path with {domain}, the file's name before "
        "'_eval' (e.g. the main job's drafts/{domain}: the online draft as it stood after serving that domain)",
    )
    ap.add_argument(
        "--data",
        nargs="+",
        default=sorted(str(p) for p in WORKLOAD_DIR.glob("*_eval.json")),
        help="conversation-JSON files whose user turns are the prompts",
    )
    ap.add_argument("--num_prompts", type=int, default=8, help="prompts per data file")
    add_gamma_flag(ap, DEMO, "the demo's; best_gamma for the demo pair (c 0.018, alpha 0.36); gamma auto is a "
                   "row of its own", plain_decoding=NEEDS_PROPOSALS, auto=NO_POLICY)  # fmt: skip
    ap.add_argument("--max_new_tokens", type=int, default=64)
    ap.add_argument(
        "--ignore_eos",
        action="store_true",
        help="always generate max_new_tokens (fixed-length timing, as speed benchmarks usually do)",
    )
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="bfloat16", choices=SERVING_DTYPES, help="the target's dtype")
    ap.add_argument("--draft_dtype", default="bfloat16", choices=SERVING_DTYPES, help="the draft's dtype")
    ap.add_argument(
        "--packed_linears", action="store_true",
        help="bf16 on the CPU: target and drafts read oneDNN-packed weights (osd.spec.packed_linear), every "
        "method alike, the target-only baseline included",
    )  # fmt: skip
    ap.add_argument(
        "--head", default=None,
        help="also serve the prompts with this EAGLE-3 head (a speculators-format folder, osd.spec.eagle3) "
        "beside the draft model, in its stored dtype",
    )  # fmt: skip
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--profile", action="store_true",
                    help="after the timed runs, profile osd.spec's generate of the first prompt: its top ops")  # fmt: skip
    ap.add_argument("--output", default="outputs/bench_engine.json")
    args = ap.parse_args(argv)
    check_packed_dtype(ap, args)
    return args


def data_draft(args: argparse.Namespace, data_path: str) -> str:
    """The draft that serves a --data file's prompts: --data_drafts with the file's domain, else --draft."""
    if args.data_drafts is None:
        return args.draft
    domain = Path(data_path).name.split("_eval")[0].removesuffix(".json")
    return args.data_drafts.format(domain=domain)


def serve(decoders: list[SpeculativeDecoder], prompts, max_new_tokens, eos) -> AcceptanceStats:
    """Each prompt [1, T] served greedily by its decoder."""
    return AcceptanceStats.from_outputs(
        [decoder.generate(ids, max_new_tokens=max_new_tokens, eos_token_id=eos)
         for ids, decoder in zip(prompts, decoders, strict=True)]
    )  # fmt: skip


def profile_generate(decoder: SpeculativeDecoder, ids: torch.Tensor, max_new_tokens: int, eos) -> list[dict]:
    """The PROFILED_OPS ops with the most self CPU time in one `generate` of ids [1, T] (torch.profiler): calls,
    self CPU ms and, on CUDA, self device ms. Where a step's time goes when it runs slower than its parts."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if ids.device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        decoder.generate(ids, max_new_tokens=max_new_tokens, eos_token_id=eos)
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[:PROFILED_OPS]
    return [{"op": e.key, "calls": e.count, "self_cpu_ms": e.self_cpu_time_total / 1e3,
             "self_device_ms": getattr(e, "self_device_time_total", 0.0) / 1e3} for e in events]  # fmt: skip


def step_breakdown(stats: AcceptanceStats) -> dict[str, float]:
    """Milliseconds per verification step: draft forwards, verification, accept/reject, caches, the rest
    (prompt set-up and output assembly); they add up to the wall time."""
    parts = {"draft": stats.draft_time_s, "verify": stats.target_time_s, "accept_reject": stats.accept_time_s,
             "cache": stats.cache_time_s}  # fmt: skip
    parts["other"] = stats.wall_time_s - sum(parts.values())
    return {k: 1e3 * v / stats.num_steps for k, v in parts.items()} | {
        "total": 1e3 * stats.wall_time_s / stats.num_steps
    }


def eq2(
    stats: AcceptanceStats, gamma: int, c: float, verify_cost: float, base_tps: float
) -> dict[str, float]:
    """A decoder's Eq. 2 predictions from its measured alpha and c, and the measured speedup over each."""
    measured = stats.tokens_per_s / base_tps
    predicted = speedup(stats.alpha, gamma, c)
    predicted_verify = speedup_measured_verify(stats.alpha, gamma, c, verify_cost)
    return {"eq2_predicted_speedup": predicted, "measured_over_eq2": measured / predicted,
            "eq2_measured_verify_predicted_speedup": predicted_verify,
            "measured_over_eq2_measured_verify": measured / predicted_verify}  # fmt: skip


def head_run(
    args: argparse.Namespace,
    target,
    prompts,
    eos,
    base_tps: float,
    context: int,
    target_step: float,
    verify_cost: float,
) -> tuple[tuple, dict]:
    """The --head row: the head serving every prompt at --gamma; its table row and its JSON entry."""
    head = load_head(args.head, target.device)
    head.check_target(target)
    decoder = SpeculativeDecoder(head, target, gamma=args.gamma)
    stats = serve([decoder] * len(prompts), prompts, args.max_new_tokens, eos)
    c = draft_step_time(head, context) / target_step
    row = ("osd.spec, EAGLE-3 head", stats.tokens_per_s, stats.alpha, stats.mean_accepted_length,
           stats.tokens_per_s / base_tps)  # fmt: skip
    entry = {"path": args.head, "generated_tokens": stats.num_generated, "c": c,
             **eq2(stats, args.gamma, c, verify_cost, base_tps), "step_breakdown_ms": step_breakdown(stats)}  # fmt: skip
    return row, entry


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    ensure_if_demo_target(args.target)
    tok = AutoTokenizer.from_pretrained(args.target)
    target = (
        AutoModelForCausalLM.from_pretrained(args.target, dtype=getattr(torch, args.dtype)).to(device).eval()
    )
    paths = {path: data_draft(args, path) for path in args.data}
    # each with its sub-vocabulary head (config.draft_vocab) for every method, HF assisted generation included
    drafts = {
        name: apply_draft_vocab(
            AutoModelForCausalLM.from_pretrained(name, dtype=getattr(torch, args.draft_dtype))
        ).to(device).eval()
        for name in dict.fromkeys(paths.values())
    }  # fmt: skip
    use_weight_major_linears(target)  # a float32 CPU target's faster layout (opt-in): every method alike
    if args.packed_linears:
        for model in (target, *drafts.values()):
            use_packed_linears(model)
    prompts, prompt_drafts = [], []  # the prompts [1, T] and the draft that serves each
    for path in args.data:
        for r in load_conversations(path)[: args.num_prompts]:
            prompts.append(torch.tensor([encode_prompt(tok, user_query(r))], device=device))
            prompt_drafts.append(drafts[paths[path]])
    draft = next(iter(drafts.values()))  # c and the verify cost: the drafts share one architecture
    eos = None if args.ignore_eos else tok.eos_token_id
    timed_generate(target, prompts[:1], 8, eos, tok.pad_token_id)  # warm-up
    timed_target_alone(target, prompts[:1], 8, eos)  # and the lean step's derived weights

    base_tokens, base_s = timed_target_alone(target, prompts, args.max_new_tokens, eos)
    hf_base_tokens, hf_base_s = timed_generate(target, prompts, args.max_new_tokens, eos, tok.pad_token_id)
    for d in drafts.values():
        d.generation_config.num_assistant_tokens = args.gamma
        d.generation_config.num_assistant_tokens_schedule = "constant"
        d.generation_config.assistant_confidence_threshold = 0.0
    hf_tokens, hf_s = timed_generate(
        target, prompts, args.max_new_tokens, eos, tok.pad_token_id, prompt_drafts
    )
    # HF's own adaptive schedule: start at 20 tokens, +2 after a fully accepted block, -1 otherwise,
    # and stop drafting early where the draft's confidence falls under 0.4 (its defaults)
    for d in drafts.values():
        d.generation_config.num_assistant_tokens = 20
        d.generation_config.num_assistant_tokens_schedule = "heuristic"
        d.generation_config.assistant_confidence_threshold = 0.4
    hf_h_tokens, hf_h_s = timed_generate(
        target, prompts, args.max_new_tokens, eos, tok.pad_token_id, prompt_drafts
    )
    auto = {id(d): SpeculativeDecoder(d, target, gamma="auto") for d in drafts.values()}
    for decoder in auto.values():
        decoder.policy.measure_costs(decoder.draft, target)  # once, before the timed runs
    auto_stats = serve([auto[id(d)] for d in prompt_drafts], prompts, args.max_new_tokens, eos)
    fixed = {id(d): SpeculativeDecoder(d, target, gamma=args.gamma) for d in drafts.values()}
    stats = serve([fixed[id(d)] for d in prompt_drafts], prompts, args.max_new_tokens, eos)
    top_ops = (
        profile_generate(fixed[id(prompt_drafts[0])], prompts[0], args.max_new_tokens, eos)
        if args.profile
        else None
    )

    context = mid_answer_context((p.shape[1] for p in prompts), args.max_new_tokens)
    target_step = target_pass_time(target, context)
    c = draft_step_time(draft, context) / target_step
    verify_cost = target_pass_time(target, context, args.gamma + 1) / target_step
    base_tps = base_tokens / base_s
    measured = stats.tokens_per_s / base_tps
    figures = eq2(stats, args.gamma, c, verify_cost, base_tps)
    predicted, predicted_verify = (
        figures["eq2_predicted_speedup"],
        figures["eq2_measured_verify_predicted_speedup"],
    )
    rows = [
        ("target only (osd.spec's cache)", base_tps, None, None, 1.0),
        ("target only (HF generate)", hf_base_tokens / hf_base_s, None, None, (hf_base_tokens / hf_base_s) / base_tps),
        ("HF assisted generation", hf_tokens / hf_s, None, None, (hf_tokens / hf_s) / base_tps),
        ("osd.spec", stats.tokens_per_s, stats.alpha, stats.mean_accepted_length, measured),
        ("HF assisted, heuristic", hf_h_tokens / hf_h_s, None, None, (hf_h_tokens / hf_h_s) / base_tps),
        ("osd.spec, gamma auto", auto_stats.tokens_per_s, auto_stats.alpha, auto_stats.mean_accepted_length,
         auto_stats.tokens_per_s / base_tps),
    ]  # fmt: skip
    head = None
    if args.head:
        head_row, head = head_run(args, target, prompts, eos, base_tps, context, target_step, verify_cost)
        rows.append(head_row)
    result = {
        "command": "python benchmarks/bench_engine.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "target": args.target,
        "draft": args.draft if args.data_drafts is None else args.data_drafts,
        "device": str(device),
        "machine": machine(device),
        "dtype": args.dtype,
        "draft_dtype": args.draft_dtype,
        "packed_linears": args.packed_linears,
        "threads": torch.get_num_threads(),
        "gamma": args.gamma,
        "max_new_tokens": args.max_new_tokens,
        "num_prompts": len(prompts),
        "ignore_eos": args.ignore_eos,
        "generated_tokens": {
            "target_only": base_tokens,
            "target_only_hf_generate": hf_base_tokens,
            "hf_assisted": hf_tokens,
            "osd_spec": stats.num_generated,
            "hf_assisted_heuristic": hf_h_tokens,
            "osd_spec_auto": auto_stats.num_generated,
        },
        "c": c,
        "verify_cost": verify_cost,
        "rows": [
            dict(method=m, tokens_per_s=t, alpha=a, mean_accepted_length=acc, speedup=s)
            for m, t, a, acc, s in rows
        ],
        **figures,
        "head": head,
        "osd_over_hf_assisted": stats.tokens_per_s / (hf_tokens / hf_s),
        "step_breakdown_ms": step_breakdown(stats),
        "profile_top_ops": top_ops,
    }
    print(
        f"{len(prompts)} prompts, generated tokens {base_tokens}/{hf_tokens}/{stats.num_generated} "
        f"(target only / HF assisted / osd.spec), gamma {args.gamma}, max_new_tokens {args.max_new_tokens}, {device} {args.dtype}/{args.draft_dtype}, "
        f"{torch.get_num_threads()} threads; c = {c:.3f}, verify_cost = {verify_cost:.2f}"
    )
    print(f"{'method':28s} {'tokens/s':>9s} {'alpha':>6s} {'acc.len':>7s} {'speedup':>7s}")
    for m, t, a, acc, s in rows:
        fl = f"{acc:7.2f}" if acc is not None else f"{'-':>7s}"
        print(f"{m:28s} {t:9.1f} {format_alpha(a):>6s} {fl} {s:7.2f}")
    print(
        f"Eq. 2 predicted speedup {predicted:.2f} (measured/predicted {measured / predicted:.2f}); "
        f"with measured verify cost {predicted_verify:.2f} (measured/predicted {measured / predicted_verify:.2f}); "
        f"osd.spec / HF assisted = {result['osd_over_hf_assisted']:.2f}"
    )
    print(
        "osd.spec per verification step, ms: "
        + ", ".join(f"{k} {v:.2f}" for k, v in result["step_breakdown_ms"].items())
    )
    if top_ops is not None:
        print(f"osd.spec's generate of the first prompt, its {PROFILED_OPS} ops with the most self CPU time:")
        print(markdown_table(top_ops, list(top_ops[0])))
    if head is not None:
        print(
            f"EAGLE-3 head: c = {head['c']:.3f}; Eq. 2 predicted speedup {head['eq2_predicted_speedup']:.2f} "
            f"(measured/predicted {head['measured_over_eq2']:.2f}); with measured verify cost "
            f"{head['eq2_measured_verify_predicted_speedup']:.2f} (measured/predicted "
            f"{head['measured_over_eq2_measured_verify']:.2f})"
        )
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(repo_relative(result), indent=1) + "\n")
    return result


if __name__ == "__main__":
    raise SystemExit(run_main(main, "benchmarks.bench_engine"))
