"""The online buffer: what the update keeps of each served query, and the loss it takes on it (a draft model's
here; a head's, and the `FeatureQuery` it keeps, in `osd.online.head_loss`).

Symbols: T prompt length, N generated tokens, W loss positions of a query, V vocabulary.

Positions. For a decoder-only model the served sequence is S = prompt (T) + generated (N).
Generated token i sits at S[T + i] and is predicted by the logits at position T + i - 1; the
engine's `target_logits[i]` are those logits. The student's row for token i is therefore its
logits at T + i - 1 (the reference code read position T + i, one off). For an encoder-decoder
model the decoder input is [start] + generated[:-1] and row i predicts generated[i].

Memory. Each buffered query keeps, on the CPU, its token ids and the target's logits at its W loss
positions only, in float16 (clamped to +-6e4 so nothing overflows): 2*V bytes per loss position.
`Buffers` holds at most --online_update_interval + --online_replay_queries queries per draft. The
student's logits are recomputed at the update (they change between updates). A head's query also keeps the
target's states at every position, [T + N - 1, K H] in the target's dtype (K H = 3 * 576 for the demo target:
3.5 KB a token in bfloat16).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Protocol

import torch
from transformers import PreTrainedModel

from osd.distill.losses import Divergence
from osd.online.head_loss import FeatureQuery, chain_steps
from osd.spec import SpecOutput
from osd.spec.cached_model import accepts_logits_to_keep, layer_inputs
from osd.spec.draft_vocab import compact_logits

FLOAT16_MAX = 6.0e4


@dataclass
class BufferedQuery:
    """One served query as the update needs it (all tensors on the CPU)."""

    input_ids: torch.Tensor  # [T] prompt (decoder-only) or encoder input (encoder-decoder)
    generated_ids: torch.Tensor  # [N]
    positions: torch.Tensor  # [W] indices into generated_ids where the loss counts
    target_logits: torch.Tensor  # [W, V] the target's logits that produced generated_ids[positions]
    replayed: bool = False  # kept from an earlier update (--online_replay_queries)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in asdict(self).values() if isinstance(t, torch.Tensor))


def buffer_query(
    input_ids: torch.Tensor, out: SpecOutput, loss_positions: str, dtype: torch.dtype = torch.float16
) -> BufferedQuery:
    """Keep what the update needs from one served query; input_ids [1, T], out from the engine."""
    positions = generated_positions(out, loss_positions)
    rows = out.target_logits[positions.to(out.target_logits.device)]  # [W, V]
    return BufferedQuery(
        input_ids=input_ids[0].cpu(),
        generated_ids=out.generated_ids[0].cpu(),
        positions=positions,
        target_logits=stored_logits(rows, dtype),
    )


def feature_query(
    input_ids: torch.Tensor, out: SpecOutput, loss_positions: str, dtype: torch.dtype = torch.float16
) -> FeatureQuery:
    """Keep what a head's update needs from one served query (`osd.online.head_loss`); input_ids [1, T], out from
    the engine with a head drafting. Positions below 2 are dropped: no head entry predicts them."""
    if out.target_features is None:
        raise ValueError(
            "a head's online buffer needs the target's states: serve with the head as the drafter and "
            "generate(..., return_target_logits=True)"
        )
    generated = generated_positions(out, loss_positions)  # [W]
    T = input_ids.shape[1]
    generated = generated[T + generated >= 2]
    steps = chain_steps(out.accepted_lengths, out.wrong_positions)
    rejected = [[T + p, s, x] for p, s, x in zip(out.wrong_positions, steps, out.rejected_ids, strict=True)]
    return FeatureQuery(
        tokens=torch.cat([input_ids[0].cpu(), out.generated_ids[0].cpu()]),
        # a copy: not the engine's inference-mode tensor, which the head's fc cannot save for backward
        features=out.target_features.to("cpu", copy=True),
        positions=T + generated,
        target_logits=stored_logits(out.target_logits[generated.to(out.target_logits.device)], dtype),
        rejected=torch.tensor(rejected, dtype=torch.long).view(-1, 3),
    )


@torch.no_grad()
def teacher_forced_feature_query(
    target: PreTrainedModel,
    layers: Sequence[int],
    prompt_ids: list[int],
    generated_ids: list[int],
    positions: list[int],
    dtype: torch.dtype = torch.float16,
) -> FeatureQuery:
    """What a head's update needs from a query served where the server keeps neither the target's states nor its
    logits (osd.serving): one teacher-forced forward of `target` gives both, the states at the head's `layers` and
    the logits at `positions` (indices into generated_ids; those below 2 in the sequence are dropped, as
    `feature_query` drops them). No rejected proposals: the server does not report them."""
    tokens = torch.tensor(prompt_ids + generated_ids)  # [S]
    T = len(prompt_ids)
    kept = torch.tensor([T + p for p in positions if T + p >= 2], dtype=torch.long)  # [W] indices into tokens
    out = target(input_ids=tokens[None, :-1].to(target.device), output_hidden_states=True, use_cache=False,
                 logits_to_keep=(kept - 1).to(target.device))  # fmt: skip  # row j predicts tokens[j + 1]
    return FeatureQuery(
        tokens=tokens,
        features=layer_inputs(out.hidden_states, tuple(layers))[0].cpu(),  # [S - 1, K H]
        positions=kept,
        target_logits=stored_logits(out.logits[0], dtype),  # [W, V]
    )


def generated_positions(out: SpecOutput, loss_positions: str) -> torch.Tensor:
    """Indices into generated_ids [W] where the loss counts: --online_loss_positions of the served query."""
    if out.target_logits is None:
        raise ValueError(
            "the online buffer needs the target's logits: call generate(..., return_target_logits=True)"
        )
    if loss_positions == "wrong":
        return torch.tensor(out.wrong_positions, dtype=torch.long)
    if loss_positions == "all":
        return torch.arange(out.generated_ids.shape[1])
    raise ValueError(f"--online_loss_positions must be 'wrong' or 'all', got {loss_positions!r}")


def stored_logits(rows: torch.Tensor, dtype: torch.dtype = torch.float16) -> torch.Tensor:
    """Target logits rows [W, V] as the buffer keeps them: on the CPU in `dtype` (float16 clamped to
    +-FLOAT16_MAX, so nothing overflows)."""
    if dtype == torch.float16:
        rows = rows.clamp(-FLOAT16_MAX, FLOAT16_MAX)
    return rows.to("cpu", dtype)


def logits_at(model: PreTrainedModel, query: BufferedQuery) -> torch.Tensor:
    """`model`'s logits [W, V'] that predict generated_ids[positions]: one forward pass (the student's
    at the update; the target's, teacher-forced, where serving kept no target logits: osd.serving)."""
    device = model.device
    generated = query.generated_ids.to(device)
    if model.config.is_encoder_decoder:
        start = torch.tensor([model.config.decoder_start_token_id], device=device)
        decoder_in = torch.cat([start, generated[:-1]])[None]  # [1, N]: row i predicts generated[i]
        encoder_in = query.input_ids[None].to(device)
        logits = model(input_ids=encoder_in, decoder_input_ids=decoder_in, use_cache=False).logits[0]
        return logits[query.positions.to(device)]
    seq = torch.cat([query.input_ids.to(device), generated])[
        None, :-1
    ]  # [1, T + N - 1]: row j predicts S[j + 1]
    rows = query.input_ids.shape[0] - 1 + query.positions.to(device)  # [W]
    if accepts_logits_to_keep(model):  # the LM head only where the loss counts: the update's largest cost
        return model(input_ids=seq, use_cache=False, logits_to_keep=rows).logits[0]
    return model(input_ids=seq, use_cache=False).logits[0, rows]


def distillation_loss(
    model: PreTrainedModel,
    buffer: Sequence[BufferedQuery],
    divergence: Divergence,
    temperature: float = 1.0,
    backward: Callable[[torch.Tensor], None] | None = None,
) -> torch.Tensor | None:
    """Mean divergence over every loss position of the buffer (token-weighted across queries).

    With `backward`, each query's share of the loss is back-propagated as soon as it is computed,
    so only one sequence's activations are alive at a time; returns the detached total. Returns
    None when the buffer holds no loss position (e.g. the draft was right everywhere).
    """
    counted = sum(len(q.positions) for q in buffer)
    if counted == 0:
        return None
    total = torch.zeros((), device=model.device)
    for query in buffer:
        if len(query.positions) == 0:
            continue
        target = query.target_logits.to(model.device)  # [W, V]
        with compact_logits(model):  # a sub-vocabulary head: [W, V'], the divergence gathers the target's V'
            student = logits_at(model, query)[:, : target.shape[-1]]  # [W, V]: drop padding rows
        share = divergence(student, target, None, temperature=temperature, reduction="sum") / counted
        if backward is not None:
            backward(share)
            share = share.detach()
        total = total + share
    return total


class Buffered(Protocol):
    """A buffered query of any server: its size, and whether an earlier update already trained on it."""

    replayed: bool

    @property
    def nbytes(self) -> int: ...


class Buffers:
    """The served queries waiting for their draft's next update, per draft (route)."""

    def __init__(self, interval: int, replay: int) -> None:
        self.interval, self.replay = interval, replay
        self.queries: dict[str, list[Buffered]] = {}  # route -> buffered queries (or `Deferred` ones)

    def add(self, route: str, query: Buffered) -> None:
        self.queries.setdefault(route, []).append(query)

    def due(self) -> list[str]:
        """Routes holding --online_update_interval queries served since their last update."""
        return [r for r, b in self.queries.items() if sum(not q.replayed for q in b) >= self.interval]

    def take(self, route: str) -> list[Buffered]:
        """The queries one update trains on: those kept from the last update and the next
        --online_update_interval served ones (any more wait for the next update); what stays for the
        next one: the last --online_replay_queries of them."""
        queries = self.queries.pop(route)
        kept = sum(q.replayed for q in queries)  # kept queries come first
        taken, rest = queries[: kept + self.interval], queries[kept + self.interval :]
        if self.replay:
            rest = [replace(q, replayed=True) for q in taken[-self.replay :]] + rest
        if rest:
            self.queries[route] = rest
        return taken

    @property
    def nbytes(self) -> int:
        return sum(q.nbytes for b in self.queries.values() for q in b)

    def state_dict(self) -> dict[str, list[dict]]:
        return {r: [asdict(q) for q in b] for r, b in self.queries.items()}

    def load_state_dict(self, saved: dict[str, list[dict]]) -> None:
        """The buffers a checkpoint saved (the osd engine's queries: a draft model's `BufferedQuery`, a head's
        `FeatureQuery`)."""
        self.queries = {
            r: [FeatureQuery(**q) if "features" in q else BufferedQuery(**q) for q in b]
            for r, b in saved.items()
        }


@dataclass
class Deferred:
    """A buffered query made when the update first needs it (osd.serving: the target's teacher-forced
    forward, which belongs to the update's cost and so runs in its thread); made once."""

    make: Callable[[], Any]
    replayed: bool = False
    value: Any = None

    @property
    def nbytes(self) -> int:
        return 0 if self.value is None else self.value.nbytes

    def get(self) -> Any:
        if self.value is None:
            self.value = self.make()
        return self.value


def materialize(buffer: Sequence[Any]) -> list[Any]:
    """The buffer's queries, every `Deferred` one made."""
    return [q.get() if isinstance(q, Deferred) else q for q in buffer]
