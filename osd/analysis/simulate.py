r"""Replay speculative decoding of a recorded target with a draft, without loading the target.

    python -m osd.analysis.simulate --recording outputs/analysis/tiny_sql \
        --draft osd/demo/models/tiny/draft --max_propose_num 4 --output outputs/analysis/tiny_sql_draft
    python -m osd.analysis.simulate --recording outputs/analysis/tiny_sql_features --head_path HEAD \
        --tokenizer osd/demo/models/tiny/teacher --max_propose_num 4 --output outputs/analysis/tiny_sql_head

An EAGLE-3 head (`--head_path`, `osd.spec.eagle3`) drafts from a recording made with `record --features`: it reads the
recorded target states of each position once the position is committed, as the engine hands it the states its
verification computed, and proposes nothing before the first (the prompt's prefill); of the target it needs only the
input embedding (`--target`, default the recording's model). Its acceptance is greedy only (no top-k bounds: a
head's q depends on its place in the draft chain).

Greedy acceptance is decided exactly as `SpeculativeDecoder.generate` decides it at temperature 0:
each iteration the draft proposes k = min(gamma, remaining - 1) tokens after the committed prefix
(cut after a drafted EOS), they are accepted while they equal the target's recorded greedy token,
then the target's own token is committed. Greedy speculative decoding emits the target's greedy
output, so the recording knows every token verification would produce. Alpha counts the accepted
positions and the first rejected one, as the engine does. (The live target scores a verification
chunk in one forward, the recording one token at a time: on a near-tie of two logits the argmax can
differ in the last bit, as it can between any two batch shapes.)

From a recording with top-k (`record --top_k K`), the sampling acceptance rate
alpha = mean over the target's output positions of sum_x min(p(x), q(x)) (p target, q draft, both
at the recording's temperature) is estimated. Only p's K largest entries are known (exactly: the
recording keeps the full softmax normaliser), so the sum over them is a LOWER bound; the missing
tail adds at most min(1 - sum_topK p, 1 - sum_topK q), which gives the UPPER bound reported beside
it. Measured on the SmolLM2 demo pair (`benchmarks/results/topk_alpha/v2/`, draft v3, exact alpha 0.306): the
lower bound falls short by 0.010 at K=100, 0.018 at K=20, 0.040 at K=5 and 0.112 at K=1.

Writes `{output}.jsonl` (one line per iteration), `{output}.txt` (DSD's format: the tokens
matched so far in the prompt after each iteration, accepted + the target's own token, one
`tensor([m], dtype=torch.int32)` line each) and `{output}.summary.json` (per prompt and dataset).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from osd.alpha import pooled_alpha
from osd.analysis.analyze import format_report, summarize
from osd.analysis.recording import (
    PromptRecord,
    Recording,
    RecordingError,
    check_token_ids,
    identity_difference,
    load_recording,
    paths,
    recorded_model,
    tokenizer_identity,
)
from osd.datafiles import refuse_foreign_file, refuse_overwrite, write_output
from osd.model_checks import load_pretrained
from osd.models import SERVING_DTYPES
from osd.paths import repo_relative
from osd.spec.cached_model import CachedModel
from osd.spec.decoder import MAX_VOCAB_PADDING, context_limit
from osd.spec.draft_vocab import apply_draft_vocab
from osd.spec.drafter import DraftCache, Drafter
from osd.spec.eagle3 import Eagle3Head, load_head
from osd.spec.gamma import DEFAULT as GAMMA_DEFAULT
from osd.spec.gamma import NEEDS_PROPOSALS, NO_POLICY, add_gamma_flag, parse_gamma
from osd.spec.head_cache import HeadSequence
from osd.spec.sampling import greedy
from osd.user_errors import positive_int, run_main


@dataclass
class Iteration:
    proposed: int  # k draft tokens verified
    accepted: int  # n of them accepted
    counted: int  # positions alpha counts: min(n + 1, k)
    alpha_sum: float  # accepted positions among the counted ones (greedy: point masses)
    matched_so_far: int  # tokens committed in this prompt after the iteration (DSD's number)
    rejected: int | None = None  # the proposal the target rejected (n < k), else None


@dataclass
class PromptSimulation:
    id: str
    iterations: list[Iteration]
    generated_ids: list[int]
    alpha_topk: tuple[float, float] | None = None  # (lower, upper) bounds, mean over positions
    num_positions: int = 0  # positions the top-k alpha averages over

    @property
    def accepted_lengths(self) -> list[int]:
        return [it.accepted for it in self.iterations]

    @property
    def alpha(self) -> float | None:
        return simulated_alpha([self])


def simulated_alpha(results: Iterable[PromptSimulation]) -> float | None:
    """Alpha pooled over every counted position of the prompts, as the engine pools a stream
    (`osd.alpha.pooled_alpha`: None when nothing was proposed)."""
    iterations = [it for r in results for it in r.iterations]
    return pooled_alpha(sum(it.alpha_sum for it in iterations), sum(it.counted for it in iterations))


def check_draft(recording: Recording, draft: Drafter, draft_tokenizer: dict, source: str) -> int:
    """Raise unless the draft shares the recording's tokenizer (and a head finds the states it reads); returns the
    shared vocabulary size."""
    difference = identity_difference(recording.header["tokenizer"], draft_tokenizer)
    if difference:
        raise RecordingError(
            f"recording {source} was made with tokenizer {recording.header['tokenizer']['name']}, the draft's "
            f"{draft_tokenizer['name']} differs ({difference}); use a draft with the target's tokenizer or re-record"
        )
    head = isinstance(draft, Eagle3Head)
    rows = draft.config.vocab_size if head else draft.get_output_embeddings().weight.shape[0]
    if head and recording.header.get("feature_layers") != list(draft.target_layers):
        raise RecordingError(
            f"recording {source} keeps the target's states at layers {recording.header.get('feature_layers')}, the "
            f"head reads {list(draft.target_layers)}: record with `osd.analysis.record --features` for this head"
        )
    if abs(rows - recording.header["vocab_rows"]) > MAX_VOCAB_PADDING:
        raise RecordingError(
            f"the draft's vocabulary has {rows} rows, the target recorded in {source} "
            f"{recording.header['vocab_rows']}: use a draft with the target's vocabulary"
        )
    return min(rows, recording.header["vocab_rows"])


@torch.inference_mode()
def replay_greedy(
    draft: Drafter,
    rec: PromptRecord,
    gamma: int,
    budget: int,
    eos: set[int],
    vocab: int,
    embed: nn.Module | None = None,
) -> PromptSimulation:
    """One prompt's greedy speculative decoding against its recorded target output; a head (`embed`: the target's
    input embedding) reads the recorded target states (module docstring)."""
    truth = rec.output_ids + [-1] * (gamma + 1)  # past the recorded EOS: never matched, never kept
    head = isinstance(draft, Eagle3Head)
    state = HeadSequence(draft, embed) if head else CachedModel(draft, None)
    tokens, iterations = list(rec.prompt_ids), []
    generated = read = 0  # read: positions whose target states the head has (all committed ones but the last)
    while generated < budget:
        # a head drafts from the target's states: none before the prompt's prefill (the first iteration)
        k = 0 if head and not iterations else min(gamma, budget - generated - 1)
        proposed = propose(state, tokens, k, vocab)
        k = next((i + 1 for i, t in enumerate(proposed) if t in eos), k)
        matches = [a == b for a, b in zip(proposed[:k], truth[generated : generated + k], strict=True)]
        n = next((i for i, m in enumerate(matches) if not m), k)
        counted = min(n + 1, k)
        emitted = truth[generated : generated + n + 1]
        state.crop(min(len(tokens) + n, len(state)))
        tokens += emitted
        if head:  # the states the verification computed at the tokens it committed
            state.add_features(rec.features[None, read : len(tokens) - 1].to(draft.device))
            read = len(tokens) - 1
        generated += n + 1
        rejected = proposed[n] if n < k else None
        iterations.append(Iteration(k, n, counted, float(sum(matches[:counted])), generated, rejected))
        if eos.intersection(emitted):
            break
    out = tokens[len(rec.prompt_ids) :]
    cut = next((i + 1 for i, t in enumerate(out) if t in eos), len(out))
    return PromptSimulation(rec.id, iterations, out[:cut])


def propose(state: DraftCache, tokens: list[int], k: int, vocab: int) -> list[int]:
    """The draft's k greedy tokens after `tokens` (its cache holds a prefix of them)."""
    feed = torch.tensor([tokens[len(state) :]], device=state.device)  # [1, tokens the draft has not seen]
    proposed = []
    for _ in range(k):
        token = greedy(state.forward(feed, num_logits=1)[:, :vocab])  # [1]
        proposed.append(int(token))
        feed = token.view(1, 1)
    return proposed


