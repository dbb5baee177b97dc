"""How much a top-k recording loses of the acceptance rate alpha = sum_x min(p, q).

Records the target with every logit (top_k = vocabulary) in memory, then truncates the recording to
each --ks and compares `osd.analysis.simulate`'s bounds with the exact value (the full recording).
Writes {out}/results.json and table.md.

    python benchmarks/topk_alpha.py --limit 4 --max_new_tokens 48 --out benchmarks/results/topk_alpha/v2
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from osd.analysis.record import record_conversations
from osd.analysis.recording import tokenizer_identity
from osd.analysis.simulate import simulate, topk_summary
from osd.paths import DRAFT_PATH, TARGET_PATH, repo_relative, workload_path
from osd.user_errors import positive_int, run_main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=str(TARGET_PATH))
    ap.add_argument("--draft", default=str(DRAFT_PATH))
    ap.add_argument("--conversations", default=str(workload_path("sql", "eval")))
    ap.add_argument("--limit", type=positive_int, default=4)
    ap.add_argument("--max_new_tokens", type=int, default=48)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--ks", type=int, nargs="+", default=[100, 20, 5, 1])
    ap.add_argument("--out", default="outputs/topk_alpha")
    args = ap.parse_args()
    torch.set_num_threads(1)
    vocab = AutoConfig.from_pretrained(args.target).vocab_size  # every logit
    recording = record_conversations(
        args.target, args.conversations, args.limit,
        max_new_tokens=args.max_new_tokens, top_k=vocab, temperature=args.temperature,
    )  # fmt: skip
    draft = AutoModelForCausalLM.from_pretrained(args.draft).eval()
    identity = tokenizer_identity(AutoTokenizer.from_pretrained(args.draft))
    exact = topk_summary(simulate(recording, draft, identity, gamma=1))["lower"]
    rows = []
    for k in sorted(args.ks, reverse=True):  # the top-k ids are sorted: slicing keeps the k largest
        for rec in recording.prompts:
            rec.topk_ids, rec.topk_logits = rec.topk_ids[:, :k], rec.topk_logits[:, :k]
        bounds = topk_summary(simulate(recording, draft, identity, gamma=1))
        tail = torch.cat(
            [
                1 - torch.exp(r.topk_logits / args.temperature - r.logsumexp[:, None]).sum(-1)
                for r in recording.prompts
            ]
        )
        rows.append({"k": k, "lower": bounds["lower"], "upper": bounds["upper"], "exact_minus_lower": exact - bounds["lower"],
                     "mean_target_tail_mass": float(tail.mean())})  # fmt: skip
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    positions = sum(len(r.output_ids) for r in recording.prompts)
    record = {
        "command": " ".join(["python benchmarks/topk_alpha.py", *sys.argv[1:]]),
        "target": os.path.abspath(args.target), "draft": os.path.abspath(args.draft),
        "conversations": os.path.abspath(args.conversations), "prompts": len(recording.prompts),
        "positions": positions, "temperature": args.temperature, "exact_alpha": exact, "rows": rows,
    }  # fmt: skip
    (out / "results.json").write_text(json.dumps(repo_relative(record), indent=1) + "\n")
    lines = [
        f"exact alpha (all logits) = {exact:.4f} over {positions} positions, {len(recording.prompts)} prompts",
        "",
        "| k | lower bound | upper bound | exact - lower | target mass outside top-k |",
        "|---|---|---|---|---|",
    ] + [
        f"| {r['k']} | {r['lower']:.4f} | {r['upper']:.4f} | {r['exact_minus_lower']:.4f} | {r['mean_target_tail_mass']:.4f} |"
        for r in rows
    ]
    (out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    raise SystemExit(run_main(main, "benchmarks.topk_alpha"))
