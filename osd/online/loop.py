"""The online loop, written once: serve -> record stats -> buffer -> update when due -> refresh.

    loop = OnlineLoop(server, updater, config)
    state = loop.run(queries)        # a whole stream, in order
    loop.step(batch)                 # or one turn at a time (osd.distill.online: one per Trainer step)

A *server* serves queries with the draft the updater says is current (`updater.serving(route)`): the
osd engine (`osd.online.engine_server`), vLLM with requests in flight (`osd.serving.online`), or a
replay against a recording of the target (`osd.analysis.replay_server`). It returns each query as a
`Served`: its route (the draft that served it), its acceptance stats, and `keep`, which makes what
the update needs of it. The *updater* (`osd.online.updater.DraftUpdater`) buffers, distils and keeps
the serving copies. Every driver (osd.train --mode online, the main job, osd.serving, online_replay)
runs this loop; none keeps its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from osd.online.config import OnlineArguments
from osd.online.records import OnlineState, QueryStats
from osd.online.updater import DraftUpdater

SHARED_DRAFT = "shared"  # the route when a single draft serves every query


@dataclass
class Query:
    """One query of the stream."""

    prompt_ids: list[int]  # [T]
    groups: dict[str, str] = field(default_factory=dict)  # dataset / topic / language of the record
    route: str = SHARED_DRAFT  # the draft that serves it (and learns from it)
    source: Any = None  # what a server needs besides (a replay: the query's recording)


@dataclass
class Served:
    """A served query: the draft that served it, its acceptance, and what the update keeps of it."""

    route: str
    stats: QueryStats
    keep: Callable[[str], Any]  # --online_loss_positions -> the buffered query (osd.online.buffer)


DraftFor = Callable[[str], Any]  # route -> the draft that serves it now


class Server(Protocol):
    def serve(self, queries: Sequence[Query], draft_for: DraftFor, first_index: int) -> list[Served]:
        """Serve queries that arrive together (the stream's queries first_index, first_index + 1, ...)."""

    def stream(
        self, queries: Sequence[Query], draft_for: DraftFor, before: Callable[[], None]
    ) -> Iterator[list[Served]]:
        """Serve a whole stream in order, yielding queries as they finish; `before()` before serving more."""

    def refresh(self, updater: DraftUpdater) -> None:
        """Take in the drafts the updater has just updated (a server that pulls `draft_for` needs nothing)."""

    def metrics(self) -> dict[str, Any]:
        """The server's own entries for the next log line."""


def in_turns(
    server: Server, queries: Sequence[Query], draft_for: DraftFor, before: Callable[[], None], size: int = 1
) -> Iterator[list[Served]]:
    """`Server.stream` for a server that serves queries `size` at a time, in order."""
    for first in range(0, len(queries), size):
        before()
        yield server.serve(queries[first : first + size], draft_for, first)


class OnlineLoop:
    def __init__(
        self,
        server: Server,
        updater: DraftUpdater,
        config: OnlineArguments,
        log: Callable[[dict[str, Any]], None] | None = None,
        wait_for_updates: bool = True,
    ) -> None:
        """wait_for_updates: a background update lands after the turn that overlaps it (reproducible);
        False: whenever it is done (a server with requests in flight must not stall on it)."""
        self.server, self.updater, self.config, self.log = server, updater, config, log
        self.wait_for_updates = wait_for_updates
        self.served_version = 0
        self.last_loss = None  # of the last update that ran in a turn (osd.distill.online returns it)

    @property
    def state(self) -> OnlineState:
        return self.updater.state

    def run(self, queries: Sequence[Query]) -> OnlineState:
        """Serve a whole stream, in order, distilling as it goes."""
        stream = self.server.stream(queries, self.updater.serving, self.refresh)
        while True:
            start = time.perf_counter()
            served = next(stream, None)  # serve
            self.state.serve_time_s += time.perf_counter() - start
            if served is None:
                break
            self.absorb(served, last=len(self.state.queries) + len(served) >= len(queries))
        return self.state

    def step(self, queries: Sequence[Query], last: bool = False) -> list[Served]:
        """One turn for queries that arrive together; `last`: the stream's last turn."""
        self.refresh()
        start = time.perf_counter()
        served = self.server.serve(queries, self.updater.serving, len(self.state.queries))  # serve
        self.state.serve_time_s += time.perf_counter() - start
        self.absorb(served, last)
        return served

    def absorb(self, served: list[Served], last: bool) -> None:
        for s in served:
            self.state.add(s.stats)  # record stats
        before = self.state.update_time_s
        self.updater.finish(wait=self.wait_for_updates or last)  # a background update lands
        if self.updater.learns:
            for s in served:
                self.updater.add(s.route, s.keep(self.config.online_loss_positions))  # buffer
        self.last_loss = self.updater.update_due(last)  # update when due: now, or beside the next turn
        for s in served:  # what the turn's queries waited on updates, shared among them
            s.stats.update_time_s = (self.state.update_time_s - before) / len(served)
        if last:
            self.updater.close()
            self.refresh()  # the last update reaches what is served
        if self.log is not None and self.state.log_due(self.config.online_eval_interval, last):
            self.log(self.entry())

    def refresh(self) -> None:
        """What is served: stale serving copies reloaded, a held background update started, and the
        server told of updates that landed."""
        self.updater.start()
        if self.updater.version != self.served_version:
            self.server.refresh(self.updater)
            self.served_version = self.updater.version

    def entry(self) -> dict[str, Any]:
        """The log entry for the queries since the last one (keys: osd.metric_keys)."""
        return self.state.metrics(self.config.online_alpha_window) | self.server.metrics()
