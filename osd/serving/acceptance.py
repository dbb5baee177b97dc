"""One served request's acceptance from vLLM's per-request counters, in osd's terms.

vLLM (`CompletionOutput.spec_decode_metrics`, engine built with per_request_spec_decode_metrics=
"detailed") records per verification step s the draft tokens proposed, d_s (k =
num_speculative_tokens = --max_propose_num, fewer only near the length limit), and accepted, a_s
(a prefix of the proposals); the target then emits one token of its own (recovered after a
rejection, bonus after a full acceptance). Two rates follow:

    vLLM acceptance rate  sum_s a_s / sum_s d_s
        every proposal counts, also those behind the step's first rejection, which the target
        never judged on their own context;
    osd alpha             sum_s a_s / sum_s min(a_s + 1, d_s)
        osd.spec's alpha: the proposals up to and including the first rejection count
        (`SequenceRecord.commit`), each with its exact acceptance probability sum_v min(p, q),
        which greedy (temperature 0) is 1 for an accepted token and 0 for the rejected one.

At k = 1 the two are the same number. With sampling, vLLM's counts are realised acceptances and
osd.spec's alpha_sum is their expectation: the realised mean estimates osd's alpha without bias.

Positions: generated token 0 comes from the prefill (no draft); step s then emits generated
tokens c_s .. c_s + a_s, with c_s = 1 + sum_{r<s} (a_r + 1). The last of them is the target's own
token, and when a_s < d_s it replaced a draft token: a "wrong position" (osd.online.buffer),
where the online update distils.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from osd.online.records import QueryStats


class StepCounts(Protocol):
    """vLLM's `RequestSpecDecodeMetrics` at the "detailed" level (the fields read here)."""

    per_step_accepted: Sequence[int]
    per_step_drafted: Sequence[int]


def _steps(counts: StepCounts | None) -> list[tuple[int, int]]:
    """[(a_s, d_s)] per verification step; none for a request served without a draft."""
    if counts is None:
        return []
    steps = list(zip(counts.per_step_accepted, counts.per_step_drafted, strict=True))
    if any(not 0 <= a <= d for a, d in steps):
        raise ValueError(f"accepted must be within 0..drafted at every step, got {steps}")
    if not steps and getattr(counts, "num_draft_tokens", 0):
        raise ValueError(
            "vLLM returned no per-step counts: build the engine with per_request_spec_decode_metrics='detailed'"
        )
    return steps


def wrong_positions(counts: StepCounts | None, num_generated: int) -> list[int]:
    """Indices into the generated tokens where the target replaced a draft token (module docstring)."""
    positions, cursor = [], 1
    for accepted, drafted in _steps(counts):
        if accepted < drafted:
            positions.append(cursor + accepted)
        cursor += accepted + 1
    return [p for p in positions if p < num_generated]  # a step may run past max_tokens or EOS


def vllm_acceptance(counts: StepCounts | None) -> tuple[int, int]:
    """(accepted draft tokens, proposed draft tokens): vLLM's acceptance rate is their ratio."""
    steps = _steps(counts)
    return sum(a for a, _ in steps), sum(d for _, d in steps)


def query_stats(
    counts: StepCounts | None, num_generated: int, groups: dict[str, str], latency_s: float
) -> QueryStats:
    """The request as osd's online metrics count it (alpha_sum over min(a_s + 1, d_s) counted positions)."""
    steps = _steps(counts)
    accepted = sum(a for a, _ in steps)
    counted = sum(min(a + 1, d) for a, d in steps)
    return QueryStats(
        alpha_sum=float(accepted), num_proposed=counted, accepted=accepted, steps=len(steps),
        groups=groups, num_generated=num_generated, wall_time_s=latency_s,
    )  # fmt: skip