@torch.inference_mode()
def alpha_topk(draft: PreTrainedModel, rec: PromptRecord, temperature: float, vocab: int) -> torch.Tensor:
    """[N, 2] lower and upper bounds of sum_x min(p, q) at each recorded output position."""
    n = len(rec.output_ids)
    ids = torch.tensor([rec.prompt_ids + rec.output_ids[:-1]], device=draft.device)  # [1, T + N - 1]
    q = torch.softmax(draft(ids).logits[0, -n:, :vocab].float().cpu() / temperature, -1)  # [N, V]
    p_top = torch.exp(rec.topk_logits / temperature - rec.logsumexp[:, None])  # [N, K]
    inside = rec.topk_ids < vocab  # [N, K]
    q_top = q.gather(1, rec.topk_ids.long().clamp(max=vocab - 1)) * inside  # [N, K]
    lower = torch.minimum(p_top, q_top).sum(-1)  # [N]
    tail = torch.minimum(1 - p_top.sum(-1), 1 - q_top.sum(-1)).clamp(min=0)  # [N]
    return torch.stack([lower, (lower + tail).clamp(max=1)], -1)


def simulate(
    recording: Recording,
    draft: PreTrainedModel,
    draft_tokenizer: dict,
    gamma: int = GAMMA_DEFAULT,
    max_new_tokens: int | None = None,
    source: str = "(in memory)",
    embed: nn.Module | None = None,
) -> list[PromptSimulation]:
    """Replay every prompt of `recording` with `draft` (greedy; top-k alpha where recorded, for a draft model), a
    draft model or a head (`embed`: the target's input embedding, which a head reads)."""
    gamma = parse_gamma(gamma, plain_decoding=NEEDS_PROPOSALS, auto=NO_POLICY)
    vocab = check_draft(recording, draft, draft_tokenizer, source)
    if isinstance(draft, Eagle3Head) and embed is None:
        raise ValueError("a head reads the target's input embedding: pass embed (`target_embedding`)")
    header = recording.header
    max_new = header["max_new_tokens"] if max_new_tokens is None else max_new_tokens
    limits = [x for x in (context_limit(draft.config), header["context_limit"]) if x is not None]
    eos = set() if header["eos_token_id"] is None else {header["eos_token_id"]}
    results = []
    for rec in recording.prompts:
        budget = min([max_new] + [x - len(rec.prompt_ids) for x in limits])
        if rec.ended == "budget" and budget > len(rec.output_ids):
            raise RecordingError(
                f"recording {source}, prompt {rec.id}: {len(rec.output_ids)} target tokens recorded, {budget} "
                f"needed; lower --max_new_tokens to {len(rec.output_ids)} or record with a larger one"
            )
        result = replay_greedy(draft, rec, gamma, budget, eos, vocab, embed)
        if rec.topk_ids is not None and not isinstance(draft, Eagle3Head):
            bounds = alpha_topk(draft, rec, header["temperature"], vocab)  # [N, 2]
            result.alpha_topk, result.num_positions = tuple(bounds.mean(0).tolist()), len(bounds)
        results.append(result)
    return results


