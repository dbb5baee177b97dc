"""Online distillation: serve a query stream with speculative decoding and distil the draft on it.

The loop, one Trainer step per --per_device_train_batch_size queries of the stream, in order
(`OnlineDistillTrainer.training_step`; the paper's setting is 1):

    serve   the queries with SpeculativeDecoder(draft, target, gamma=--max_propose_num) (`generate`
            for one, `generate_batch` for several), keeping the target's logits from verification
            (with --draft_serving_dtype, a copy of the draft in that dtype serves, refreshed after
            each update; the optimizer keeps the float32 weights);
    buffer  each query: its tokens, the loss positions (where the target replaced a draft token, or
            every generated token with --online_loss_positions all) and the target's logits there;
    update  once a buffer holds --online_update_interval queries (checked at the end of each step,
            so with batches it may hold a few more): ONE student forward per buffered sequence, the
            --kl_method divergence at the loss positions against the buffered target logits (no
            second teacher forward), backward, then Trainer's optimizer step (with
            --online_steps_per_update K, K - 1 such steps are taken first, within the update, at the
            scheduler's current lr); the buffer is cleared, but for its last --online_replay_queries
            queries, which the next update revisits.

With --online_background_update the update leaves the serving path: an update due after step n
runs its forward and backward in a worker thread while step n + 1 is served (by the serving copy,
never the student being trained), then the optimizer steps and the serving copy is swapped between
steps (`_finish_background_update`). Step n + 1 is therefore served by the draft before the update,
and every update uses the same weights and buffer as without the flag. Serving and the update each
run on their own core (torch ops release the GIL; one intra-op thread each).

Symbols: T prompt length, N generated tokens, W loss positions of a query, V vocabulary.

Positions. For a decoder-only model the served sequence is S = prompt (T) + generated (N).
Generated token i sits at S[T + i] and is predicted by the logits at position T + i - 1; the
engine's `target_logits[i]` are those logits. The student's row for token i is therefore its
logits at T + i - 1 (the reference code read position T + i, one off). For an encoder-decoder
model the decoder input is [start] + generated[:-1] and row i predicts generated[i].

Buffer and memory. Each buffered query keeps, on the CPU, its token ids and the target's logits
at its W loss positions only, in float16 (clamped to +-6e4 so nothing overflows): 2*V bytes per
loss position (64 KB for V = 32000). The buffer holds at most --online_update_interval +
--online_replay_queries queries per draft; a static run (--online_update_interval 0, the Standard
baseline, or an interval beyond the stream) keeps nothing.
The student's logits are recomputed at the update (they change between updates).

Optimizer cadence. A Trainer step serves --per_device_train_batch_size queries (gradient
accumulation 1), and Trainer calls `optimizer.step()` after every step. Between updates no gradient exists
(Trainer's `zero_grad` sets them to None), and torch optimizers skip parameters whose grad is
None: no moment update, no weight decay, the draft is unchanged. LR schedules (warmup, decay)
therefore count steps, not updates.

Resume. A checkpoint also holds `online_state.json` (the per-query alpha history, what is logged,
update counts and timings) and `online_buffer.pt` (the buffered queries), committed together with
Trainer's own files (osd.distill.run_dir), so `--resume_from_checkpoint` continues exactly where
the run stopped: Trainer restores the draft, optimizer, scheduler and step, and skips the queries
already served (the stream is read in order); this module restores the alpha history and the
buffer, so a resumed run logs the same metrics as an uninterrupted one (the metrics callback drops
entries logged after the checkpoint).
"""

from __future__ import annotations

import copy
import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import SequentialSampler
from transformers import PreTrainedModel, Trainer, TrainerCallback

from osd.conversations import GROUP_FIELDS
from osd.distill.data import pad
from osd.distill.losses import Divergence
from osd.distill.trainer import DistillTrainer
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
from osd.spec import SpecOutput, SpeculativeDecoder
from osd.spec.cached_model import accepts_logits_to_keep
from osd.spec.draft_vocab import compact_logits

