r"""Teacher-forced agreement of drafters with the target's greedy tokens, per step of a draft chain: where a head's
alpha goes, beside a draft model's.

For every output position of a recording (`osd.analysis.record --features`, the target's greedy outputs and the
states a head reads), each drafter predicts the token there from the committed tokens before it, and the share of
predictions equal to the target's token is reported per chain step s = 1..--steps:
- a draft model reads tokens only, so its prediction is the same at every step (teacher-forced next token);
- a head (`osd.spec.eagle3`) at step 1 reads the target's states up to the token before last and the last token;
  at step s it reads its own output state of step s - 1 in place of the target's (EAGLE-3's training-time test,
  `osd.online.head_loss.ttt_logits`), as its chain does after s - 1 accepted proposals.
Agreement at step 1 bounds how often a chain's first proposal is accepted; the drop over later steps is what the
head loses by drafting from its own states.

    python -m benchmarks.chain_agreement --drafters osd/demo/models/head osd/demo/models/draft \
        --recordings outputs/recordings/{sql,math,code,finance}_eval --steps 4 --out outputs/chain_agreement.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from osd.analysis.recording import Recording, load_recording
from osd.datafiles import write_output
from osd.online.head_loss import ttt_logits
from osd.paths import TARGET_PATH, repo_relative
from osd.results import command_line
from osd.spec.drafter import Drafter, load_drafter
from osd.spec.eagle3 import Eagle3Head
from osd.spec.timing import machine
from osd.user_errors import positive_int, run_main


@torch.no_grad()
def agreement(drafter: Drafter, embed: torch.nn.Module, recording: Recording, steps: int) -> list[float]:
    """Per chain step 1..steps, the share of the recording's output positions whose token the drafter predicts."""
    hits, counted = [0] * steps, [0] * steps
    for rec in recording.prompts:
        tokens = torch.tensor(rec.prompt_ids + rec.output_ids)  # [S]
        first = len(rec.prompt_ids)  # the first output position
        if isinstance(drafter, Eagle3Head):
            if rec.features is None:
                raise ValueError(f"prompt {rec.id}: no target states; record with --features to score a head")
            per_step = [drafter.token_ids[lg.argmax(-1)]  # [S - 1]: entry i predicts tokens[i + 2 + s]
                        for lg in ttt_logits(drafter, embed, tokens, rec.features.float(), steps)]  # fmt: skip
            offsets = [2 + s for s in range(steps)]
        else:
            logits = drafter(input_ids=tokens[None]).logits[
                0
            ]  # [S, V] (-inf outside V'): row j predicts j + 1
            per_step, offsets = [logits.argmax(-1)] * steps, [1] * steps
        for s in range(steps):
            positions = torch.arange(max(first, offsets[s]), len(tokens))  # the outputs step s can predict
            predicted = per_step[s][positions - offsets[s]]
            hits[s] += int((predicted == tokens[positions]).sum())
            counted[s] += len(positions)
    return [h / c if c else float("nan") for h, c in zip(hits, counted, strict=True)]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--drafters", nargs="+", required=True, help="head or draft model folders")
    parser.add_argument("--recordings", nargs="+", required=True, help="osd.analysis.record --features stems")
    parser.add_argument("--target", default=str(TARGET_PATH), help="the target the recordings were made with")
    parser.add_argument("--steps", type=positive_int, default=4, help="chain steps scored")
    parser.add_argument("--limit", type=positive_int, default=None, help="first N prompts of each recording")
    parser.add_argument("--threads", type=positive_int, default=1)
    parser.add_argument("--out", default=None, help="JSON file: the table and the command")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    embed = AutoModelForCausalLM.from_pretrained(args.target, dtype=torch.bfloat16).get_input_embeddings()
    recordings = {Path(r).name.removesuffix(".jsonl"): load_recording(r) for r in args.recordings}
    for recording in recordings.values():
        recording.prompts = recording.prompts[: args.limit]
    table = {}
    for path in args.drafters:
        drafter = load_drafter(path, torch.float32)
        table[path] = {name: agreement(drafter, embed, rec, args.steps) for name, rec in recordings.items()}
        for name, shares in table[path].items():
            print(
                f"{path} {name}: " + ", ".join(f"step {s + 1} {a:.3f}" for s, a in enumerate(shares)),
                flush=True,
            )
    result = {"command": command_line("benchmarks.chain_agreement", argv),
              "machine": machine(), "steps": args.steps, "limit": args.limit, "agreement": table}  # fmt: skip
    if args.out:
        write_output(
            args.out,
            json.dumps(repo_relative(result), indent=1) + "\n",
            "--out",
            "benchmarks.chain_agreement",
        )
    return result


if __name__ == "__main__":
    raise SystemExit(run_main(main, "benchmarks.chain_agreement"))
