"""The osd engine as the online loop's server: `SpeculativeDecoder.generate` for one query, `generate_batch`
(left-padded) for several, keeping the target's logits from verification for the buffer (and, when an EAGLE-3 head
drafts, the target's states it read: its update's `FeatureQuery`, with no extra target forward)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedModel

from osd.distill.data import pad
from osd.online.buffer import buffer_query, feature_query
from osd.online.loop import DraftFor, Query, Served, in_turns
from osd.online.records import QueryStats
from osd.online.updater import DraftUpdater
from osd.spec import SpecOutput, SpeculativeDecoder
from osd.spec.adaptive import GammaPolicy
from osd.spec.drafter import Drafter


@dataclass
class EngineServer:
    target: PreTrainedModel
    gamma: int | str
    max_new_tokens: int
    eos_token_id: int | list[int] | None
    pad_token_id: int
    temperature: float = 0.0
    seed: int = 0  # sampling: query n's generator is seeded with seed + n, so a resumed run samples the same
    gamma_policy: GammaPolicy | None = None  # gamma "auto": one policy for every decoder
    buffer_dtype: torch.dtype = torch.float16
    batch_size: int = 1  # queries served together by `stream`

    def serve(self, queries: Sequence[Query], draft_for: DraftFor, first_index: int) -> list[Served]:
        """Each query served by its route's draft; the queries of one route as one batch."""
        served: list[Served | None] = [None] * len(queries)
        for route in dict.fromkeys(q.route for q in queries):
            rows = [i for i, q in enumerate(queries) if q.route == route]
            outs = self._generate(draft_for(route), [queries[i].prompt_ids for i in rows], first_index)
            for i, out in zip(rows, outs, strict=True):
                served[i] = Served(route, stats_of(out, queries[i].groups), self._keeper(queries[i], out))
        return served

    def stream(
        self, queries: Sequence[Query], draft_for: DraftFor, before: Callable[[], None]
    ) -> Iterator[list[Served]]:
        return in_turns(self, queries, draft_for, before, self.batch_size)

    def refresh(self, updater: DraftUpdater) -> None:
        """Nothing to do: each turn serves with `draft_for`, the updater's current serving draft."""

    def metrics(self) -> dict[str, Any]:
        return {}

    def _generate(self, draft: Drafter, prompts: list[list[int]], first_index: int) -> list[SpecOutput]:
        generator = None
        if self.temperature > 0:
            generator = torch.Generator(draft.device).manual_seed(self.seed + first_index)
        decoder = SpeculativeDecoder(draft, self.target, self.gamma, self.gamma_policy)
        options = {"max_new_tokens": self.max_new_tokens, "temperature": self.temperature,
                   "eos_token_id": self.eos_token_id, "generator": generator, "return_target_logits": True}  # fmt: skip
        if len(prompts) == 1:
            return [decoder.generate(torch.tensor([prompts[0]], device=draft.device), **options)]
        ids, mask = pad(prompts, self.pad_token_id, "left")
        return decoder.generate_batch(ids.to(draft.device), mask.to(draft.device), **options)

    def _keeper(self, query: Query, out: SpecOutput) -> Callable[[str], Any]:
        prompt = torch.tensor([query.prompt_ids])
        keep = buffer_query if out.target_features is None else feature_query  # a draft model's, a head's
        return lambda positions: keep(prompt, out, positions, self.buffer_dtype)


def stats_of(out: SpecOutput, groups: dict[str, str]) -> QueryStats:
    """The acceptance of a query the engine served."""
    return QueryStats(
        out.alpha_sum, out.num_proposed, sum(out.accepted_lengths), len(out.accepted_lengths), groups,
        out.generated_ids.shape[1], out.wall_time_s,
    )  # fmt: skip
