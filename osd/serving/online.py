"""vLLM as the online loop's server (`osd.online.loop`): the target served by vLLM with the OSD drafter as
its speculator (a draft model, or an EAGLE-3 head), queries in flight, the drafter distilled beside it and
swapped in.

    serve    the stream's queries, in order, at most --concurrency in flight on the vLLM engine; each
             finished query is counted as osd counts alpha (osd.serving.acceptance);
    buffer   what the update needs of it: the loss positions (where the target replaced a draft token,
             read off vLLM's per-step counters) and the target's logits there, from a teacher-forced
             forward on the trainer side, made when the update first needs it (in its thread with
             --online_background_update);
    refresh  once an update lands, the draft is exported and reloaded into the running engine
             (osd.serving.worker); requests in flight go on, their next proposals come from the new draft.

The engine decodes in its own process, so requests in flight keep being served while this process
buffers and updates; with --online_background_update the update runs in a worker thread and lands
whenever it is done. Besides the loop's entries: vLLM's own acceptance rate and the swaps.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from transformers import PreTrainedTokenizerBase

from osd.alpha import pooled_alpha
from osd.conversations import read_conversations, record_groups, user_query
from osd.distill.callbacks import METRICS_FILE
from osd.distill.data import truncate_prompt
from osd.metric_keys import QUERIES_SERVED, SWAP_TIME, SWAPS, VLLM_ACCEPTANCE_RATE
from osd.online.buffer import Deferred
from osd.online.loop import SHARED_DRAFT, DraftFor, OnlineLoop, Query, Served
from osd.online.records import OnlineState
from osd.online.updater import DraftUpdater
from osd.prompting import encode_prompt
from osd.serving.acceptance import query_stats, vllm_acceptance, wrong_positions
from osd.serving.config import ServingArguments
from osd.serving.distiller import DraftDistiller, export_draft
from osd.serving.engine import RequestPool, sampling_params, swap_draft

if TYPE_CHECKING:
    from vllm import LLM

SWAP_FILE = "draft_swap.safetensors"


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


class VllmServer:
    """The running vLLM engine, its request pool, and the swaps of the draft into it."""

    def __init__(self, llm: LLM, args: ServingArguments, distiller: DraftDistiller | None) -> None:
        self.llm, self.args, self.distiller = llm, args, distiller
        self.swap_path = Path(args.output_dir) / SWAP_FILE
        self.swap_times: list[float] = []
        self.engine_counts = [0, 0]  # vLLM's accepted and proposed draft tokens since the last entry

    def serve(self, queries: Sequence[Query], draft_for: DraftFor, first_index: int) -> list[Served]:
        """The queries together, in flight at once (up to --concurrency)."""
        return [s for batch in self.stream(queries, draft_for, lambda: None) for s in batch]

    def stream(
        self, queries: Sequence[Query], draft_for: DraftFor, before: Callable[[], None]
    ) -> Iterator[list[Served]]:
        a = self.args
        pool = RequestPool(
            self.llm, sampling_params(a.max_new_tokens, a.eval_temperature, a.seed), a.concurrency
        )
        for served in pool.stream([q.prompt_ids for q in queries]):
            query = queries[served.index]
            accepted, proposed = vllm_acceptance(served.counts)
            self.engine_counts = [self.engine_counts[0] + accepted, self.engine_counts[1] + proposed]
            stats = query_stats(served.counts, len(served.token_ids), query.groups, served.latency_s)
            yield [Served(query.route, stats, self._keeper(served))]
            before()  # the engine kept decoding the requests in flight meanwhile

    def _keeper(self, served) -> Callable[[str], Deferred]:
        def keep(loss_positions: str) -> Deferred:
            n = len(served.token_ids)
            positions = wrong_positions(served.counts, n) if loss_positions == "wrong" else list(range(n))
            return Deferred(lambda: self.distiller.buffer(served.prompt_ids, served.token_ids, positions))

        return keep

    def refresh(self, updater: DraftUpdater) -> None:
        """Export the updated draft and reload it into the running engine."""
        start = time.perf_counter()
        # written aside, then renamed: a reload reading the previous export keeps reading it whole
        staged = self.swap_path.with_suffix(".staged")
        export_draft(updater.serving(SHARED_DRAFT), staged, getattr(torch, self.args.teacher_dtype))
        os.replace(staged, self.swap_path)
        swap_draft(self.llm, str(self.swap_path))
        self.swap_times.append(time.perf_counter() - start)

    def metrics(self) -> dict[str, Any]:
        accepted, proposed = self.engine_counts
        self.engine_counts = [0, 0]
        entry = {VLLM_ACCEPTANCE_RATE: pooled_alpha(accepted, proposed), SWAPS: len(self.swap_times)}
        if self.swap_times:
            entry[SWAP_TIME] = self.swap_times[-1]
        return entry


def serve_stream(
    llm: LLM,
    args: ServingArguments,
    distiller: DraftDistiller | None,
    queries: Sequence[Query],
    log: Callable[[dict], None] | None = None,
) -> tuple[OnlineState, VllmServer]:
    """The online loop over `queries` on the running engine, distilling with `distiller` (None: the
    draft, if any, stays as it is); the run's records and the server (its swaps)."""
    state = OnlineState()
    learns = distiller is not None
    updater = (
        distiller.updater(args, state) if learns else DraftUpdater({}, None, None, args, state, learns=False)
    )
    server = VllmServer(llm, args, distiller)
    OnlineLoop(server, updater, args, log, wait_for_updates=False).run(queries)
    return state, server


def jsonl_writer(output_dir: str) -> Callable[[dict], None]:
    """Appends `{"step": queries_served, **entry}` to `{output_dir}/metrics.jsonl` (truncated first)."""
    path = Path(output_dir) / METRICS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")

    def write(entry: dict) -> None:
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"step": entry[QUERIES_SERVED], **entry}) + "\n")

    return write
