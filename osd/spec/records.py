"""What the engine returns and keeps per sequence: `SpecOutput` (one decoded sequence),
`SequenceRecord` (its committed tokens and acceptance record while decoding) and `StepTimes`."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from osd.alpha import pooled_alpha


@dataclass
class SpecOutput:
    """What one `SpeculativeDecoder.generate` call returns (N generated tokens)."""

    generated_ids: torch.Tensor  # [1, N] new tokens only, on the prompt's device (as HF generate)
    alpha_sum: float  # sum of exact acceptance rates over counted proposed positions
    num_proposed: int  # counted proposed positions (see `_step`)
    accepted_lengths: list[int]  # draft tokens accepted at each verification step
    wrong_positions: list[int]  # indices into generated_ids[0] where the target replaced a draft token
    target_logits: torch.Tensor | None  # [N, V] target logits that produced each generated token
    num_target_calls: int
    draft_time_s: float  # draft forwards (proposals)
    target_time_s: float  # target forwards (verification, the prompt's prefill included)
    accept_time_s: float  # accept/reject and exact alpha
    cache_time_s: float  # committing tokens and cropping both KV caches
    wall_time_s: float
    rejected_ids: list[int] = field(default_factory=list)  # the draft token rejected at each wrong position
    # with return_target_logits and an EAGLE-3 head: the target's states at the head's layers at positions
    # 0..T+N-2 of prompt + generated [T + N - 1, K H] (those verification computed; what a head's update reads)
    target_features: torch.Tensor | None = None

    @property
    def alpha(self) -> float | None:
        """Mean exact acceptance rate over counted proposed positions (`osd.alpha.pooled_alpha`: None when
        nothing was proposed)."""
        return pooled_alpha(self.alpha_sum, self.num_proposed)

    @property
    def mean_accepted_length(self) -> float | None:
        """Accepted draft tokens per verification step (None when there was no step)."""
        steps = len(self.accepted_lengths)
        return sum(self.accepted_lengths) / steps if steps else None


@dataclass
class StepTimes:
    """Seconds spent per part of the steps (of one sequence, or of a batch decoded together)."""

    draft: float = 0.0  # draft forwards (proposals)
    target: float = 0.0  # target forwards (verification, the prompt's prefill included)
    accept: float = 0.0  # accept/reject and exact alpha
    cache: float = 0.0  # committing tokens and cropping the KV caches

    def add(self, t0: float, t1: float, t2: float, t3: float, t4: float) -> None:
        """A step's time stamps: drafting ran t0..t1, verification t1..t2, accept t2..t3, caches t3..t4."""
        self.draft += t1 - t0
        self.target += t2 - t1
        self.accept += t3 - t2
        self.cache += t4 - t3


@dataclass
class SequenceRecord:
    """One sequence's committed tokens and acceptance record, step by step; becomes its SpecOutput."""

    tokens: list[int]  # committed sequence (prompt or decoder start, then generated)
    prompt_len: int
    keep_logits: bool
    alpha_sum: float = 0.0
    num_proposed: int = 0
    accepted_lengths: list[int] = field(default_factory=list)
    wrong_positions: list[int] = field(default_factory=list)
    target_rows: list[torch.Tensor] = field(default_factory=list)
    rejected_ids: list[int] = field(default_factory=list)
    feature_rows: list[torch.Tensor] = field(default_factory=list)  # [m, K H] per step (keep_logits, a head)
    num_target_calls: int = 0

    @property
    def num_generated(self) -> int:
        return len(self.tokens) - self.prompt_len

    def commit(
        self,
        drafted: list[int],
        n: int,
        k: int,
        next_token: int,
        alpha: float,
        counted: int,
        logits: torch.Tensor,
    ) -> list[int]:
        """Record a verification step: n of k proposals accepted, then next_token from the target
        (alpha: exact acceptance summed over the `counted` positions; logits [>= n + 1, V]).
        Returns the tokens it committed."""
        emitted = drafted[:n] + [next_token]
        if n < k:
            self.wrong_positions.append(self.num_generated + n)
            self.rejected_ids.append(drafted[n])
        self.accepted_lengths.append(n)
        self.alpha_sum += alpha
        self.num_proposed += counted
        self.num_target_calls += 1
        if self.keep_logits:
            self.target_rows.append(logits[: n + 1])
        self.tokens.extend(emitted)
        return emitted

    def keep_features(self, features: torch.Tensor) -> None:
        """The target's states [m, K H] at the m committed positions a verification just computed (kept with the
        logits: the committed sequence's first len(tokens) - 1 positions in all)."""
        if self.keep_logits:
            self.feature_rows.append(features)

    def to_output(
        self, eos: set[int], times: StepTimes, wall_time: float, device: torch.device
    ) -> SpecOutput:
        generated = self.tokens[self.prompt_len :]
        # a step may commit tokens past an EOS that an accepted draft token already emitted
        cut = next((i + 1 for i, t in enumerate(generated) if t in eos), len(generated))
        logits = torch.cat(self.target_rows)[:cut] if self.keep_logits and self.target_rows else None
        # the states that read the tokens before the last one kept
        features = torch.cat(self.feature_rows)[: self.prompt_len + cut - 1] if self.feature_rows else None
        wrong = [i for i, p in enumerate(self.wrong_positions) if p < cut]
        return SpecOutput(
            generated_ids=torch.tensor([generated[:cut]], dtype=torch.long, device=device),
            alpha_sum=self.alpha_sum,
            num_proposed=self.num_proposed,
            accepted_lengths=self.accepted_lengths,
            wrong_positions=[self.wrong_positions[i] for i in wrong],
            target_logits=logits,
            num_target_calls=self.num_target_calls,
            draft_time_s=times.draft,
            target_time_s=times.target,
            accept_time_s=times.accept,
            cache_time_s=times.cache,
            wall_time_s=wall_time,
            rejected_ids=[self.rejected_ids[i] for i in wrong],
            target_features=features,
        )
