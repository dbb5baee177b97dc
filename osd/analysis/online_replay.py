r"""Replay online distillation over a recorded stream in seconds: only the draft runs (greedy).

The target's greedy outputs and top-K log-probabilities over a query stream are recorded once
(`python -m osd.analysis.record --conversations STREAM --top_k 32`). Each query is then served by
greedy speculative decoding *simulated* against the recording (`osd.analysis.simulate`: exactly the
engine's acceptance), the positions where the draft was wrong go to a buffer with the target's top-K
there, and every --online_update_interval queries the draft takes --steps_per_update optimizer steps on the
buffer (soft cross-entropy against the stored top-K, `osd.distill.teacher_topk`; a sub-vocabulary head
renormalises on V'). --replay keeps the last R served queries in the buffer after an update, so an
update also revisits recent queries. Alpha per query is written as the online trainer logs it.

What differs from `python -m osd.train --mode online`: the target's distribution is its top-K (the
trainer reuses the full logits of verification). The draft trains in float32 and serves in
--draft_dtype (a copy, refreshed after each update, as in the demo); the offline ceiling serves in it
too, so its alpha compares with the online draft's. It is a tool for choosing a recipe fast; the
chosen one is then run for real.

    python -m osd.analysis.online_replay --recording outputs/recordings/stream --stream outputs/stream.json \
        --draft osd/demo/models/draft --max_propose_num 4 --learning_rate 3e-4 --online_update_interval 4 --out outputs/replay.json

With --drafter head the drafter is an EAGLE-3 head (--head_path, or a fresh one for --target): the recording must
keep the target's states (`record --features`); its target distribution is the top-K with the rest spread evenly.
--online_rejected_weight adds Aurora's term on the rejected proposals: run it with 0 and with a weight to measure
the two recipes on one recording. --offline_steps draws a head's offline ceiling as a draft's (its training-time test
on the group's earlier queries).

    python -m osd.analysis.online_replay --recording REC --stream STREAM --drafter head --head_path HEAD \
        --online_rejected_weight 0.5 --out outputs/replay_head_aurora.json
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from dataclasses import asdict, replace
from functools import partial
from pathlib import Path

import torch
from torch import nn
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from osd.alpha import format_alpha, pooled_alpha
from osd.analysis.recording import (
    PromptRecord,
    Recording,
    check_same_target,
    load_recording,
    paths,
    recorded_model,
    stream_groups,
    tokenizer_identity,
)
from osd.analysis.replay_server import (
    ReplayServer,
    recording_queries,
    replayed_feature_query,
    topk_loss,
    topk_query,
)
from osd.analysis.simulate import check_draft
from osd.datafiles import claim_output_dir, refuse_foreign_file, refuse_overwrite, write_output
from osd.distill.lm_training import BatchLoss, train_lm
from osd.distill.losses import forward_kl
from osd.distill.teacher_topk import topk_distillation
from osd.model_checks import load_pretrained
from osd.models import load_head_drafter
from osd.online.config import OnlineArguments, add_online_flags, online_arguments
from osd.online.head_loss import head_distillation_loss
from osd.online.loop import SHARED_DRAFT, OnlineLoop
from osd.online.records import OnlineState, tail_length
from osd.online.updater import DraftUpdater, adamw_step
from osd.paths import repo_relative
from osd.spec.draft_vocab import apply_draft_vocab
from osd.spec.drafter import Drafter, save_drafter
from osd.spec.eagle3 import Eagle3Head
from osd.spec.gamma import ALPHA_FIGURES, NEEDS_PROPOSALS, NO_POLICY, add_gamma_flag
from osd.user_errors import non_negative_float, non_negative_int, positive_int, run_main

# the replay's defaults: an update after every query on its wrong positions, the draft served in float32
PRESET = OnlineArguments(online_eval_interval=1, draft_serving_dtype="float32")
LEARNING_RATE = 3e-4


def replay(
    recording: Recording,
    draft: PreTrainedModel,
    draft_tokenizer: dict,
    gamma: int,
    online: OnlineArguments = PRESET,
    learning_rate: float = LEARNING_RATE,
    weight_decay: float = 0.0,
    learn: bool = True,
    embed: nn.Module | None = None,
) -> list[dict]:
    """Serve the recorded stream in order with `draft` (a copy in --draft_serving_dtype), distilled by the
    online loop (unless not `learn`): a draft model, or a head (`embed`: the target's input embedding; its loss
    `osd.online.head_loss`, with --online_rejected_weight). Returns per query: id, alpha_sum, counted positions,
    wrong positions."""
    if recording.header.get("top_k") is None:
        raise ValueError("online replay needs a recording with top-K (osd.analysis.record --top_k 32)")
    server = ReplayServer(
        recording, gamma, check_draft(recording, draft, draft_tokenizer, "--recording"), embed
    )
    loss = topk_loss
    if isinstance(draft, Eagle3Head):
        loss = partial(head_distillation_loss, embed=embed, divergence=forward_kl,
                       rejected_weight=online.online_rejected_weight)  # fmt: skip
    updater = DraftUpdater(
        {SHARED_DRAFT: draft}, loss, adamw_step(draft.parameters(), learning_rate, weight_decay), online,
        OnlineState(), learns=learn and online.online_update_interval > 0,
    )  # fmt: skip
    groups = ["all"] * len(recording.prompts)  # alpha per group is `summarize`'s
    state = OnlineLoop(server, updater, online).run(recording_queries(recording, groups))
    return [{"id": r.id, "alpha_sum": q.alpha_sum, "counted": q.num_proposed, "wrong": w}
            for r, q, w in zip(recording.prompts, state.queries, server.wrong, strict=True)]  # fmt: skip


def ceiling_training(
    records: list[PromptRecord], draft: Drafter, vocab: int, embed: nn.Module | None
) -> tuple[list, BatchLoss]:
    """(training items, their batch loss) for an offline ceiling on `records`, at every output position against
    the target's top-K: soft cross-entropy for a draft model, the head's distillation loss (its training-time
    test, `osd.online.head_loss`) for a head."""
    every = [list(range(len(r.output_ids))) for r in records]
    if not isinstance(draft, Eagle3Head):
        kept = [topk_query(r, at) for r, at in zip(records, every, strict=True)]
        examples = [q.example for q in kept]
        return examples, topk_distillation(examples, [q.target for q in kept])
    queries = [replayed_feature_query(r, at, [], vocab) for r, at in zip(records, every, strict=True)]
    head_loss = partial(head_distillation_loss, embed=embed, divergence=forward_kl)

    def loss(head: Eagle3Head, indices: list[int]) -> tuple[torch.Tensor, int]:
        batch = [queries[i] for i in indices]
        return head_loss(head, batch, torch.Tensor.backward), sum(len(q.positions) for q in batch)

    return queries, loss


def offline_ceiling(
    recording: Recording,
    draft: Drafter,
    draft_tokenizer: dict,
    gamma: int,
    groups: list[str],
    steps: int,
    more: tuple[Recording, list[str]] | None = None,
    batch_size: int = 8,
    learning_rate: float = 1e-3,
    seed: int = 0,
    serve_dtype: str = "float32",
    embed: nn.Module | None = None,
) -> dict[str, float]:
    """Per group, the alpha offline distillation reaches on the queries `summarize` reports (the group's
    last third of the stream), never trained on: a copy of `draft` (a draft model, or a head reading the target's
    recorded states, `embed` the target's input embedding) distilled on the group's earlier queries and, from
    `more` (a recording and its groups), more of the group's training queries (those whose ids are not in the
    stream: `more` may be a larger recording of the same file), at every output position against the target's
    top-K (`steps` AdamW steps, warmup then cosine), served in `serve_dtype`."""
    more_records, more_groups = more if more is not None else (Recording(recording.header, []), [])
    in_stream = {r.id for r in recording.prompts}  # `more` may overlap the stream: its tail must stay unseen
    vocab = check_draft(recording, draft, draft_tokenizer, "--recording")
    out = {}
    for group in dict.fromkeys(groups):
        records = [r for r, g in zip(recording.prompts, groups, strict=True) if g == group]
        held_out = tail_length(len(records))
        extra = [
            r
            for r, g in zip(more_records.prompts, more_groups, strict=True)
            if g == group and r.id not in in_stream
        ]
        student = copy.deepcopy(draft)
        items, loss = ceiling_training(records[:-held_out] + extra, student, vocab, embed)
        train_lm(student, items, steps, batch_size, learning_rate, max(1, steps // 10), seed, f"ceiling-{group}",
                 batch_loss=loss)  # fmt: skip
        tail = Recording(recording.header, records[-held_out:])
        static = replace(PRESET, online_update_interval=0, draft_serving_dtype=serve_dtype)
        served = replay(tail, student, draft_tokenizer, gamma, static, learn=False, embed=embed)
        out[group] = summarize(served, [group] * len(served), tail_fraction=1.0)[group]
    return out


def summarize(served: list[dict], groups: list[str], tail_fraction: float = 1 / 3) -> dict[str, float | None]:
    """Alpha per group over the last `tail_fraction` of each group's queries, and over all queries."""
    out = {}
    for group in dict.fromkeys(groups):
        mine = [s for s, g in zip(served, groups, strict=True) if g == group]
        tail = mine[len(mine) - tail_length(len(mine), tail_fraction) :]
        out[group] = pooled_alpha(sum(s["alpha_sum"] for s in tail), sum(s["counted"] for s in tail))
    out["all"] = pooled_alpha(sum(s["alpha_sum"] for s in served), sum(s["counted"] for s in served))
    return out


