"""Online speculative decoding on vLLM: serve -> buffer -> update -> swap, as one loop.

    serve   the stream's queries, in order, at most --concurrency in flight on the vLLM engine
            (target + the draft as its draft_model speculator, --max_propose_num tokens a step);
    buffer  each finished query: its tokens, the loss positions (where the target replaced a
            draft token, read off vLLM's per-step counters: osd.serving.acceptance) and the target's
            logits there (a teacher-forced forward on the trainer side: osd.serving.distiller);
    update  once the buffer holds --online_update_interval queries: one distillation step on it
            (osd.distill.online's loss), the buffer is cleared;
    swap    the updated draft is exported and reloaded into the running engine (osd.serving.worker);
            requests in flight go on, their next proposals come from the new draft.

The engine decodes in its own process, so the requests in flight keep being served while this
process buffers, updates and swaps (their outputs wait in vLLM's queue until the next `poll`); but
with the trainer on the loop's thread no new query is submitted meanwhile. With
--online_background_update the trainer runs in a worker thread, one job per finished query in
stream order, and the loop only swaps in an export once the worker has written it.

Metrics: `OnlineState.metrics` every --online_eval_interval finished queries (osd.metric_keys; alpha
counted as osd.spec counts it), plus vLLM's own acceptance rate and the swap times, appended to
`{output_dir}/metrics.jsonl`. `update_time_share` is the trainer's time on the loop's thread (buffer
forwards, updates, exports and swaps; with the worker: the swaps and the waits for it) over the rest
of the loop's wall time, `background_update_share` the worker's.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from transformers import PreTrainedTokenizerBase

from osd.conversations import read_conversations, record_groups, user_query
from osd.distill.callbacks import METRICS_FILE
from osd.distill.data import truncate_prompt
from osd.distill.online import OnlineState
from osd.metric_keys import QUERIES_SERVED, SWAP_TIME, SWAPS, VLLM_ACCEPTANCE_RATE
from osd.prompting import encode_prompt
from osd.serving.acceptance import query_stats, vllm_acceptance, wrong_positions
from osd.serving.config import ServingArguments
from osd.serving.distiller import DraftDistiller, export_draft
from osd.serving.engine import RequestPool, Served, sampling_params, swap_draft

if TYPE_CHECKING:
    from vllm import LLM

SWAP_FILE = "draft_swap.safetensors"


@dataclass
class Query:
    prompt_ids: list[int]
    groups: dict[str, str]  # dataset / topic / language of the record


def load_queries(
    path: str,
    tokenizer: PreTrainedTokenizerBase,
    max_prompt_len: int,
    prefix: str = "",
    limit: int | None = None,
) -> list[Query]:
    """The stream's queries as prompt ids (osd.prompting, as `osd.train --mode online` encodes them)."""
    records = read_conversations(path)[:limit]
    return [
        Query(
            truncate_prompt(encode_prompt(tokenizer, prefix + user_query(r)), max_prompt_len),
            record_groups(r),
        )
        for r in records
    ]


