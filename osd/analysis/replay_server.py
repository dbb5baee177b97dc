"""A recording of the target as the online loop's server: each query is served by greedy speculative
decoding *simulated* against the target's recorded output (`osd.analysis.simulate`: exactly the
engine's acceptance), so only the draft runs. The buffer keeps the target's recorded top-K at the loss
positions, and the update's loss is a soft cross-entropy against it (`osd.distill.teacher_topk`).

An EAGLE-3 head (`embed`: the target's input embedding) serves from a recording with the target's states
(`record --features`); its buffer keeps a `FeatureQuery` whose target logits are the recorded top-K with the rest
of the probability spread evenly over the other ids (`topk_log_probs`), and its rejected proposals."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from osd.analysis.recording import PromptRecord, Recording
from osd.analysis.simulate import Iteration, replay_greedy
from osd.distill.lm_training import IGNORE, Example
from osd.distill.teacher_topk import TopK, topk_distillation
from osd.online.buffer import stored_logits
from osd.online.head_loss import FeatureQuery
from osd.online.loop import DraftFor, Query, Served, in_turns
from osd.online.records import QueryStats
from osd.online.updater import DraftUpdater
from osd.spec.eagle3 import Eagle3Head


def wrong_positions(iterations: list[Iteration]) -> list[int]:
    """Output positions where the target replaced a rejected draft token (n < k): an iteration that
    ends with `matched_so_far` tokens put the target's own token at matched_so_far - 1."""
    return [it.matched_so_far - 1 for it in iterations if it.accepted < it.proposed]


@dataclass
class TopKQuery:
    """A replayed query as the update needs it: a training example with labels at the loss positions,
    and the target's top-K there (None: no loss position)."""

    example: Example | None
    target: TopK | None
    replayed: bool = False

    @property
    def nbytes(self) -> int:
        return 0 if self.target is None else self.target.ids.nbytes + self.target.logp.nbytes


def topk_query(rec: PromptRecord, positions: list[int]) -> TopKQuery:
    """The query with labels at `positions` of its output, and the target's top-K there."""
    if not positions:
        return TopKQuery(None, None)
    ids = rec.prompt_ids + rec.output_ids
    labels = [IGNORE] * len(ids)
    for p in positions:
        labels[len(rec.prompt_ids) + p] = ids[len(rec.prompt_ids) + p]
    at = torch.tensor(positions, dtype=torch.long)
    logp = rec.topk_logits[at] - rec.logsumexp[at, None]  # [W, K]
    return TopKQuery((ids, labels), TopK(rec.topk_ids[at], logp.to(torch.float16)))


def topk_log_probs(rec: PromptRecord, at: torch.Tensor, vocab: int) -> torch.Tensor:
    """The target's log-probabilities [W, V] at output positions `at` [W]: its recorded top-K, and the mass they
    leave spread evenly over the other V - K ids (finite everywhere, so a divergence on any sub-vocabulary is)."""
    top = rec.topk_logits[at] - rec.logsumexp[at, None]  # [W, K]
    rest = (1 - top.exp().sum(-1)).clamp(min=1e-12) / (vocab - top.shape[-1])  # [W]
    dense = rest.log()[:, None].repeat(1, vocab)  # [W, V]
    return dense.scatter_(1, rec.topk_ids[at].long(), top)


def replayed_feature_query(
    rec: PromptRecord, positions: list[int], iterations: list[Iteration], vocab: int
) -> FeatureQuery:
    """A head's buffered query (`osd.online.head_loss`) from a replayed one: loss at `positions` of its output, and
    the proposals the target rejected in `iterations`."""
    T = len(rec.prompt_ids)
    at = torch.tensor([p for p in positions if T + p >= 2], dtype=torch.long)  # no head entry predicts 0 or 1
    rejected = [
        [T + it.matched_so_far - 1, it.accepted, it.rejected] for it in iterations if it.rejected is not None
    ]
    return FeatureQuery(
        tokens=torch.tensor(rec.prompt_ids + rec.output_ids),
        features=rec.features,
        positions=T + at,
        target_logits=stored_logits(topk_log_probs(rec, at, vocab)),
        rejected=torch.tensor(rejected, dtype=torch.long).view(-1, 3),
    )


def topk_loss(
    draft: Any, buffer: list[TopKQuery], backward: Callable[[torch.Tensor], None]
) -> torch.Tensor | None:
    """The update's loss on a replay buffer (None: no loss position), back-propagated."""
    kept = [q for q in buffer if q.example is not None]
    if not kept:
        return None
    loss, _ = topk_distillation([q.example for q in kept], [q.target for q in kept])(
        draft, list(range(len(kept)))
    )
    backward(loss)
    return loss.detach()


@dataclass
class ReplayServer:
    recording: Recording
    gamma: int
    vocab: int  # the shared vocabulary size (osd.analysis.simulate.check_draft)
    embed: nn.Module | None = None  # the target's input embedding, which a head reads

    def __post_init__(self) -> None:
        eos = self.recording.header["eos_token_id"]
        self.eos = set() if eos is None else {eos}
        self.wrong: list[int] = []  # per served query: its wrong positions

    def serve(self, queries: Sequence[Query], draft_for: DraftFor, first_index: int) -> list[Served]:
        return [self._serve(q, draft_for(q.route)) for q in queries]

    def stream(
        self, queries: Sequence[Query], draft_for: DraftFor, before: Callable[[], None]
    ) -> Iterator[list[Served]]:
        return in_turns(self, queries, draft_for, before)

    def refresh(self, updater: DraftUpdater) -> None:
        """Nothing to do: each query is served with `draft_for`."""

    def metrics(self) -> dict[str, Any]:
        return {}

    def _serve(self, query: Query, draft: Any) -> Served:
        rec: PromptRecord = query.source
        start = time.perf_counter()
        sim = replay_greedy(draft, rec, self.gamma, len(rec.output_ids), self.eos, self.vocab, self.embed)
        wrong = wrong_positions(sim.iterations)
        self.wrong.append(len(wrong))
        stats = QueryStats(
            sum(it.alpha_sum for it in sim.iterations), sum(it.counted for it in sim.iterations),
            sum(it.accepted for it in sim.iterations), len(sim.iterations), query.groups,
            len(sim.generated_ids), time.perf_counter() - start,
        )  # fmt: skip

        def keep(loss_positions: str) -> TopKQuery | FeatureQuery:
            positions = wrong if loss_positions == "wrong" else list(range(len(rec.output_ids)))
            if isinstance(draft, Eagle3Head):
                return replayed_feature_query(
                    rec, positions, sim.iterations, self.recording.header["vocab_rows"]
                )
            return topk_query(rec, positions)

        return Served(query.route, stats, keep)


def recording_queries(recording: Recording, groups: list[str]) -> list[Query]:
    """The recording's prompts as the loop's queries, grouped by dataset."""
    return [
        Query(r.prompt_ids, {"dataset": g}, source=r) for r, g in zip(recording.prompts, groups, strict=True)
    ]
