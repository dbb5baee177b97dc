"""The updater: distils the drafts on what the loop buffered, and keeps the copies that serve.

One update of a route's draft = --online_steps_per_update optimizer steps on its buffer (the queries
kept from the last update and the next --online_update_interval served ones) (`loss` back-
propagated query by query, then `optimizer_step`). Drafts of different routes have disjoint
parameters: each step back-propagates every due buffer, then steps once. The buffer is then
emptied but for its last --online_replay_queries queries, which the next update revisits.

Serving copies. With --draft_serving_dtype (or a background update) a copy of each draft serves,
reloaded from the draft after each of its updates; the optimizer keeps the draft's own weights.

Background updates (--online_background_update). A due update waits until the loop next refreshes
what it serves (`start`, just before it serves again); then a worker thread runs the whole update while
the copies serve, and reloads a spare copy of each updated draft (cast, and prepared for the engine's
step: `osd.spec.drafter.prepare_for_serving`). `finish` collects it (waiting, or only when done) and swaps
the spares in, so no reload is left on the serving path. torch ops release the GIL, so serving and the
update each use a core; but the update's Python between its many small ops holds the GIL that serving's
ops wait for. With --online_update_process the worker thread hands the update's steps to a forked process
(`osd.online.update_process`) and only reloads the spares itself.
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
from torch import nn

from osd.distill.subvocab import TiedRowsEmbedding
from osd.online.buffer import Buffers, materialize
from osd.online.config import OnlineArguments
from osd.online.records import OnlineState
from osd.online.update_process import UpdateProcess
from osd.spec.drafter import prepare_for_serving

# (draft, buffered queries, backward) -> the mean loss over the buffer, detached (None: nothing to learn)
LossFn = Callable[[nn.Module, list[Any], Callable[[torch.Tensor], None]], torch.Tensor | None]


def adamw_step(
    params: Any, learning_rate: float, weight_decay: float = 0.0, max_grad_norm: float = 0.0
) -> Callable[[], None]:
    """A plain AdamW optimizer step (clip, step, zero the grads) for a loop that runs outside Trainer."""
    params = [p for p in params if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=learning_rate, weight_decay=weight_decay)

    def step() -> None:
        if max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


class DraftUpdater:
    """Buffers served queries per route and distils each route's draft when its buffer is due."""

    def __init__(
        self,
        drafts: Mapping[str, nn.Module],
        loss: LossFn,
        optimizer_step: Callable[[], None],
        config: OnlineArguments,
        state: OnlineState,
        learns: bool = True,
        backward: Callable[[torch.Tensor], None] = torch.Tensor.backward,
        compute_context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    ) -> None:
        """learns=False: a static run (Standard SD), nothing is buffered. compute_context: entered in the
        thread that computes the loss (autocast is per thread)."""
        self.drafts, self.loss, self.optimizer_step = drafts, loss, optimizer_step
        self.config, self.state, self.learns = config, state, learns
        self.backward, self.compute_context = backward, compute_context
        self.buffers = Buffers(config.online_update_interval, config.online_replay_queries)
        self.version = 0  # updates landed so far: what is served must be refreshed when it changes
        self._copies: dict[str, nn.Module] = {}
        self._spares: dict[str, nn.Module] = {}  # background: what the worker reloads while the copy serves
        self._stale: set[str] = set()
        self._job: Future | None = None
        self._worker: ThreadPoolExecutor | None = None
        # --online_update_process: forked at the first background update
        self._process: UpdateProcess | None = None

    # ---- buffer, update ----------------------------------------------------------------------

    def add(self, route: str, query: Any) -> None:
        self.buffers.add(route, query)
        self.state.max_buffer_bytes = max(self.state.max_buffer_bytes, self.buffers.nbytes)

    def update_due(self, last: bool = False) -> torch.Tensor | None:
        """Update every draft whose buffer is due (again while it stays due): now, or (background, unless
        `last`) from the next `start` on (the due queries stay in the buffer until then, so a checkpoint
        keeps them). Returns the last update's loss when one ran now."""
        loss = None
        while (due := self.buffers.due()) and (last or not self.config.online_background_update):
            start = time.perf_counter()
            losses = self._steps({route: self.buffers.take(route) for route in due})
            self.state.update_time_s += time.perf_counter() - start
            loss = self._landed(losses)
        return loss

    def _steps(self, due: dict[str, list[Any]]) -> dict[str, torch.Tensor | None]:
        """The update here, or in the update process once there is one (which then holds the optimizer's state)."""
        return self._update(due) if self._process is None else self._process.update(due)

    def _update(self, due: dict[str, list[Any]]) -> dict[str, torch.Tensor | None]:
        """--online_steps_per_update optimizer steps on the due buffers; each route's last loss."""
        due = {route: materialize(queries) for route, queries in due.items()}
        losses: dict[str, torch.Tensor | None] = {}
        for _ in range(self.config.online_steps_per_update):
            for route, queries in due.items():
                draft = self.drafts[route]
                draft.train()
                with self.compute_context():
                    losses[route] = self.loss(draft, queries, self.backward)
                draft.eval()
            self.optimizer_step()
        return losses

    def _landed(
        self, losses: dict[str, torch.Tensor | None], reloaded: Mapping[str, nn.Module] | None = None
    ) -> torch.Tensor | None:
        """Count the landed updates; the serving copies the worker `reloaded` serve from now on, the others
        are stale."""
        reloaded = reloaded or {}
        self.state.updates += len(losses)
        self.state.losses.extend(loss.item() for loss in losses.values() if loss is not None)
        for route, spare in reloaded.items():
            self._spares[route], self._copies[route] = self._copies[route], spare
        self._stale.update(set(losses) - set(reloaded))
        self.version += 1
        return [*losses.values()][-1]

    # ---- background ------------------------------------------------------------------------

    def start(self) -> None:
        """Before serving: reload stale serving copies, then start the due background updates."""
        for route in list(self._stale):
            self.serving(route)
        due = self.buffers.due() if self.config.online_background_update and self._job is None else []
        if not due:
            return
        if self._worker is None:
            self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="osd-online-update")
            if self.config.online_update_process:
                self._process = UpdateProcess(self._update, self.drafts)
        self._job = self._worker.submit(
            self._timed_update, {route: self.buffers.take(route) for route in due}
        )

    def _timed_update(
        self, due: dict[str, list[Any]]
    ) -> tuple[dict[str, torch.Tensor | None], dict[str, nn.Module], float]:
        """In the worker: the update (here or in the update process), then each updated draft's spare serving copy
        reloaded from it."""
        start = time.perf_counter()
        losses = self._steps(due)
        reloaded = {
            route: self._reload(self._spares[route], route) for route in losses if route in self._spares
        }
        return losses, reloaded, time.perf_counter() - start

    def _reload(self, copy_: nn.Module, route: str) -> nn.Module:
        """`copy_` (a serving copy of the route's draft) with the draft's weights, ready to serve."""
        # only what the updates change (the copy is the draft's deep copy: the same parameters and modules in the
        # same order; a tied weight is one parameter; buffers are fixed), cast to the copy's dtype: the trained
        # parameters, and the rows of a frozen tied weight that --draft_vocab_rows_only writes back
        draft = self.drafts[route]
        with torch.no_grad():
            for served, trained in zip(copy_.parameters(), draft.parameters(), strict=True):
                if trained.requires_grad:
                    served.copy_(trained)
            for served, trained in zip(copy_.modules(), draft.modules(), strict=True):
                if isinstance(trained, TiedRowsEmbedding):
                    trained.write_back(served.weight)
        prepare_for_serving(copy_)
        return copy_

    def finish(self, wait: bool = True) -> None:
        """Collect a background update (only when it is done, unless `wait`)."""
        if self._job is None or not (wait or self._job.done()):
            return
        start = time.perf_counter()
        losses, reloaded, compute_s = self._job.result()  # re-raises the worker's error here
        self._job = None
        self.state.background_update_time_s += compute_s
        self.state.update_time_s += time.perf_counter() - start  # the wait is on the serving path
        self._landed(losses, reloaded)

    def close(self) -> None:
        """Land everything: a background update in flight, then the due ones."""
        self.finish(wait=True)
        self.update_due(last=True)
        if self._worker is not None:
            self._worker.shutdown()
            self._worker = None
        if self._process is not None:
            self._process.close()
            self._process = None

    # ---- serving -----------------------------------------------------------------------------

    def serving(self, route: str) -> nn.Module:
        """The draft as served: itself, or its copy in --draft_serving_dtype (always a copy with background
        updates: the worker trains the draft itself), reloaded after the draft's updates."""
        draft = self.drafts[route]
        own = next(draft.parameters()).dtype
        name = self.config.draft_serving_dtype
        dtype = own if name is None else getattr(torch, name)
        if dtype == own and not self.config.online_background_update:
            draft.eval()
            return draft
        if route in self._copies and route not in self._stale:
            return self._copies[route]
        start = time.perf_counter()
        if route not in self._copies:
            self._copies[route] = copy.deepcopy(draft).to(dtype).eval()
            if self.config.online_background_update:
                self._spares[route] = copy.deepcopy(self._copies[route])
        else:
            self._reload(self._copies[route], route)
        self._stale.discard(route)
        self.state.update_time_s += time.perf_counter() - start  # part of what an update costs
        return self._copies[route]