logger = logging.getLogger(__name__)

ONLINE_STATE_NAME = "online_state.json"
ONLINE_BUFFER_NAME = "online_buffer.pt"
SHARED_DRAFT = "shared"  # the buffer key when a single draft serves every query
FLOAT16_MAX = 6.0e4


@dataclass
class BufferedQuery:
    """One served query as the update needs it (all tensors on the CPU)."""

    input_ids: torch.Tensor  # [T] prompt (decoder-only) or encoder input (encoder-decoder)
    generated_ids: torch.Tensor  # [N]
    positions: torch.Tensor  # [W] indices into generated_ids where the loss counts
    target_logits: torch.Tensor  # [W, V] the target's logits that produced generated_ids[positions]
    replayed: bool = False  # kept from an earlier update (--online_replay_queries)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in asdict(self).values() if isinstance(t, torch.Tensor))


def buffer_query(
    input_ids: torch.Tensor, out: SpecOutput, loss_positions: str, dtype: torch.dtype = torch.float16
) -> BufferedQuery:
    """Keep what the update needs from one served query; input_ids [1, T], out from the engine."""
    if out.target_logits is None:
        raise ValueError(
            "the online buffer needs the target's logits: call generate(..., return_target_logits=True)"
        )
    num_generated = out.generated_ids.shape[1]
    if loss_positions == "wrong":
        positions = torch.tensor(out.wrong_positions, dtype=torch.long)
    elif loss_positions == "all":
        positions = torch.arange(num_generated)
    else:
        raise ValueError(f"--online_loss_positions must be 'wrong' or 'all', got {loss_positions!r}")
    rows = out.target_logits[positions.to(out.target_logits.device)]  # [W, V]
    return BufferedQuery(
        input_ids=input_ids[0].cpu(),
        generated_ids=out.generated_ids[0].cpu(),
        positions=positions,
        target_logits=stored_logits(rows, dtype),
    )


def stored_logits(rows: torch.Tensor, dtype: torch.dtype = torch.float16) -> torch.Tensor:
    """Target logits rows [W, V] as the buffer keeps them: on the CPU in `dtype` (float16 clamped to
    +-FLOAT16_MAX, so nothing overflows)."""
    if dtype == torch.float16:
        rows = rows.clamp(-FLOAT16_MAX, FLOAT16_MAX)
    return rows.to("cpu", dtype)


def logits_at(model: PreTrainedModel, query: BufferedQuery) -> torch.Tensor:
    """`model`'s logits [W, V'] that predict generated_ids[positions]: one forward pass (the student's
    at the update; the target's, teacher-forced, where serving kept no target logits: osd.serving)."""
    device = model.device
    generated = query.generated_ids.to(device)
    if model.config.is_encoder_decoder:
        start = torch.tensor([model.config.decoder_start_token_id], device=device)
        decoder_in = torch.cat([start, generated[:-1]])[None]  # [1, N]: row i predicts generated[i]
        encoder_in = query.input_ids[None].to(device)
        logits = model(input_ids=encoder_in, decoder_input_ids=decoder_in, use_cache=False).logits[0]
        return logits[query.positions.to(device)]
    seq = torch.cat([query.input_ids.to(device), generated])[
        None, :-1
    ]  # [1, T + N - 1]: row j predicts S[j + 1]
    rows = query.input_ids.shape[0] - 1 + query.positions.to(device)  # [W]
    if accepts_logits_to_keep(model):  # the LM head only where the loss counts: the update's largest cost
        return model(input_ids=seq, use_cache=False, logits_to_keep=rows).logits[0]
    return model(input_ids=seq, use_cache=False).logits[0, rows]


