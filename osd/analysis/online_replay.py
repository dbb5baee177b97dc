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
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from osd.analysis.recording import PromptRecord, Recording, load_recording, paths, tokenizer_identity
from osd.analysis.simulate import Iteration, check_draft, replay_greedy
from osd.conversations import load_conversations
from osd.datafiles import refuse_overwrite
from osd.distill.config import DTYPES
from osd.distill.flags import add_update_interval_flag
from osd.distill.lm_training import IGNORE, Example, train_lm
from osd.distill.teacher_topk import TopK, topk_distillation
from osd.model_checks import load_pretrained
from osd.models import resolve_dtype
from osd.paths import repo_relative
from osd.spec.draft_vocab import apply_draft_vocab
from osd.spec.gamma import ALPHA_FIGURES, NEEDS_PROPOSALS, NO_POLICY, add_gamma_flag
from osd.user_errors import positive_int, run_main


@dataclass
class Recipe:
    """How the draft learns online."""

    learning_rate: float = 3e-4
    update_interval: int = 1  # queries between updates; 0: never (static)
    steps_per_update: int = 1  # optimizer steps at each update
    replay: int = 0  # served queries kept in the buffer after an update
    loss_positions: str = (
        "wrong"  # "wrong": where the target replaced a draft token; "all": every output token
    )
    weight_decay: float = 0.0


def wrong_positions(iterations: list[Iteration]) -> list[int]:
    """Output positions where the target replaced a rejected draft token (n < k): an iteration that
    ends with `matched_so_far` tokens put the target's own token at matched_so_far - 1."""
    return [it.matched_so_far - 1 for it in iterations if it.accepted < it.proposed]


def buffered(rec: PromptRecord, positions: list[int]) -> tuple[Example, TopK]:
    """The query as a training example with labels at `positions` of its output, and the target's top-K there."""
    ids = rec.prompt_ids + rec.output_ids
    labels = [IGNORE] * len(ids)
    for p in positions:
        labels[len(rec.prompt_ids) + p] = ids[len(rec.prompt_ids) + p]
    at = torch.tensor(positions, dtype=torch.long)
    logp = rec.topk_logits[at] - rec.logsumexp[at, None]  # [W, K]
    return (ids, labels), TopK(rec.topk_ids[at], logp.to(torch.float16))


def replay(
    recording: Recording,
    draft: PreTrainedModel,
    draft_tokenizer: dict,
    gamma: int,
    recipe: Recipe,
    learn: bool = True,
    serve_dtype: torch.dtype = torch.float32,
) -> list[dict]:
    """Serve the recorded stream in order with `draft` (a copy in `serve_dtype`), updating it per
    `recipe` (unless not `learn`). Returns per query: alpha_sum, counted positions, wrong positions."""
    if recording.header.get("top_k") is None:
        raise ValueError("online replay needs a recording with top-K (osd.analysis.record --top_k 32)")
    vocab = check_draft(recording, draft, draft_tokenizer, "--recording")
    eos = set() if recording.header["eos_token_id"] is None else {recording.header["eos_token_id"]}
    opt = torch.optim.AdamW(draft.parameters(), lr=recipe.learning_rate, weight_decay=recipe.weight_decay)
    buffer: list[tuple[Example, TopK]] = []
    served: list[dict] = []
    serving = serving_copy(draft, serve_dtype)
    for n, rec in enumerate(recording.prompts, start=1):
        sim = replay_greedy(serving, rec, gamma, len(rec.output_ids), eos, vocab)
        wrong = wrong_positions(sim.iterations)
        counted = sum(it.counted for it in sim.iterations)
        served.append({"id": rec.id, "alpha_sum": sum(it.alpha_sum for it in sim.iterations), "counted": counted,
                       "wrong": len(wrong)})  # fmt: skip
        if not learn or recipe.update_interval == 0:  # 0: static, the draft as it is
            continue
        positions = wrong if recipe.loss_positions == "wrong" else list(range(len(rec.output_ids)))
        buffer.append(buffered(rec, positions) if positions else None)
        if n % recipe.update_interval == 0:
            _update(draft, opt, [b for b in buffer if b is not None], recipe.steps_per_update)
            buffer = buffer[len(buffer) - recipe.replay :] if recipe.replay else []
            serving = serving_copy(draft, serve_dtype)
    return served


