r"""Where a draft misses: answer tokens that could be copied from the context, and the rest.

    python -m osd.analysis.record --target osd/demo/models/target --conversations data/local/sql_eval.json \
        --output outputs/analysis/target_sql --max_new_tokens 32 --top_k 32
    python -m osd.analysis.copying --recording outputs/analysis/target_sql \
        --draft osd/demo/models/draft --out outputs/copying.json

For every token of the target's recorded answers: does the draft, teacher-forced on the prompt and
the answer before it, predict it (its argmax, the greedy proposal at that prefix)? And is the token
copyable: does the pair (previous token, token) occur earlier in the prompt or the answer, as prompt
lookup decoding would find it? Per group (a record id's text before its first "_": `sql_train_3` ->
`sql`), the share of copyable tokens, the draft's match rate on copyable tokens and on the others,
and how often the token that followed the previous token's last earlier occurrence is right where
the draft is wrong. A draft that matches less where it could copy lacks copying skill.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import torch
from transformers import PreTrainedModel

from osd.analysis.recording import PromptRecord, load_recording, tokenizer_identity
from osd.analysis.simulate import check_draft
from osd.models import load_model, load_tokenizer
from osd.paths import repo_relative
from osd.spec.draft_vocab import apply_draft_vocab
from osd.user_errors import run_main


def followers(ids: list[int], pos: int) -> list[int]:
    """The tokens that followed earlier occurrences of ids[pos - 1] within ids[:pos], in order."""
    prev = ids[pos - 1]
    return [ids[j + 1] for j in range(pos - 1) if ids[j] == prev]


@torch.inference_mode()
def draft_predictions(draft: PreTrainedModel, record: PromptRecord) -> list[int]:
    """The draft's argmax before each answer token, teacher-forced on prompt + answer: [N] ids."""
    ids = record.prompt_ids + record.output_ids
    logits = draft(torch.tensor([ids], device=draft.device)).logits[0]  # [T + N, V]
    start = len(record.prompt_ids) - 1
    return logits[start : start + len(record.output_ids)].argmax(-1).tolist()


def copy_counts(draft: PreTrainedModel, records: list[PromptRecord]) -> dict[str, dict[str, float]]:
    """Per group: tokens, copyable share, match rates where copyable and elsewhere, and prompt lookup's
    hit rate where the draft is wrong."""
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for record in records:
        c = counts[record.id.split("_")[0]]
        ids = record.prompt_ids + record.output_ids
        for i, (token, predicted) in enumerate(
            zip(record.output_ids, draft_predictions(draft, record), strict=True)
        ):
            earlier = followers(ids, len(record.prompt_ids) + i)
            kind = "copyable" if token in earlier else "other"
            c[kind] += 1
            c[f"{kind}_match"] += predicted == token
            if predicted != token:
                c["draft_wrong"] += 1
                c["lookup_right_where_draft_wrong"] += bool(earlier) and earlier[-1] == token
    table = {}
    for group, c in counts.items():
        n = c["copyable"] + c["other"]
        table[group] = {
            "tokens": n,
            "copyable_share": c["copyable"] / n,
            "match_where_copyable": c["copyable_match"] / c["copyable"] if c["copyable"] else float("nan"),
            "match_elsewhere": c["other_match"] / c["other"] if c["other"] else float("nan"),
            "match": (c["copyable_match"] + c["other_match"]) / n,
            "lookup_right_where_draft_wrong": (
                c["lookup_right_where_draft_wrong"] / c["draft_wrong"] if c["draft_wrong"] else float("nan")
            ),
        }
    return table


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recording", required=True, help="a recording's stem (`python -m osd.analysis.record`)")
    ap.add_argument("--draft", required=True, help="the draft: hub name or path")
    ap.add_argument("--out", default="outputs/copying.json")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    draft = apply_draft_vocab(load_model(args.draft, torch.float32)).eval()
    recording = load_recording(args.recording)
    check_draft(recording, draft, tokenizer_identity(load_tokenizer(args.draft)), args.recording)
    table = copy_counts(draft, recording.prompts)
    result = {
        "command": "python -m osd.analysis.copying " + " ".join(sys.argv[1:] if argv is None else argv),
        "groups": table,
    }
    for group, row in table.items():
        print(
            f"{group:10s} "
            + " ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items())
        )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(repo_relative(result), indent=1) + "\n")
    return result


if __name__ == "__main__":
    raise SystemExit(run_main(main, "osd.analysis.copying"))