def distillation_loss(
    model: PreTrainedModel,
    buffer: Sequence[BufferedQuery],
    divergence: Divergence,
    temperature: float = 1.0,
    backward: Callable[[torch.Tensor], None] | None = None,
) -> torch.Tensor | None:
    """Mean divergence over every loss position of the buffer (token-weighted across queries).

    With `backward`, each query's share of the loss is back-propagated as soon as it is computed,
    so only one sequence's activations are alive at a time; returns the detached total. Returns
    None when the buffer holds no loss position (e.g. the draft was right everywhere).
    """
    counted = sum(len(q.positions) for q in buffer)
    if counted == 0:
        return None
    total = torch.zeros((), device=model.device)
    for query in buffer:
        if len(query.positions) == 0:
            continue
        target = query.target_logits.to(model.device)  # [W, V]
        with compact_logits(model):  # a sub-vocabulary head: [W, V'], the divergence gathers the target's V'
            student = logits_at(model, query)[:, : target.shape[-1]]  # [W, V]: drop padding rows
        share = divergence(student, target, None, temperature=temperature, reduction="sum") / counted
        if backward is not None:
            backward(share)
            share = share.detach()
        total = total + share
    return total


@dataclass
class QueryStats:
    """Acceptance of one served query."""

    alpha_sum: float
    num_proposed: int
    accepted: int  # accepted draft tokens, summed over verification steps
    steps: int  # verification steps
    groups: dict[str, str]  # dataset / topic / language of the record
    num_generated: int = 0
    wall_time_s: float = 0.0  # the engine's time serving this query (the update's is apart)

    @classmethod
    def of(cls, out: SpecOutput, groups: dict[str, str]) -> QueryStats:
        return cls(
            out.alpha_sum, out.num_proposed, sum(out.accepted_lengths), len(out.accepted_lengths), groups,
            out.generated_ids.shape[1], out.wall_time_s,
        )  # fmt: skip


def pooled_alpha(queries: Sequence[QueryStats]) -> float:
    """Token-weighted alpha over the queries (nan when nothing was proposed: no draft served them)."""
    proposed = sum(q.num_proposed for q in queries)
    return sum(q.alpha_sum for q in queries) / proposed if proposed else math.nan


