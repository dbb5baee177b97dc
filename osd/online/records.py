"""What the online loop records of each served query, and the log entries it makes of them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from osd.alpha import pooled_alpha
from osd.metric_keys import (
    ACCEPTED_LENGTH,
    ALPHA,
    ALPHA_CUMULATIVE,
    ALPHA_WINDOW,
    BACKGROUND_UPDATE_SHARE,
    ONLINE_LOSS,
    QUERIES_SERVED,
    UPDATE_TIME_SHARE,
    group_alphas,
)


@dataclass
class QueryStats:
    """Acceptance of one served query."""

    alpha_sum: float  # exact acceptance rates summed over the proposed positions
    num_proposed: int
    accepted: int  # accepted draft tokens, summed over verification steps
    steps: int  # verification steps
    groups: dict[str, str]  # dataset / topic / language of the record
    num_generated: int = 0
    wall_time_s: float = 0.0  # the server's time on this query (the update's is apart)
    update_time_s: float = 0.0  # updates' time on the serving path after it was served, before the next query


def queries_alpha(queries: Sequence[QueryStats]) -> float | None:
    """Token-weighted alpha over the queries (None when nothing was proposed)."""
    return pooled_alpha(sum(q.alpha_sum for q in queries), sum(q.num_proposed for q in queries))


def tail_length(n: int, tail_fraction: float = 1 / 3) -> int:
    """How many of a group's n queries make its reported tail."""
    return max(1, round(n * tail_fraction))


def ratio(part: float, whole: float) -> float:
    return part / whole if whole else 0.0


@dataclass
class OnlineState:
    """Everything the online loop accumulates besides the models and the optimizer; saved with checkpoints."""

    queries: list[QueryStats] = field(default_factory=list)
    logged: int = 0  # queries[:logged] are already in a log entry
    updates: int = 0
    losses: list[float] = field(default_factory=list)  # update losses not yet logged
    serve_time_s: float = 0.0  # the loop's time waiting on its server
    # updates' time on the serving path (a background update: the wait for it, the swap)
    update_time_s: float = 0.0
    background_update_time_s: float = 0.0  # the worker's time on updates
    max_buffer_bytes: int = 0

    def add(self, stats: QueryStats) -> None:
        self.queries.append(stats)

    def log_due(self, interval: int, last: bool) -> bool:
        """Whether a log entry is due: `interval` queries since the last one, or the stream's end."""
        pending = len(self.queries) - self.logged
        return pending > 0 and (pending >= interval or last)

    def metrics(self, window: int) -> dict[str, Any]:
        """The log entry for the queries since the last one (keys: osd.metric_keys); marks them logged."""
        recent = self.queries[self.logged :]
        steps = sum(q.steps for q in recent)
        logs = {
            ALPHA: queries_alpha(recent),
            ALPHA_WINDOW: queries_alpha(self.queries[-window:]),
            ALPHA_CUMULATIVE: queries_alpha(self.queries),
            ACCEPTED_LENGTH: sum(q.accepted for q in recent) / steps if steps else None,
            "proposed": sum(q.num_proposed for q in recent),  # the weight of "alpha" when aggregating entries
            QUERIES_SERVED: len(self.queries),
            "online_updates": self.updates,
            "serve_time_s": self.serve_time_s,  # the server's time on every query so far
            UPDATE_TIME_SHARE: ratio(self.update_time_s, self.serve_time_s),
            BACKGROUND_UPDATE_SHARE: ratio(self.background_update_time_s, self.serve_time_s),
            "buffer_peak_mb": self.max_buffer_bytes / 2**20,
            **group_alphas((q.groups, q.alpha_sum, q.num_proposed) for q in recent),  # alpha/{field}/{value}
        }
        if self.losses:
            logs[ONLINE_LOSS] = sum(self.losses) / len(self.losses)
        self.logged = len(self.queries)
        self.losses.clear()
        return logs

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> OnlineState:
        data = dict(data)
        queries = [QueryStats(**q) for q in data.pop("queries")]
        data.pop("alpha_sum", None), data.pop("num_proposed", None)  # running totals of older checkpoints
        return cls(queries=queries, **data)