def serving_copy(draft: PreTrainedModel, dtype: torch.dtype) -> PreTrainedModel:
    """The model that serves: `draft` itself in eval mode when it already has `dtype`, else a copy in it."""
    draft.eval()
    return draft if draft.dtype == dtype else copy.deepcopy(draft).to(dtype)


def _update(draft: PreTrainedModel, opt: torch.optim.Optimizer, buffer: list, steps: int) -> None:
    if not buffer:
        return
    examples, targets = [e for e, _ in buffer], [t for _, t in buffer]
    loss_of = topk_distillation(examples, targets)
    draft.train()
    for _ in range(steps):
        loss, _ = loss_of(draft, list(range(len(examples))))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    draft.eval()


def offline_ceiling(
    recording: Recording,
    draft: PreTrainedModel,
    draft_tokenizer: dict,
    gamma: int,
    groups: list[str],
    steps: int,
    more: tuple[Recording, list[str]] | None = None,
    batch_size: int = 8,
    learning_rate: float = 1e-3,
    seed: int = 0,
    serve_dtype: torch.dtype = torch.float32,
) -> dict[str, float]:
    """Per group, the alpha offline distillation reaches on the queries `summarize` reports (the group's
    last third of the stream), never trained on: a copy of `draft` distilled on the group's earlier
    queries and, from `more` (a recording and its groups), more of the group's training queries (those
    whose ids are not in the stream: `more` may be a larger recording of the same file), at every
    output position against the target's top-K (`steps` AdamW steps, warmup then cosine), served in
    `serve_dtype`."""
    more_records, more_groups = more if more is not None else (Recording(recording.header, []), [])
    in_stream = {r.id for r in recording.prompts}  # `more` may overlap the stream: its tail must stay unseen
    out = {}
    for group in dict.fromkeys(groups):
        records = [r for r, g in zip(recording.prompts, groups, strict=True) if g == group]
        held_out = tail_length(len(records))
        extra = [
            r
            for r, g in zip(more_records.prompts, more_groups, strict=True)
            if g == group and r.id not in in_stream
        ]
        pairs = [buffered(r, list(range(len(r.output_ids)))) for r in records[:-held_out] + extra]
        student = copy.deepcopy(draft)
        examples = [e for e, _ in pairs]
        loss = topk_distillation(examples, [t for _, t in pairs])
        train_lm(student, examples, steps, batch_size, learning_rate, max(1, steps // 10), seed, f"ceiling-{group}",
                 batch_loss=loss)  # fmt: skip
        tail = Recording(recording.header, records[-held_out:])
        served = replay(tail, student, draft_tokenizer, gamma, Recipe(), learn=False, serve_dtype=serve_dtype)
        out[group] = summarize(served, [group] * len(served), tail_fraction=1.0)[group]
    return out


def tail_length(n: int, tail_fraction: float = 1 / 3) -> int:
    """How many of a group's n queries make its reported tail."""
    return max(1, round(n * tail_fraction))


def summarize(served: list[dict], groups: list[str], tail_fraction: float = 1 / 3) -> dict[str, float]:
    """Alpha per group over the last `tail_fraction` of each group's queries, and over all queries."""
    out = {}
    for group in dict.fromkeys(groups):
        mine = [s for s, g in zip(served, groups, strict=True) if g == group]
        tail = mine[len(mine) - tail_length(len(mine), tail_fraction) :]
        out[group] = sum(s["alpha_sum"] for s in tail) / max(1, sum(s["counted"] for s in tail))
    out["all"] = sum(s["alpha_sum"] for s in served) / max(1, sum(s["counted"] for s in served))
    return out


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
    parser.add_argument("--draft", required=True)
    add_gamma_flag(parser, ALPHA_FIGURES, plain_decoding=NEEDS_PROPOSALS, auto=NO_POLICY)
    for name, value in asdict(Recipe()).items():
        if name == "update_interval":  # osd.train's name for it, as in every driver
            add_update_interval_flag(parser, value)
        else:
            parser.add_argument(f"--{name}", type=type(value), default=value)
    parser.add_argument(
        "--offline_steps", type=int, default=0,
        help="also the offline ceiling: per group, the draft distilled for this many steps on the group's "
        "queries before its reported tail (and --offline_more's), then served on the tail",
    )  # fmt: skip
    parser.add_argument(
        "--offline_more", nargs=2, metavar=("RECORDING", "CONVERSATIONS"),
        help="more training queries for the offline ceiling: a recording with --top_k and its conversation file "
        "(records whose ids are in the stream are left out)",
    )  # fmt: skip
    parser.add_argument(
        "--draft_dtype", default="float32", choices=DTYPES[1:],
        help="the dtype the draft serves in, online and offline (it trains in float32); the demo serves bfloat16",
    )  # fmt: skip
    parser.add_argument("--limit", type=positive_int, default=None, help="replay the first N queries only")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="JSON file: per-query alpha, the summary and the command")
    parser.add_argument(
        "--save_draft", default=None,
        help="folder: the online draft after the whole stream, in --draft_dtype with its tokenizer "
        "(for benchmarks.draft_alpha or bench_engine)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    outputs = {flag: path for flag, path in (("--out", args.out), ("--save_draft", args.save_draft)) if path}
    if outputs:
        inputs = dict(zip(("--recording", "--recording (tensors)"), paths(args.recording), strict=True))
        refuse_overwrite(outputs, inputs | {"--stream": args.stream, "--draft": args.draft})
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    recipe = Recipe(**{k: getattr(args, k) for k in asdict(Recipe())})
    recording = load_recording(args.recording)
    recording.prompts = recording.prompts[: args.limit]
    groups = [r.get("dataset", "all") for r in load_conversations(args.stream)][: len(recording.prompts)]
    draft_tokenizer = load_pretrained(AutoTokenizer, args.draft)
    tokenizer = tokenizer_identity(draft_tokenizer)
    draft = apply_draft_vocab(load_pretrained(AutoModelForCausalLM, args.draft, dtype=torch.float32))
    standard_draft = copy.deepcopy(draft)  # untouched: serves the Standard run and starts the offline ceiling
    serve_dtype = resolve_dtype(args.draft_dtype)
    standard = replay(
        recording, standard_draft, tokenizer, args.gamma, recipe, learn=False, serve_dtype=serve_dtype
    )
    online = replay(recording, draft, tokenizer, args.gamma, recipe, serve_dtype=serve_dtype)
    if args.save_draft:
        serving_copy(draft, serve_dtype).save_pretrained(args.save_draft)
        draft_tokenizer.save_pretrained(args.save_draft)
    result = {
        "recipe": asdict(recipe),
        "standard": summarize(standard, groups),
        "online": summarize(online, groups),
    }
    if args.offline_steps:
        more = None
        if args.offline_more:
            more_recording = load_recording(args.offline_more[0])
            more_groups = [r.get("dataset", "all") for r in load_conversations(args.offline_more[1])]
            more = more_recording, more_groups[: len(more_recording.prompts)]
        result["offline"] = offline_ceiling(recording, standard_draft, tokenizer, args.gamma, groups,
                                            args.offline_steps, more, seed=args.seed, serve_dtype=serve_dtype)  # fmt: skip
    for name in ("standard", "online", "offline"):
        if name not in result:
            continue
        print(f"{name:9s} " + "  ".join(f"{g} {a:.3f}" for g, a in result[name].items()))
    if args.out:
        command = "python -m osd.analysis.online_replay " + " ".join(sys.argv[1:] if argv is None else argv)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        draft_path = str(Path(args.draft).resolve()) if Path(args.draft).exists() else args.draft
        payload = {"command": command, "draft": draft_path, "gamma": args.gamma,
                   "max_new_tokens": recording.header["max_new_tokens"], **result,
                   "queries": {"standard": standard, "online": online}}  # fmt: skip
        Path(args.out).write_text(json.dumps(repo_relative(payload), indent=1) + "\n")
    return result


if __name__ == "__main__":
    raise SystemExit(run_main(main, "osd.analysis.online_replay"))