@dataclass
class OnlineState:
    """Everything the online loop accumulates besides the model and optimizer; saved with checkpoints."""

    queries: list[QueryStats] = field(default_factory=list)
    logged: int = 0  # queries[:logged] are already in a log entry
    updates: int = 0
    losses: list[float] = field(default_factory=list)  # update losses not yet logged
    serve_time_s: float = 0.0
    # updates' time on the serving path (a background update: the wait for it, the step, the swap)
    update_time_s: float = 0.0
    background_update_time_s: float = 0.0  # --online_background_update: the worker's forward and backward
    max_buffer_bytes: int = 0
    alpha_sum: float = 0.0  # running totals for the cumulative alpha
    num_proposed: int = 0

    def add(self, stats: QueryStats) -> None:
        self.queries.append(stats)
        self.alpha_sum += stats.alpha_sum
        self.num_proposed += stats.num_proposed

    def metrics(self, window: int) -> dict[str, float]:
        """The log entry for the queries since the last one (keys: osd.metric_keys); marks them logged."""
        recent = self.queries[self.logged :]
        steps = sum(q.steps for q in recent)
        logs = {
            ALPHA: pooled_alpha(recent),
            ALPHA_WINDOW: pooled_alpha(self.queries[-window:]),
            ALPHA_CUMULATIVE: self.alpha_sum / self.num_proposed if self.num_proposed else math.nan,
            ACCEPTED_LENGTH: sum(q.accepted for q in recent) / steps if steps else math.nan,
            "proposed": sum(q.num_proposed for q in recent),  # the weight of "alpha" when aggregating entries
            QUERIES_SERVED: len(self.queries),
            "online_updates": self.updates,
            "serve_time_s": self.serve_time_s,  # the engine's time on every query so far
            UPDATE_TIME_SHARE: self.update_time_s / self.serve_time_s if self.serve_time_s else 0.0,
            BACKGROUND_UPDATE_SHARE: self.background_update_time_s / self.serve_time_s
            if self.serve_time_s
            else 0.0,
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
        queries = [QueryStats(**q) for q in data.pop("queries")]
        return cls(queries=queries, **data)


class _OptimizerTimer(TrainerCallback):
    """Adds the optimizer step of update queries to the update time (Trainer runs it after training_step)."""

    def __init__(self, trainer: OnlineDistillTrainer) -> None:
        self.trainer, self.start = trainer, None

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.start = time.perf_counter() if self.trainer._updated_this_step else None

    def on_optimizer_step(self, args, state, control, **kwargs):
        if self.start is not None:
            self.trainer.online.update_time_s += time.perf_counter() - self.start


class OnlineDistillTrainer(DistillTrainer):
    """DistillTrainer for --mode online: the train dataset is the query stream, read in order.

    Overrides: the sampler (sequential), `training_step` (serve, buffer, update), logging of the
    online metrics every --online_eval_interval queries, and checkpoint save/resume of the online
    state. Everything else (optimizer, scheduler, evaluation of alpha on the eval set, callbacks,
    report_to) is DistillTrainer's.
    """

    def __init__(self, *args, buffer_dtype: torch.dtype = torch.float16, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        a = self.args
        for flag, value in (("gradient_accumulation_steps", a.gradient_accumulation_steps),
                            ("world_size", a.world_size)):  # fmt: skip
            if value != 1:
                raise ValueError(
                    f"online mode serves its stream in order on one process: --{flag} must be 1, got {value} "
                    "(serve several queries per step with --per_device_train_batch_size)"
                )
        if a.max_steps <= 0 and a.num_train_epochs != 1:
            logger.warning(
                "online mode serves the stream %s times (--num_train_epochs %s); pass --num_train_epochs 1 to serve it once",
                a.num_train_epochs,
                a.num_train_epochs,
            )
        self.buffer_dtype = buffer_dtype
        self.online = OnlineState()
        self.buffers: dict[str, list[BufferedQuery]] = {}
        self._updated_this_step = False
        self._serving: dict[str, PreTrainedModel] = {}  # --draft_serving_dtype copies, per buffer key
        self._stale: set[str] = set()  # keys whose draft was updated since its copy was made
        self._worker: ThreadPoolExecutor | None = None  # --online_background_update
        self.add_callback(_OptimizerTimer(self))

    # ---- the loop -------------------------------------------------------------------------

    def training_step(
        self, model: nn.Module, inputs: dict[str, Any], num_items_in_batch: torch.Tensor | int | None = None
    ) -> torch.Tensor:
        """Serve the step's queries (--per_device_train_batch_size of them, in stream order), buffer each,
        and distil on a draft's buffer once it holds --online_update_interval queries."""
        queries = self._queries(inputs)  # B x ([1, T_i] prompt, groups)
        routes = [self._route(model, ids, groups) for ids, groups in queries]  # B x (key, draft)
        # the serving copies are refreshed before a background update starts on the drafts
        serving = {key: self._serving_draft(key, draft) for key, draft in routes}
        background = self._start_due_updates() if self.args.online_background_update else None
        outs = self._serve_routes(serving, [key for key, _ in routes], [ids for ids, _ in queries])
        for out, (_, groups) in zip(outs, queries, strict=True):
            self.online.add(QueryStats.of(out, groups))
        self._updated_this_step = False
        loss = torch.zeros((), device=self.args.device)
        if background is not None:
            loss = self._finish_background_update(background)
        if not self._update_reachable(len(queries)):  # a static run (Standard SD): nothing to keep
            return loss
        for (key, _), (ids, _), out in zip(routes, queries, outs, strict=True):
            query = buffer_query(ids, out, self.args.online_loss_positions, self.buffer_dtype)
            self.buffers.setdefault(key, []).append(query)
        self.online.max_buffer_bytes = max(self.online.max_buffer_bytes, self._buffer_bytes())
        due = self._due_keys()
        last_step = self.state.global_step + 1 >= self.state.max_steps
        if not due or (self.args.online_background_update and not last_step):
            return loss  # a due background update starts with the next step
        self._updated_this_step = True  # (the stream's last update has no step to overlap: it runs here)
        start = time.perf_counter()
        losses = self._backward_due({key: self._take_for_update(key) for key in due})
        self.online.update_time_s += time.perf_counter() - start
        # Trainer steps the optimizer after this: the serving copies are out of date
        self._stale.update(losses)
        return [self._count_update(loss) for loss in losses.values()][-1]

    def _update_reachable(self, batch: int) -> bool:
        """Whether this run updates at all: --online_update_interval 0 is static (Standard SD), and so,
        for its memory, is an interval the stream never reaches (the reference's 100000)."""
        interval = self.args.online_update_interval
        return 0 < interval <= self.state.max_steps * batch

    def _due_keys(self) -> list[str]:
        """Buffers holding --online_update_interval queries served since their last update."""
        interval = self.args.online_update_interval
        return [k for k, b in self.buffers.items() if sum(not q.replayed for q in b) >= interval]

    def _take_for_update(self, key: str) -> list[BufferedQuery]:
        """The buffer an update trains on; what stays for the next one: its last --online_replay_queries."""
        buffer, keep = self.buffers.pop(key), self.args.online_replay_queries
        if keep:
            self.buffers[key] = [replace(q, replayed=True) for q in buffer[-keep:]]
        return buffer

    def _serving_draft(self, key: str, draft: PreTrainedModel) -> PreTrainedModel:
        """The draft as served: itself, or its copy in --draft_serving_dtype, refreshed after its updates.

        With --online_background_update always a copy: the worker thread trains the draft itself.
        """
        name = self.args.draft_serving_dtype
        dtype = getattr(torch, name) if name is not None else draft.dtype
        if dtype == draft.dtype and not self.args.online_background_update:
            return draft
        start = time.perf_counter()
        if key not in self._serving:
            self._serving[key] = copy.deepcopy(draft).to(dtype).eval()
        elif key in self._stale:
            self._serving[key].load_state_dict(draft.state_dict())  # casts to the copy's dtype
        else:
            return self._serving[key]
        self._stale.discard(key)
        self.online.update_time_s += time.perf_counter() - start  # part of what an update costs
        return self._serving[key]

    def _serve_routes(
        self, serving: dict[str, PreTrainedModel], keys: list[str], prompts: list[torch.Tensor]
    ) -> list[SpecOutput]:
        """Each query (prompt [1, T_i]) served by its route's draft; the queries of one route as one batch."""
        outs: list[SpecOutput | None] = [None] * len(prompts)
        for key, draft in serving.items():
            rows = [i for i, k in enumerate(keys) if k == key]
            for i, out in zip(rows, self._serve(draft, [prompts[i] for i in rows]), strict=True):
                outs[i] = out
        return outs

    def _serve(self, draft: PreTrainedModel, prompts: list[torch.Tensor]) -> list[SpecOutput]:
        """Speculative decoding of queries (prompts [1, T_i]) with the current draft, keeping the target's
        logits: `generate` for one query, `generate_batch` (left-padded) for several."""
        start = time.perf_counter()
        draft.eval()
        generator = None
        if self.args.eval_temperature > 0:  # seeded per step so that a resumed run samples the same
            generator = torch.Generator(draft.device).manual_seed(self.args.seed + len(self.online.queries))
        decoder = SpeculativeDecoder(draft, self.teacher_model, self.args.max_propose_num, self.gamma_policy)
        options = {"max_new_tokens": self.args.max_new_tokens, "temperature": self.args.eval_temperature,
                   "eos_token_id": self.eos_token_id, "generator": generator, "return_target_logits": True}  # fmt: skip
        if len(prompts) == 1:
            outs = [decoder.generate(prompts[0], **options)]
        else:
            ids, mask = pad([p[0].tolist() for p in prompts], self.pad_token_id, "left")
            outs = decoder.generate_batch(ids.to(draft.device), mask.to(draft.device), **options)
        self.online.serve_time_s += time.perf_counter() - start
        return outs

    def _backward_due(self, due: dict[str, list[BufferedQuery]]) -> dict[str, torch.Tensor | None]:
        """The updates of the due buffers: --online_steps_per_update - 1 optimizer steps here, then the last
        backward, whose grads the caller's optimizer step uses. Drafts of different routes have disjoint
        parameters: each step back-propagates every due buffer, then steps once (as Trainer does)."""
        for _ in range(self.args.online_steps_per_update - 1):
            for key, buffer in due.items():
                self._backward(self._draft_for(key), buffer)
            self._optimizer_step()
        return {key: self._backward(self._draft_for(key), buffer) for key, buffer in due.items()}

    def _optimizer_step(self) -> None:
        """Clip (--max_grad_norm), step and clear the grads, as Trainer's step does (the scheduler stays)."""
        model = self.accelerator.unwrap_model(self.model)
        if self.args.max_grad_norm > 0:
            self._clip_grad_norm(model)
        self.optimizer.step()
        model.zero_grad()

    def _backward(self, draft: PreTrainedModel, buffer: list[BufferedQuery]) -> torch.Tensor | None:
        """The buffer's distillation loss, back-propagated into the draft's grads (None: no loss position)."""
        draft.train()
        # autocast is per thread: entered in the thread that computes
        with self.compute_loss_context_manager():
            return distillation_loss(
                draft,
                buffer,
                self.divergence,
                self.args.distill_temperature,
                backward=self.accelerator.backward,
            )

    def _count_update(self, loss: torch.Tensor | None) -> torch.Tensor:
        self.online.updates += 1
        if loss is None:  # nothing was wrong: no gradient, the optimizer step leaves the draft as it is
            return torch.zeros((), device=self.args.device)
        self.online.losses.append(loss.item())
        return loss.to(self.args.device)

    # ---- --online_background_update ---------------------------------------------------------

    def _worker_pool(self) -> ThreadPoolExecutor:
        if self._worker is None:
            self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="osd-online-update")
        return self._worker

    def _start_due_updates(self) -> Future | None:
        """Start, in the worker thread, the updates of the buffers that filled at the previous step."""
        due = {key: self._take_for_update(key) for key in self._due_keys()}
        return self._worker_pool().submit(self._background_backward, due) if due else None

    def _background_backward(
        self, due: dict[str, list[BufferedQuery]]
    ) -> tuple[dict[str, torch.Tensor | None], float]:
        """Worker thread: the due updates up to their last optimizer step (only the worker touches the drafts
        and the optimizer meanwhile: the serving copies serve)."""
        start = time.perf_counter()
        losses = self._backward_due(due)
        return losses, time.perf_counter() - start

    def _finish_background_update(self, job: Future) -> torch.Tensor:
        """Wait for the background updates, step the optimizer on their grads, mark the serving copies stale."""
        start = time.perf_counter()
        losses, compute_s = job.result()  # the wait, if any, is on the serving path
        self.online.background_update_time_s += compute_s
        self._optimizer_step()  # Trainer's own step after this one finds no grads and changes nothing
        self._stale.update(losses)
        self.online.update_time_s += time.perf_counter() - start
        return [self._count_update(loss) for loss in losses.values()][-1]

    # ---- hooks that routing.py overrides ---------------------------------------------------

    def _draft_for(self, key: str) -> PreTrainedModel:
        """The draft that buffer `key` trains (the one shared draft here)."""
        return self.accelerator.unwrap_model(self.model)

    def _route(
        self, model: nn.Module, input_ids: torch.Tensor, groups: dict[str, str]
    ) -> tuple[str, PreTrainedModel]:
        """The buffer key and the draft that serves a query (one shared draft here)."""
        return SHARED_DRAFT, self.accelerator.unwrap_model(model)

    # ---- inputs, sampler, logging -----------------------------------------------------------

    def _queries(self, inputs: dict[str, Any]) -> list[tuple[torch.Tensor, dict[str, str]]]:
        """Each collated record's unpadded prompt ids [1, T_i] and grouping fields, in stream order."""
        ids = inputs["prompt_ids"]
        ids = ids if isinstance(ids, torch.Tensor) else torch.tensor(ids)
        ids = ids.view(1, -1) if ids.dim() == 1 else ids  # [B, P]
        mask = inputs.get("prompt_attention_mask")
        mask = torch.ones_like(ids) if mask is None else mask.view(ids.shape).to(ids.device)
        queries = []
        for i in range(ids.shape[0]):
            groups = {}
            for name in GROUP_FIELDS:
                value = inputs.get(name)
                if isinstance(value, (list, tuple)):
                    value = value[i] if i < len(value) else None
                if isinstance(value, str):
                    groups[name] = value
            queries.append(
                (ids[i, mask[i].bool()][None], groups)
            )  # drop padding, wherever the collator put it
        return queries

    def get_batch_samples(self, epoch_iterator, num_batches: int, device: torch.device) -> tuple[list, None]:
        """The next query, as collated: no training batch is sampled (DistillTrainer's offline step)."""
        batch_samples, _ = Trainer.get_batch_samples(self, epoch_iterator, num_batches, device)
        return batch_samples, None

    def _get_train_sampler(self, train_dataset=None) -> torch.utils.data.Sampler:
        """The stream is served in its order (the reference's loader shuffled it: a bug)."""
        return SequentialSampler(train_dataset if train_dataset is not None else self.train_dataset)

    def _buffer_bytes(self) -> int:
        return sum(q.nbytes for buffer in self.buffers.values() for q in buffer)

    def _maybe_log_save_evaluate(self, tr_loss, grad_norm, model, trial, epoch, *args, **kwargs) -> None:
        # the online entry goes first, so a checkpoint saved at this step already contains it
        pending = len(self.online.queries) > self.online.logged
        if pending and (
            self.state.global_step % self.args.online_eval_interval == 0 or self.control.should_training_stop
        ):
            should_log = self.control.should_log  # on_log clears it: keep Trainer's own log of this step
            self.log(self.online.metrics(self.args.online_alpha_window))
            self.control.should_log = should_log
        super()._maybe_log_save_evaluate(tr_loss, grad_norm, model, trial, epoch, *args, **kwargs)

    # ---- checkpoint and resume --------------------------------------------------------------

    def _save_run_state(self, folder: Path) -> None:
        super()._save_run_state(folder)
        if self.args.should_save:
            (folder / ONLINE_STATE_NAME).write_text(json.dumps(self.online.to_json()))
            torch.save(
                {k: [asdict(q) for q in b] for k, b in self.buffers.items()}, folder / ONLINE_BUFFER_NAME
            )

    def _load_run_state(self, folder: Path | None) -> None:
        """DistillTrainer's, plus the online state: fresh, or restored from the checkpoint resumed."""
        super()._load_run_state(folder)
        if folder is None:
            self.online, self.buffers = OnlineState(), {}
        else:
            self._load_online_state(folder)

    def _load_online_state(self, folder: Path) -> None:
        state_file, buffer_file = folder / ONLINE_STATE_NAME, folder / ONLINE_BUFFER_NAME
        if not state_file.exists() or not buffer_file.exists():
            raise ValueError(
                f"{folder}: not an online checkpoint ({ONLINE_STATE_NAME} and {ONLINE_BUFFER_NAME} missing); "
                "resume an online run from a checkpoint it wrote"
            )
        self.online = OnlineState.from_json(json.loads(state_file.read_text()))
        saved = torch.load(buffer_file, weights_only=True)
        self.buffers = {k: [BufferedQuery(**q) for q in b] for k, b in saved.items()}
        assert self.online.logged <= len(self.online.queries), (self.online.logged, len(self.online.queries))
