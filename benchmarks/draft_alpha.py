r"""Greedy acceptance rate of drafts against recorded target outputs, per domain (no target loaded).

Record the target once per prompt set (`python -m osd.analysis.record`), then replay any number of
drafts (`osd.analysis.simulate`, exactly the engine's greedy acceptance at --max_propose_num): alpha per
recording and, for recordings whose prompts carry a `dataset` field, per dataset. The reference prompt
sets are the workload's eval prompts per domain and the held-out prompts written apart from the
workload's templates (`data/general/heldout_prompts.json`: general chat and the four domains in other
words).

    python -m osd.analysis.record --target osd/demo/models/target --conversations data/local/sql_eval.json \
        --limit 16 --max_new_tokens 96 --output outputs/recordings/sql_eval      # one per domain, and heldout
    python -m benchmarks.draft_alpha --drafts osd/demo/models/draft --recordings outputs/recordings/*.jsonl \
        --max_propose_num 4 --out benchmarks/results/draft_alpha/v1.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from osd.alpha import format_alpha
from osd.analysis.recording import load_recording, tokenizer_identity
from osd.analysis.simulate import simulate, simulated_alpha
from osd.paths import repo_relative
from osd.results import command_line
from osd.spec.draft_vocab import apply_draft_vocab
from osd.spec.gamma import ALPHA_FIGURES, NEEDS_PROPOSALS, NO_POLICY, add_gamma_flag
from osd.user_errors import run_main


def draft_alpha(
    draft_path: str, recordings: list[str], gamma: int, limit: int | None
) -> dict[str, float | None]:
    """{recording stem or stem/dataset: pooled greedy alpha} for one draft."""
    draft = apply_draft_vocab(AutoModelForCausalLM.from_pretrained(draft_path, dtype=torch.bfloat16).eval())
    tokenizer = tokenizer_identity(AutoTokenizer.from_pretrained(draft_path))
    alphas: dict[str, float | None] = {}
    for path in recordings:
        recording = load_recording(path)
        if limit is not None:
            recording.prompts = recording.prompts[:limit]
        results = simulate(recording, draft, tokenizer, gamma, source=path)
        stem = Path(path).name.removesuffix(".jsonl")
        alphas[stem] = simulated_alpha(results)
        groups = {p.id: p.id.split("-")[1] for p in recording.prompts if p.id.startswith("heldout-")}
        for group in sorted(set(groups.values())):
            alphas[f"{stem}/{group}"] = simulated_alpha(r for r in results if groups.get(r.id) == group)
    return alphas


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--drafts", nargs="+", required=True, help="draft folders (each with its tokenizer)")
    parser.add_argument("--recordings", nargs="+", required=True, help="osd.analysis.record outputs (.jsonl)")
    add_gamma_flag(parser, ALPHA_FIGURES, plain_decoding=NEEDS_PROPOSALS, auto=NO_POLICY)
    parser.add_argument("--limit", type=int, default=None, help="first N prompts of each recording")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None, help="JSON file for the table and the command")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    table = {d: draft_alpha(d, args.recordings, args.gamma, args.limit) for d in args.drafts}
    columns = list(next(iter(table.values())))
    print("| draft | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for draft, row in table.items():
        print(f"| {draft} | " + " | ".join(format_alpha(row[c]) for c in columns) + " |")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        command = command_line("benchmarks.draft_alpha", argv)
        Path(args.out).write_text(
            json.dumps(repo_relative({"command": command, "alpha": table}), indent=1) + "\n"
        )


if __name__ == "__main__":
    raise SystemExit(run_main(main, "benchmarks.draft_alpha"))