TOOL = "osd.analysis.simulate"  # the writer named beside its outputs
OUTPUT_FLAGS = ("--output", "--output (text)", "--output (summary)")


def output_files(stem: str | Path) -> tuple[Path, Path, Path]:
    """(`{stem}.jsonl`, `{stem}.txt`, `{stem}.summary.json`)."""
    stem = Path(stem)
    return tuple(stem.with_name(stem.name + s) for s in (".jsonl", ".txt", ".summary.json"))


def refuse_foreign_outputs(stem: str | Path) -> None:
    """Raise unless every file `write_outputs` writes at `stem` is new or an earlier simulation's."""
    for flag, path in zip(OUTPUT_FLAGS, output_files(stem), strict=True):
        refuse_foreign_file(path, flag, TOOL)


def write_outputs(results: Sequence[PromptSimulation], stem: str | Path, meta: dict) -> list[Path]:
    """`{stem}.jsonl` per iteration, `{stem}.txt` in DSD's format, `{stem}.summary.json`; each written
    whole, over nothing but an earlier simulation's (`write_output`)."""
    refuse_foreign_outputs(stem)
    rows = [
        {"prompt": p, "id": r.id, "iteration": t, **asdict(it)}
        for p, r in enumerate(results)
        for t, it in enumerate(r.iterations)
    ]
    report = summarize(rows) | {"alpha_topk": topk_summary(results)}
    texts = (
        "".join(json.dumps(row) + "\n" for row in rows),
        "".join(f"tensor([{row['matched_so_far']}], dtype=torch.int32)\n" for row in rows),
        json.dumps(repo_relative(meta | report), indent=1) + "\n",
    )
    return [
        write_output(path, text, flag, TOOL)
        for flag, path, text in zip(OUTPUT_FLAGS, output_files(stem), texts, strict=True)
    ]


