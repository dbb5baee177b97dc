"""Batched decoding benchmark: target-only HF `generate` vs `SpeculativeDecoder.generate_batch`, greedy.

For each batch size B, the same prompts (the demo workload's eval queries, left-padded into batches
of B) are decoded to a fixed length (--max_new_tokens, EOS ignored, so every row costs the same) by
the target alone and by speculative decoding with the demo pair. Prints tokens/s and the speedup of
speculative decoding at each B; writes JSON. On a weight-bandwidth-bound target a verification of
B x (gamma + 1) tokens costs little more than B x 1, while the draft's share grows with B: Eq. 2 with
the measured verify cost says how far batching erodes the speedup.

    python benchmarks/bench_batch.py --threads 1                      # B = 1 2 4 8; gamma 1, 2 and auto
    python benchmarks/bench_batch.py --batch_sizes 1 4 --gammas 3 auto --draft outputs/online_demo/draft
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from torch.utils import benchmark

from osd.conversations import load_conversations, user_query
from osd.demo import DRAFT_PATH, TARGET_PATH, WORKLOAD_DIR, load_demo_pair, repo_relative
from osd.distill.data import pad
from osd.prompting import encode_prompt
from osd.spec import SpeculativeDecoder


def seconds(fn) -> float:
    """One timed call (a decode takes seconds: repeats would only multiply the run time)."""
    return (
        benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads()).timeit(1).mean
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=str(TARGET_PATH))
    ap.add_argument("--draft", default=str(DRAFT_PATH))
    ap.add_argument("--dtype", default="bfloat16", help="both models' dtype")
    ap.add_argument("--batch_sizes", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument(
        "--num_prompts", type=int, default=8, help="prompts per batch size (a multiple of each B)"
    )
    ap.add_argument("--gammas", nargs="+", default=["1", "2", "auto"], help="integers, or auto (GammaPolicy)")
    ap.add_argument("--max_new_tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="outputs/bench_batch.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    draft, target, tok = load_demo_pair(args.draft, args.target, dtype=dtype, draft_dtype=dtype)
    records = [r for path in sorted(WORKLOAD_DIR.glob("*_eval.json")) for r in load_conversations(path)[:2]]
    prompts = [encode_prompt(tok, user_query(r)) for r in records][: args.num_prompts]
    n = args.max_new_tokens
    hf = {"max_new_tokens": n, "min_new_tokens": n, "do_sample": False, "pad_token_id": tok.pad_token_id}
    target.generate(
        torch.tensor([prompts[0]]), **(hf | {"max_new_tokens": 4, "min_new_tokens": 4})
    )  # warm-up
    rows = []
    for b in args.batch_sizes:
        batches = [pad(prompts[i : i + b], tok.pad_token_id, "left") for i in range(0, len(prompts), b)]
        base = sum(
            seconds(lambda ids=ids, m=m: target.generate(ids, attention_mask=m, **hf)) for ids, m in batches
        )
        for gamma in args.gammas:
            decoder = SpeculativeDecoder(draft, target, gamma=gamma if gamma == "auto" else int(gamma))
            if decoder.policy is not None:  # measured once per batch size, outside the timed runs
                decoder.policy.measure_costs(draft, target, b)
            outs = []
            spec = sum(
                seconds(
                    lambda ids=ids, m=m, o=outs, d=decoder: o.extend(
                        d.generate_batch(ids, m, max_new_tokens=n)
                    )
                )
                for ids, m in batches
            )
            tokens = sum(o.generated_ids.shape[1] for o in outs)
            proposed = sum(o.num_proposed for o in outs)
            steps = sum(len(o.accepted_lengths) for o in outs)
            rows.append({
                "batch size": b, "gamma": gamma, "target tok/s": len(prompts) * n / base, "spec tok/s": tokens / spec,
                "speedup": (tokens / spec) / (len(prompts) * n / base),
                "alpha": sum(o.alpha_sum for o in outs) / proposed if proposed else float("nan"),
                "proposed / step": proposed / steps,
            })  # fmt: skip
    header = list(rows[0])
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in r.values()) + " |")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "command": " ".join(["python benchmarks/bench_batch.py", *sys.argv[1:]]),
        "args": vars(args),
        "rows": rows,
    }
    out.write_text(json.dumps(repo_relative(record), indent=1))


if __name__ == "__main__":
    main()
