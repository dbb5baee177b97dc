"""`OnlineDistillTrainer`: --mode online, HF Trainer driving the one online loop (`osd.online`).

The train dataset is the query stream, read in order. The model is the drafter (--drafter): a draft model, or an
EAGLE-3 head (`osd.spec.eagle3`) distilled by `osd.online.head_loss` from the target's states and logits kept at
verification; a head's folders (the run's and its checkpoints') are in the speculators format (`save_head`).
Each Trainer step is one turn of the loop
(`OnlineLoop.step`) for --per_device_train_batch_size queries (the paper's setting is 1): serve them
with the osd engine (`osd.online.engine_server`), record their acceptance, buffer them, and update
the draft when its buffer is due (`osd.online.updater`) with Trainer's optimizer, on Trainer's
autocast and backward. The update takes all its --online_steps_per_update optimizer steps itself;
Trainer's own step after it finds no gradient (torch optimizers skip parameters whose grad is None),
so the draft changes only at updates, while the LR scheduler counts Trainer steps (queries).

Logging: the loop's entry (osd.metric_keys) every --online_eval_interval queries, from a callback
at the step's end, before Trainer saves a checkpoint at that step. Evaluation of alpha on the eval
set, callbacks and report_to are DistillTrainer's.

Resume. A checkpoint also holds `online_state.json` (the per-query acceptance history, what is
logged, update counts and timings) and `online_buffer.pt` (the buffered queries), committed with
Trainer's own files (osd.distill.run_dir), so `--resume_from_checkpoint` continues exactly where the
run stopped: Trainer restores the draft, optimizer, scheduler and step and skips the queries already
served; this module restores the loop's state and buffer.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import SequentialSampler
from transformers import PreTrainedModel, TrainerCallback

from osd.conversations import GROUP_FIELDS
from osd.distill.trainer import DistillTrainer
from osd.online.buffer import distillation_loss
from osd.online.engine_server import EngineServer
from osd.online.head_loss import head_distillation_loss
from osd.online.loop import SHARED_DRAFT, OnlineLoop, Query
from osd.online.records import OnlineState
from osd.online.updater import DraftUpdater
from osd.spec.eagle3 import Eagle3Head, load_head, save_head

logger = logging.getLogger(__name__)

ONLINE_STATE_NAME = "online_state.json"
ONLINE_BUFFER_NAME = "online_buffer.pt"


class _OnlineLog(TrainerCallback):
    """Logs the loop's entry when due, at the step's end (before Trainer's checkpoint of that step)."""

    def __init__(self, trainer: OnlineDistillTrainer) -> None:
        self.trainer = trainer

    def on_step_end(self, args, state, control, **kwargs):
        loop = self.trainer.loop
        if loop is None or not loop.state.log_due(args.online_eval_interval, control.should_training_stop):
            return control
        should_log = control.should_log  # Trainer.log clears it: keep Trainer's own log of this step
        self.trainer.log(loop.entry())
        control.should_log = should_log
        return control


class OnlineDistillTrainer(DistillTrainer):
    """DistillTrainer for --mode online. `loop` (osd.online.OnlineLoop) holds the run's records once
    training starts: `loop.state.queries`, `loop.state.updates`, the update time shares."""

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
        if (a.drafter == "head") != isinstance(self.accelerator.unwrap_model(self.model), Eagle3Head):
            kind = "an Eagle3Head (osd.models.load_head_drafter)" if a.drafter == "head" else "a draft model"
            raise ValueError(f"--drafter {a.drafter} trains {kind}, got {type(self.model).__name__}")
        self.buffer_dtype = buffer_dtype
        self.loop: OnlineLoop | None = None
        self._restored: tuple[OnlineState, dict] | None = None
        self.add_callback(_OnlineLog(self))

    # ---- what routing.py overrides -----------------------------------------------------------

    def drafts(self) -> Mapping[str, PreTrainedModel]:
        """The drafts by route (the one shared draft here)."""
        return {SHARED_DRAFT: self.accelerator.unwrap_model(self.model)}

    def route(self, prompt_ids: list[int], groups: dict[str, str]) -> str:
        """The route (draft) that serves a query."""
        return SHARED_DRAFT

    # ---- the loop ----------------------------------------------------------------------------

    def training_step(
        self, model: nn.Module, inputs: dict[str, Any], num_items_in_batch: torch.Tensor | int | None = None
    ) -> torch.Tensor:
        """One turn of the online loop for the step's queries, in stream order."""
        loop = self.loop or self._start_loop()
        queries = [Query(ids, groups, self.route(ids, groups)) for ids, groups in self._queries(inputs)]
        loop.step(queries, last=self.state.global_step + 1 >= self.state.max_steps)
        loss = loop.last_loss
        return (
            torch.zeros((), device=self.args.device) if loss is None else loss.detach().to(self.args.device)
        )

    def _start_loop(self) -> OnlineLoop:
        a = self.args
        state, buffers = self._restored or (OnlineState(), {})
        server = EngineServer(
            self.teacher_model, a.max_propose_num, a.max_new_tokens, self.eos_token_id, self.pad_token_id,
            a.eval_temperature, a.seed, self.gamma_policy, self.buffer_dtype,
        )  # fmt: skip
        # --online_update_interval 0 is static (Standard SD), and so, for its memory, is an interval the stream
        # never reaches (the reference's 100000): nothing is buffered
        batch = a.per_device_train_batch_size
        learns = 0 < a.online_update_interval <= self.state.max_steps * batch
        updater = DraftUpdater(
            self.drafts(), self._loss, self._optimizer_step, a, state, learns,
            backward=self.accelerator.backward, compute_context=self.compute_loss_context_manager,
        )  # fmt: skip
        updater.buffers.load_state_dict(buffers)
        self.loop = OnlineLoop(server, updater, a)
        return self.loop

    def _loss(self, draft: nn.Module, buffer: list, backward) -> torch.Tensor | None:
        a = self.args
        if isinstance(draft, Eagle3Head):
            return head_distillation_loss(
                draft, buffer, backward, embed=self.teacher_model.get_input_embeddings(), divergence=self.divergence,
                temperature=a.distill_temperature, rejected_weight=a.online_rejected_weight,
            )  # fmt: skip
        return distillation_loss(draft, buffer, self.divergence, a.distill_temperature, backward)

    def _optimizer_step(self) -> None:
        """Clip (--max_grad_norm), step and clear the grads, as Trainer's step does (the scheduler stays)."""
        model = self.accelerator.unwrap_model(self.model)
        if self.args.max_grad_norm > 0:
            self.accelerator.clip_grad_norm_(model.parameters(), self.args.max_grad_norm)
        self.optimizer.step()
        model.zero_grad()

    def _queries(self, inputs: dict[str, Any]) -> list[tuple[list[int], dict[str, str]]]:
        """Each collated record's unpadded prompt ids and grouping fields, in stream order."""
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
            queries.append((ids[i, mask[i].bool()].tolist(), groups))  # padding dropped, wherever it is
        return queries

    def _get_train_sampler(self, train_dataset=None) -> torch.utils.data.Sampler:
        # private, but Trainer's only hook for the sampler (the public alternative re-implements
        # get_train_dataloader): the stream is served in its order (the reference shuffled it: a bug)
        return SequentialSampler(train_dataset if train_dataset is not None else self.train_dataset)

    # ---- checkpoint and resume ---------------------------------------------------------------

    # private, but where Trainer writes a model folder (save_model and every checkpoint): it writes a bare state dict
    # for a model that is not a PreTrainedModel, which a head's save then replaces
    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        super()._save(output_dir, state_dict)
        head = self.accelerator.unwrap_model(self.model)
        if isinstance(head, Eagle3Head) and self.args.should_save:
            save_head(head, output_dir or self.args.output_dir, self.teacher_model, self.args.max_propose_num)

    # private, but where Trainer reads a checkpoint's weights: a head's folder is read as `load_head` reads it (a
    # full-vocabulary head is saved without its mapping, which Trainer would take for missing weights)
    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: nn.Module | None = None) -> None:
        head = self.accelerator.unwrap_model(model or self.model)
        if not isinstance(head, Eagle3Head):
            return super()._load_from_checkpoint(resume_from_checkpoint, model)
        head.load_state_dict(load_head(resume_from_checkpoint).state_dict())

    def _save_run_state(self, folder: Path) -> None:
        super()._save_run_state(folder)
        if self.args.should_save and self.loop is not None:
            (folder / ONLINE_STATE_NAME).write_text(json.dumps(self.loop.state.to_json()))
            torch.save(self.loop.updater.buffers.state_dict(), folder / ONLINE_BUFFER_NAME)

    def _load_run_state(self, folder: Path | None) -> None:
        """DistillTrainer's, plus the loop's state: fresh, or restored from the checkpoint resumed."""
        super()._load_run_state(folder)
        self.loop, self._restored = None, None
        if folder is not None:
            self._restored = self._read_online_state(folder)

    @staticmethod
    def _read_online_state(folder: Path) -> tuple[OnlineState, dict]:
        state_file, buffer_file = folder / ONLINE_STATE_NAME, folder / ONLINE_BUFFER_NAME
        if not state_file.exists() or not buffer_file.exists():
            raise ValueError(
                f"{folder}: not an online checkpoint ({ONLINE_STATE_NAME} and {ONLINE_BUFFER_NAME} missing); "
                "resume an online run from a checkpoint it wrote"
            )
        state = OnlineState.from_json(json.loads(state_file.read_text()))
        assert state.logged <= len(state.queries), (state.logged, len(state.queries))
        return state, torch.load(buffer_file, weights_only=True)
