r"""Greedy alpha per domain and the step cost c of drafters of either kind, through the engine: an EAGLE-3 head
(`osd.demo.build_head`) beside a draft model.

A head drafts from the target's own states, so it is not replayed without the target as `benchmarks.draft_alpha`
replays a draft model: every drafter here runs the engine's greedy `SpeculativeDecoder.generate` with the target on
each recording's prompts (`osd.analysis.record`; at the recording's max_new_tokens), alpha pooled over the prompts
as the engine pools it (`osd.alpha.pooled_alpha`: accepted positions and the first rejected one). The outputs are
compared with the recorded target outputs (greedy speculative decoding emits them, up to bf16 near-ties, since a
verification pass over several tokens rounds differently from a one-token step). c = the drafter's step as the
engine takes it (`osd.spec.timing.draft_step_time`) / the target's one-token step (`step_time`), at --context
tokens.

    python -m benchmarks.head_alpha --drafters osd/demo/models/head osd/demo/models/draft \
        --recordings benchmarks/results/general_draft/recordings/{sql,math,code,finance}_eval.jsonl --gamma 4 \
        --out benchmarks/results/standard_head/v1/alpha.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel

from osd.alpha import format_alpha, pooled_alpha
from osd.analysis.recording import load_recording
from osd.paths import TARGET_PATH, repo_relative
from osd.results import command_line
from osd.spec import SpeculativeDecoder
from osd.spec.drafter import Drafter, load_drafter
from osd.spec.timing import draft_step_time, machine, step_time
from osd.user_errors import run_main


def engine_alpha(
    drafter: Drafter, target: PreTrainedModel, recording: str, gamma: int, limit: int | None
) -> dict:
    """Pooled greedy alpha of `drafter` on a recording's prompts, and how many outputs equal the recorded ones."""
    rec = load_recording(recording)
    decoder = SpeculativeDecoder(drafter, target, gamma)
    alpha_sum, proposed, same, prompts = 0.0, 0, 0, rec.prompts[:limit]
    for prompt in prompts:
        out = decoder.generate(torch.tensor([prompt.prompt_ids]), rec.header["max_new_tokens"],
                               eos_token_id=rec.header["eos_token_id"])  # fmt: skip
        alpha_sum, proposed = alpha_sum + out.alpha_sum, proposed + out.num_proposed
        same += out.generated_ids[0].tolist() == prompt.output_ids
    return {"alpha": pooled_alpha(alpha_sum, proposed), "proposed": proposed,
            "outputs_as_recorded": f"{same}/{len(prompts)}"}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--drafters", nargs="+", required=True, help="head or draft model folders")
    parser.add_argument("--target", default=str(TARGET_PATH))
    parser.add_argument("--recordings", nargs="+", required=True, help="osd.analysis.record outputs (.jsonl)")
    parser.add_argument("--gamma", type=int, default=4, help="draft tokens per verification")
    parser.add_argument("--limit", type=int, default=None, help="first N prompts of each recording")
    parser.add_argument("--context", type=int, default=64, help="tokens cached when c's steps are timed")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None, help="JSON file for the results and the command")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    target = AutoModelForCausalLM.from_pretrained(args.target, dtype=torch.bfloat16).eval()
    results = {}
    for path in args.drafters:
        drafter, start = load_drafter(path, torch.bfloat16), time.time()
        rows = {Path(r).name.removesuffix(".jsonl"): engine_alpha(drafter, target, r, args.gamma, args.limit)
                for r in args.recordings}  # fmt: skip
        alphas = [row["alpha"] for row in rows.values() if row["alpha"] is not None]
        step, target_step = draft_step_time(drafter, args.context), step_time(target, args.context)
        results[path] = {"alpha": rows, "mean_alpha": sum(alphas) / len(alphas), "step_ms": step * 1e3,
                         "target_step_ms": target_step * 1e3, "c": step / target_step,
                         "wall_s": time.time() - start}  # fmt: skip
        print(f"{path}: " + ", ".join(f"{k} {format_alpha(v['alpha'])} ({v['outputs_as_recorded']} as recorded)"
                                      for k, v in rows.items())
              + f"; mean {results[path]['mean_alpha']:.3f}; c = {results[path]['c']:.3f}", flush=True)  # fmt: skip
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        command = command_line("benchmarks.head_alpha", argv)
        report = {"command": command, "gamma": args.gamma, "machine": machine(), "drafters": results}
        Path(args.out).write_text(json.dumps(repo_relative(report), indent=1) + "\n")


if __name__ == "__main__":
    raise SystemExit(run_main(main, "benchmarks.head_alpha"))