class OnlineServer:
    """The loop's state: the engine's request pool, the trainer, the buffer, the metrics."""

    def __init__(
        self, llm: LLM, args: ServingArguments, distiller: DraftDistiller | None, log: Callable[[dict], None]
    ) -> None:
        self.llm, self.args, self.distiller, self.log = llm, args, distiller, log
        self.state, self.buffer, self.swap_times = OnlineState(), [], []
        self.teacher_time_s = 0.0  # of update_time_s: the target's teacher-forced forwards
        self.last_output_s = 0.0  # from the start of `run` to the latest output (not the trainer's catch-up)
        self.engine_counts = [0, 0]  # vLLM's accepted and proposed draft tokens since the last entry
        self.swap_path = Path(args.output_dir) / SWAP_FILE
        background = distiller is not None and args.online_background_update
        self.worker = ThreadPoolExecutor(max_workers=1) if background else None
        self.jobs: deque[Future] = deque()  # the worker's jobs in stream order; each: whether it exported

    def run(self, queries: list[Query]) -> OnlineState:
        """Serve every query of the stream (in order, --concurrency in flight), distilling as it goes."""
        a = self.args
        pool = RequestPool(
            self.llm, sampling_params(a.max_new_tokens, a.eval_temperature, a.seed), a.concurrency
        )
        start = time.perf_counter()
        for served in pool.stream([q.prompt_ids for q in queries]):
            self.last_output_s = time.perf_counter() - start
            self._finish(served, queries[served.index].groups)
            done = len(self.state.queries)
            if done == len(queries):
                self._swap_ready(wait=True)  # the last updates land before the last entry
            if done % a.online_eval_interval == 0 or done == len(queries):
                self.state.serve_time_s = time.perf_counter() - start - self.state.update_time_s
                self.log(self._entry())
        if self.worker is not None:
            self.worker.shutdown()
        return self.state

    def _finish(self, served: Served, groups: dict[str, str]) -> None:
        """Count a finished query; buffer it, and update and swap the draft when the buffer is due."""
        self.state.add(query_stats(served.counts, len(served.token_ids), groups, served.latency_s))
        accepted, proposed = vllm_acceptance(served.counts)
        self.engine_counts[0] += accepted
        self.engine_counts[1] += proposed
        if self.distiller is None:
            return
        n = len(served.token_ids)
        positions = (
            wrong_positions(served.counts, n)
            if self.args.online_loss_positions == "wrong"
            else list(range(n))
        )
        job = functools.partial(self._train, served.prompt_ids, served.token_ids, positions)
        if self.worker is not None:
            self.jobs.append(self.worker.submit(job))
            self._swap_ready(wait=False)
            return
        start = time.perf_counter()
        if job():
            self._swap()
        self.state.update_time_s += time.perf_counter() - start

    def _train(self, prompt_ids: list[int], token_ids: list[int], positions: list[int]) -> bool:
        """Buffer a served query; when the buffer is due, update the draft and export it. Returns whether
        an export awaits its swap. In the worker thread with --online_background_update."""
        start = time.perf_counter()
        self.buffer.append(self.distiller.buffer(prompt_ids, token_ids, positions))
        self.teacher_time_s += time.perf_counter() - start
        self.state.max_buffer_bytes = max(self.state.max_buffer_bytes, sum(q.nbytes for q in self.buffer))
        exported = len(self.buffer) >= self.args.online_update_interval
        if exported:
            loss = self.distiller.update(self.buffer)
            self.buffer.clear()
            self.state.updates += 1
            if loss is not None:
                self.state.losses.append(loss)
            # written aside, then renamed: a swap reading the previous export keeps reading it whole
            staged = self.swap_path.with_suffix(".staged")
            export_draft(self.distiller.draft, staged, getattr(torch, self.args.teacher_dtype))
            os.replace(staged, self.swap_path)
        if self.worker is not None:
            self.state.background_update_time_s += time.perf_counter() - start
        return exported

    def _swap_ready(self, wait: bool) -> None:
        """Collect the worker's finished jobs (all of them with `wait`) and swap in the newest export."""
        start = time.perf_counter()
        exported = False
        while self.jobs and (wait or self.jobs[0].done()):
            exported |= self.jobs.popleft().result()  # re-raises the worker's error here
        if exported:
            self._swap()
        self.state.update_time_s += time.perf_counter() - start

    def _swap(self) -> None:
        start = time.perf_counter()
        swap_draft(self.llm, str(self.swap_path))
        self.swap_times.append(time.perf_counter() - start)

    def _entry(self) -> dict:
        accepted, proposed = self.engine_counts
        self.engine_counts = [0, 0]
        entry = self.state.metrics(self.args.online_alpha_window)
        entry[VLLM_ACCEPTANCE_RATE] = accepted / proposed if proposed else float("nan")
        entry[SWAPS] = len(self.swap_times)
        if self.swap_times:
            entry[SWAP_TIME] = self.swap_times[-1]
        return entry


def jsonl_writer(output_dir: str) -> Callable[[dict], None]:
    """Appends `{"step": queries_served, **entry}` to `{output_dir}/metrics.jsonl` (truncated first)."""
    path = Path(output_dir) / METRICS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")

    def write(entry: dict) -> None:
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"step": entry[QUERIES_SERVED], **entry}, default=float) + "\n")

    return write
