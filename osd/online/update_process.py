"""Background updates in a forked process (--online_update_process).

A background update in a thread shares the interpreter's lock (the GIL) with serving: the draft's forward and
backward are hundreds of small torch ops with Python between them, and every op the serving thread dispatches
waits while the update's Python runs, so serving slows down by more than the second core's memory traffic
explains (`benchmarks/trainer_contention.py` measures both). `UpdateProcess` runs the updates in a process forked
from this one instead (fork: it inherits the trainer, its optimizer and loss as they are, nothing is pickled but
each update's buffered queries). The drafts' parameters are moved into memory shared with that process first, so
its optimizer steps write the weights this process reads; the optimizer's state, the gradients and the
activations stay in the update process, which uses one torch thread. Linux (fork) and CPU drafts only (CUDA cannot
be forked); a run that saves checkpoints cannot use it (the optimizer's state is not in this process).
"""

from __future__ import annotations

import mmap
import multiprocessing
import pickle
import traceback
from collections.abc import Callable, Iterable, Mapping
from multiprocessing.connection import Connection
from typing import Any

import torch
from torch import nn

Update = Callable[[dict[str, list[Any]]], dict[str, torch.Tensor | None]]  # due buffers -> each route's loss


def check_can_fork(drafts: Iterable[nn.Module]) -> None:
    """Raise a one-line error where updates cannot run in a forked process."""
    if "fork" not in multiprocessing.get_all_start_methods():
        raise ValueError("--online_update_process needs fork (Linux); drop it to update in a thread")
    if any(p.device.type != "cpu" for draft in drafts for p in draft.parameters()):
        raise ValueError("--online_update_process needs drafts on the CPU (CUDA cannot be forked); drop it")


def share_parameters(modules: Iterable[nn.Module]) -> None:
    """Move every parameter of `modules` into anonymous shared memory (in place: the same Parameter objects,
    tied ones once), which processes forked afterwards share."""
    seen: set[int] = set()
    for module in modules:
        for param in module.parameters():
            if id(param) not in seen:
                seen.add(id(param))
                param.data = _shared_copy(param.data)


def _shared_copy(tensor: torch.Tensor) -> torch.Tensor:
    buffer = mmap.mmap(-1, max(tensor.nbytes, 1))  # MAP_SHARED | MAP_ANONYMOUS; the tensor keeps it alive
    shared = torch.frombuffer(buffer, dtype=tensor.dtype, count=tensor.numel()).view(tensor.shape)
    return shared.copy_(tensor)


class UpdateProcess:
    """A forked process that runs `update` on the due buffers it is sent, one update at a time."""

    def __init__(self, update: Update, drafts: Mapping[str, nn.Module]) -> None:
        check_can_fork(drafts.values())
        share_parameters(drafts.values())
        self.drafts = drafts
        context = multiprocessing.get_context("fork")
        self._conn, child = context.Pipe()
        self._process = context.Process(
            target=_serve, args=(update, child, self._conn), name="osd-online-update", daemon=True
        )
        self._process.start()
        child.close()

    def update(self, due: dict[str, list[Any]]) -> dict[str, torch.Tensor | None]:
        """Run one update there; each route's loss. The drafts' weights here are the updated ones on return."""
        # pickled by value, not by torch's reductions for processes (which would need /dev/shm)
        self._conn.send_bytes(pickle.dumps(due))
        try:
            ok, result = self._conn.recv()
        except EOFError:
            raise RuntimeError(
                f"the online update process died (exit code {self._process.exitcode})"
            ) from None
        if not ok:
            raise RuntimeError(f"the online update failed in its process:\n{result}")
        for draft in self.drafts.values():  # written by the other process: what caches by version must see it
            for param in draft.parameters():
                torch.autograd.graph.increment_version(param)
        return {route: None if loss is None else torch.tensor(loss) for route, loss in result.items()}

    def close(self) -> None:
        if self._process.is_alive():
            self._conn.send_bytes(pickle.dumps(None))
            self._process.join()
        self._conn.close()


def _serve(update: Update, conn: Connection, parent_end: Connection) -> None:
    """The update process: updates until it is sent None (or this process's parent closes the pipe)."""
    parent_end.close()
    # one thread: GNU OpenMP's thread pool does not survive a fork (a parallel region in the child would hang when
    # the parent ran one with more threads); with one, none is entered
    torch.set_num_threads(1)
    while True:
        try:
            due = pickle.loads(conn.recv_bytes())
        except EOFError:
            return
        if due is None:
            return
        try:
            losses = {route: None if loss is None else loss.item() for route, loss in update(due).items()}
            conn.send((True, losses))
        except Exception:  # the parent re-raises it with this traceback
            conn.send((False, traceback.format_exc()))