def load_drafter(
    draft: str | None, online: OnlineArguments, target: str
) -> tuple[Drafter, nn.Module | None, PreTrainedTokenizerBase]:
    """(the drafter in float32, the input embedding of `target` for a head, the tokenizer): the draft model at
    `draft`, or with --drafter head a head for `target` (--head_path, or a fresh one)."""
    if online.drafter == "model":
        model = apply_draft_vocab(load_pretrained(AutoModelForCausalLM, draft, dtype=torch.float32))
        return model, None, load_pretrained(AutoTokenizer, draft)
    target_model = load_pretrained(AutoModelForCausalLM, target, "name the head's target with --target")
    head = load_head_drafter(target_model, online.head_path)
    return head, target_model.get_input_embeddings(), load_pretrained(AutoTokenizer, target)


TOOL = "osd.analysis.online_replay"  # the writer named beside its outputs
COMMAND = f"python -m {TOOL}"  # how --out's "command" starts


def written_by_replay(path: Path) -> bool:
    """Whether the JSON file `path` is an --out of this tool (its "command" says so), marked or not."""
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(payload, dict) and str(payload.get("command", "")).startswith(f"{COMMAND} ")


def replay_inputs(args: argparse.Namespace, online: OnlineArguments) -> dict[str, str | Path | None]:
    """Every file or folder the replay reads, by flag: no output may replace one."""
    inputs = dict(zip(("--recording", "--recording (tensors)"), paths(args.recording), strict=True))
    if args.offline_more:
        more, conversations = args.offline_more
        inputs |= dict(zip(("--offline_more", "--offline_more (tensors)"), paths(more), strict=True))
        inputs["--offline_more (conversations)"] = conversations
    sources = {"--stream": args.stream, "--draft": args.draft, "--head_path": online.head_path}
    return inputs | sources | {"--target": args.target}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--recording", required=True, help="osd.analysis.record output with --top_k, over the stream"
    )
    parser.add_argument(
        "--stream", required=True, help="the recorded conversation file (its `dataset` fields group alpha)"
    )
    parser.add_argument("--draft", default=None, help="the draft model (--drafter model)")
    parser.add_argument(
        "--target", default=None,
        help="--drafter head: the target the head drafts for (its input embedding and tokenizer; a fresh head is "
        "built for it without --head_path); default: the recording's model",
    )  # fmt: skip
    add_gamma_flag(parser, ALPHA_FIGURES, plain_decoding=NEEDS_PROPOSALS, auto=NO_POLICY)
    add_online_flags(parser, PRESET)
    parser.add_argument("--learning_rate", type=non_negative_float, default=LEARNING_RATE)
    parser.add_argument("--weight_decay", type=non_negative_float, default=0.0)
    parser.add_argument(
        "--offline_steps", type=non_negative_int, default=0,
        help="also the offline ceiling: per group, the draft distilled for this many steps on the group's "
        "queries before its reported tail (and --offline_more's), then served on the tail",
    )  # fmt: skip
    parser.add_argument(
        "--offline_more", nargs=2, metavar=("RECORDING", "CONVERSATIONS"),
        help="more training queries for the offline ceiling: a recording with --top_k and its conversation file "
        "(records whose ids are in the stream are left out)",
    )  # fmt: skip
    parser.add_argument("--limit", type=positive_int, default=None, help="replay the first N queries only")
    parser.add_argument("--threads", type=positive_int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="JSON file: per-query alpha, the summary and the command")
    parser.add_argument(
        "--save_draft", default=None,
        help="folder: the online draft after the whole stream, in --draft_dtype with its tokenizer "
        "(for benchmarks.draft_alpha or bench_engine)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    online = online_arguments(args)
    if args.offline_more and not args.offline_steps:
        parser.error(
            "--offline_more adds training queries to the offline ceiling: pass --offline_steps N too"
        )
    if (online.drafter == "model") != (args.draft is not None):
        parser.error("--drafter model replays --draft; --drafter head, a head (--head_path, --target), "
                     "without --draft")  # fmt: skip
    inputs = replay_inputs(args, online)
    refuse_overwrite({f: p for f, p in (("--out", args.out), ("--save_draft", args.save_draft)) if p}, inputs)
    if args.out:
        refuse_foreign_file(args.out, "--out", TOOL, own=written_by_replay)
    if args.save_draft:
        claim_output_dir(args.save_draft, TOOL, (), inputs, flag="--save_draft")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    recording = load_recording(args.recording)
    recording.prompts = recording.prompts[: args.limit]
    groups = stream_groups(recording, args.recording, args.stream, "--stream")
    draft, embed, draft_tokenizer = load_drafter(args.draft, online, args.target or recorded_model(recording))
    tokenizer = tokenizer_identity(draft_tokenizer)
    standard_draft = copy.deepcopy(draft)  # untouched: serves the Standard run and starts the offline ceiling
    optimizer = {"learning_rate": args.learning_rate, "weight_decay": args.weight_decay}
    standard = replay(recording, standard_draft, tokenizer, args.gamma, online, learn=False, embed=embed)
    served = replay(recording, draft, tokenizer, args.gamma, online, **optimizer, embed=embed)
    if args.save_draft:
        save_drafter(draft.to(getattr(torch, online.draft_serving_dtype or "float32")), args.save_draft)
        draft_tokenizer.save_pretrained(args.save_draft)
    result = {
        "recipe": asdict(online) | optimizer,
        "standard": summarize(standard, groups),
        "online": summarize(served, groups),
    }
    if args.offline_steps:
        more = None
        if args.offline_more:
            more_recording = load_recording(args.offline_more[0])
            check_same_target(recording, args.recording, more_recording, args.offline_more[0])
            more = more_recording, stream_groups(more_recording, *args.offline_more, "--offline_more")
        result["offline"] = offline_ceiling(recording, standard_draft, tokenizer, args.gamma, groups,
                                            args.offline_steps, more, seed=args.seed,
                                            serve_dtype=online.draft_serving_dtype or "float32", embed=embed)  # fmt: skip
    for name in ("standard", "online", "offline"):
        if name not in result:
            continue
        print(f"{name:9s} " + "  ".join(f"{g} {format_alpha(a)}" for g, a in result[name].items()))
    if args.out:
        command = f"{COMMAND} " + " ".join(sys.argv[1:] if argv is None else argv)
        path = args.draft or online.head_path or "(a fresh head)"
        draft_path = str(Path(path).resolve()) if Path(path).exists() else path
        payload = {"command": command, "draft": draft_path, "gamma": args.gamma,
                   "max_new_tokens": recording.header["max_new_tokens"], **result,
                   "queries": {"standard": standard, "online": served}}  # fmt: skip
        text = json.dumps(repo_relative(payload), indent=1) + "\n"
        write_output(args.out, text, "--out", TOOL, own=written_by_replay)
    return result


if __name__ == "__main__":
    raise SystemExit(run_main(main, "osd.analysis.online_replay"))