def topk_summary(results: Sequence[PromptSimulation]) -> dict | None:
    """Position-weighted top-k alpha bounds over the dataset and per prompt (None without top-k)."""
    with_topk = [r for r in results if r.alpha_topk is not None]
    if not with_topk:
        return None
    total = sum(r.num_positions for r in with_topk)
    lower, upper = (sum(r.alpha_topk[i] * r.num_positions for r in with_topk) / total for i in (0, 1))
    return {"lower": lower, "upper": upper, "per_prompt": {r.id: list(r.alpha_topk) for r in with_topk}}


def load_drafter(args: argparse.Namespace, recording: Recording) -> tuple[Drafter, nn.Module | None, dict]:
    """--draft's model, or --head_path's head and the target's input embedding it reads; and the tokenizer's identity."""
    path = args.draft or args.head_path
    tokenizer = load_pretrained(
        AutoTokenizer, args.tokenizer or path, "name the target's tokenizer with --tokenizer"
    )
    if args.draft:
        draft = apply_draft_vocab(load_pretrained(AutoModelForCausalLM, args.draft, dtype=args.dtype).eval())
        check_token_ids(recording, draft.get_input_embeddings().num_embeddings, f"draft {args.draft}")
        return draft, None, tokenizer_identity(tokenizer)
    head = load_head(args.head_path)
    head = head if args.dtype == "auto" else head.to(getattr(torch, args.dtype))
    check_token_ids(recording, head.config.vocab_size, f"head {args.head_path}")
    return head, target_embedding(args.target or recorded_model(recording)), tokenizer_identity(tokenizer)


def target_embedding(path: str | Path) -> nn.Module:
    """The input embedding of the target at `path`, which a head reads (the rest of the target is dropped)."""
    return load_pretrained(
        AutoModelForCausalLM, path, "name the head's target with --target"
    ).get_input_embeddings()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--recording", required=True, help="recording stem (or its .jsonl) from osd.analysis.record"
    )
    drafter = parser.add_mutually_exclusive_group(required=True)
    drafter.add_argument("--draft", help="draft model folder or hub id")
    drafter.add_argument(
        "--head_path", help="EAGLE-3 head folder (osd.spec.eagle3.save_head); needs record --features"
    )
    parser.add_argument("--tokenizer", default=None, help="the draft's tokenizer when its folder has none")
    parser.add_argument(
        "--target",
        default=None,
        help="--head_path: the target whose input embedding it reads (default: the recording's)",
    )
    add_gamma_flag(parser, GAMMA_DEFAULT, plain_decoding=NEEDS_PROPOSALS, auto=NO_POLICY)
    parser.add_argument("--max_new_tokens", type=positive_int, default=None, help="default: the recording's")
    parser.add_argument(
        "--output", required=True, help="stem: writes STEM.jsonl, STEM.txt, STEM.summary.json"
    )
    parser.add_argument(
        "--dtype",
        default="auto",
        choices=("auto", *SERVING_DTYPES),
        help="the draft's weights (auto: the folder's)",
    )
    args = parser.parse_args(argv)
    refuse_overwrite(
        dict(zip(OUTPUT_FLAGS, output_files(args.output), strict=True)),
        dict(zip(("--recording", "--recording (tensors)"), paths(args.recording), strict=True))
        | {
            "--draft": args.draft,
            "--head_path": args.head_path,
            "--tokenizer": args.tokenizer,
            "--target": args.target,
        },
    )
    refuse_foreign_outputs(args.output)
    recording = load_recording(args.recording)
    draft, embed, tokenizer = load_drafter(args, recording)
    results = simulate(recording, draft, tokenizer, args.gamma, args.max_new_tokens, args.recording, embed)
    meta = {"command": "python -m osd.analysis.simulate " + " ".join(sys.argv[1:] if argv is None else argv)}
    meta |= {
        "recording": os.path.abspath(args.recording),
        "draft": os.path.abspath(args.draft or args.head_path),
    }
    written = write_outputs(results, args.output, meta)
    print(format_report(summarize(json.loads(line) for line in written[0].read_text().splitlines())))
    if (topk := topk_summary(results)) is not None:
        k, t = recording.header["top_k"], recording.header.get("temperature", 1.0)
        bounds = f"[{topk['lower']:.4f}, {topk['upper']:.4f}]"
        print(f"alpha when sampling at temperature {t} (not greedy), bounded from the top-{k}: in {bounds}")
    print("wrote", ", ".join(map(str, written)))


if __name__ == "__main__":
    raise SystemExit(run_main(main, "osd.analysis.simulate"))
