"""DistillTrainer: `transformers.Trainer` that distils the student (draft) from a frozen teacher (target).

What it changes in Trainer, and nothing else (optimizers, schedulers, bf16/tf32, what a checkpoint
holds, accelerate/DeepSpeed and `report_to` are inherited):
- `get_batch_samples`: turns each collated micro-batch of prompts into a training batch whose
  response tokens come from `--sample_source` (generation happens here, before the forward
  passes, so the number of response tokens of the whole optimizer step is known), and counts
  those tokens as `num_items_in_batch`;
- `compute_loss`: student and teacher forward passes, the `--kl_method` divergence on response
  tokens only, summed and divided by `num_items_in_batch` (so gradient accumulation gives the
  same update as one big batch);
- `evaluate`: the acceptance rate of speculative decoding with the student as draft (osd.spec),
  not a loss. With `eval_on_start` (default on) it also runs before the first step: "Standard" SD;
- `--report_to wandb`: osd.distill.callbacks.OsdWandbCallback in place of HF's WandbCallback (the run's
  models, data and method in its config, a default run name, queries served as the online metrics' x-axis);
- checkpoints: written to a staging folder with the sampling generator's state and the sum of the
  run's step losses, and committed atomically (osd.distill.run_dir); `train` resumes only complete
  ones, takes `True`/`'last'` for the newest, and restores (does not train) a checkpoint already at
  max_steps;
- `train_loss` (the end-of-train summary): the mean step loss over the whole run, also after a
  resume (Trainer's is over the steps of its own train() call).

Limits: the student generates its samples unsharded (DDP and device_map teachers work; DeepSpeed
ZeRO-3 would need its parameters gathered for generation). Every process measures alpha on the
whole eval set.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import Dataset
from transformers import PreTrainedModel, Trainer, TrainerState
from transformers.integrations import WandbCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, TrainOutput, rotate_checkpoints, speed_metrics

from osd.distill.callbacks import MetricsJsonlCallback, OsdWandbCallback, run_config
from osd.distill.checkpoints import (
    STAGING_DIR,
    Checkpoint,
    CheckpointError,
    commit_checkpoint,
    resolve_checkpoint,
)
from osd.distill.config import DistillTrainingArguments
from osd.distill.data import make_train_batch, responses_from_labels, unpad
from osd.distill.losses import get_divergence
from osd.distill.sources import SamplingConfig, sample_responses
from osd.distill.subvocab import student_draft_vocab, train_tied_rows_only
from osd.metric_keys import group_alphas
from osd.model_checks import check_vocabularies
from osd.spec import AcceptanceStats, GammaPolicy, SpeculativeDecoder
from osd.spec.draft_vocab import compact_logits, restrict_divergence
from osd.spec.eagle3 import Eagle3Head

logger = logging.getLogger(__name__)

MODEL_INPUTS = ("input_ids", "attention_mask", "decoder_input_ids", "decoder_attention_mask")
# in a checkpoint: {"loss_sum", "steps"}, the step losses summed over steps 1..steps
LOSS_FILE = "train_loss.json"


class DistillTrainer(Trainer):
    """Trainer for `model` (the student) distilled from `teacher_model` (frozen, eval mode; it may
    be spread over other devices with a device_map: its logits are moved to the student's device)."""

    # compute_loss already divides by the step's token count (num_items_in_batch)
    loss_is_scaled_for_ga = True

    def __init__(
        self,
        model: PreTrainedModel,
        teacher_model: PreTrainedModel,
        args: DistillTrainingArguments,
        run_identity: dict | None = None,
        run_info: dict | None = None,
        gamma_policy: GammaPolicy | None = None,
        **kwargs,
    ) -> None:
        """run_info: what the entry point knows of the run for wandb's config and run name (data paths,
        stream: osd.distill.callbacks.run_config); the model paths default to the models' name_or_path.
        gamma_policy: with --max_propose_num auto, the policy every decoder shares (default: a fresh
        `GammaPolicy`, which measures its costs at its first step)."""
        super().__init__(model=model, args=args, **kwargs)
        self.run_identity = run_identity or {}  # recorded in every checkpoint (osd.distill.run_dir)
        check_vocabularies(model, teacher_model, self.processing_class)
        # the student's head over --draft_vocab_size tokens (or the one it was saved with); losses on those. An
        # EAGLE-3 head's loss restricts itself to the head's own vocabulary (osd.online.head_loss).
        self.draft_vocab = (
            None if isinstance(model, Eagle3Head) else student_draft_vocab(model, args, self.processing_class)
        )
        # both before Trainer builds its optimizer (over the trainable weights only)
        if args.freeze_embeddings:
            model.get_input_embeddings().requires_grad_(False)
        self.tied_rows = train_tied_rows_only(model) if args.draft_vocab_rows_only else None
        self.teacher_model = teacher_model.eval().requires_grad_(False)
        if not getattr(teacher_model, "hf_device_map", None):
            self.teacher_model.to(args.device)
        self.is_encoder_decoder = bool(model.config.is_encoder_decoder)
        self.divergence = restrict_divergence(get_divergence(args.kl_method, args.jsd_beta), self.draft_vocab)
        tokenizer = self.processing_class
        pad_id = tokenizer.pad_token_id if tokenizer is not None else model.config.pad_token_id
        eos_id = tokenizer.eos_token_id if tokenizer is not None else model.config.eos_token_id
        if pad_id is None:
            raise ValueError("the tokenizer has no pad token; set one (osd.train uses unk or eos)")
        self.pad_token_id: int = pad_id
        self.eos_token_id: int | list[int] | None = eos_id
        self.sampling = SamplingConfig(args.max_new_tokens, args.sample_temperature, eos_id, pad_id)
        # sample sources draw from their own generator: runs are reproducible for a given --seed
        self.sample_generator = torch.Generator().manual_seed(args.seed)
        # --max_propose_num auto: one policy for every decoder, so that its alpha and costs carry over
        if gamma_policy is not None and args.max_propose_num != "auto":
            raise ValueError(f"a gamma_policy needs --max_propose_num auto, got {args.max_propose_num}")
        self.gamma_policy = (gamma_policy or GammaPolicy()) if args.max_propose_num == "auto" else None
        self.metrics = MetricsJsonlCallback()
        self.add_callback(self.metrics)
        models = {"student_model_path": getattr(model, "name_or_path", None),
                  "teacher_model_path": getattr(teacher_model, "name_or_path", None)}  # fmt: skip
        self._use_osd_wandb(run_config(args, **(models | (run_info or {}))))
        self._staging: Path | None = None  # set while a checkpoint is being written
        # the step losses summed before this train() call (from the checkpoint resumed); None: unknown
        self._loss_before: float | None = 0.0

    def create_optimizer(self, model=None) -> torch.optim.Optimizer:
        """Trainer's optimizer; with --draft_vocab_rows_only each step also writes the trained rows back."""
        optimizer = super().create_optimizer(model)
        if self.tied_rows is not None:
            optimizer.register_step_post_hook(lambda *_: self.tied_rows.write_back())
        return optimizer

    def _use_osd_wandb(self, config: dict) -> None:
        """With --report_to wandb: OsdWandbCallback (config, run name, queries-served axis) in place of HF's."""
        for callback in self.callback_handler.callbacks:
            if type(callback) is WandbCallback:
                self.remove_callback(callback)
                self.add_callback(OsdWandbCallback(config))
                return

    # ---- training ---------------------------------------------------------------------------

    def train(self, resume_from_checkpoint: str | bool | None = None, **kwargs):
        """Trainer.train from step 0, or from a complete checkpoint: a path, or True / 'last' / 'True'
        for the newest complete one in --output_dir. A checkpoint already at max_steps is restored,
        not trained further."""
        checkpoint = resolve_checkpoint(self.args.output_dir, resume_from_checkpoint)
        self._load_run_state(checkpoint.path if checkpoint else None)
        if checkpoint is None:
            self.metrics.resume_lines = None
            return super().train(None, **kwargs)
        # "Standard" SD (eval_on_start) is the undistilled draft: a resumed run measured it already
        self.args.eval_on_start = False
        self.metrics.resume_lines = checkpoint.metrics_lines
        max_steps = self.planned_max_steps()
        if checkpoint.global_step > max_steps:
            raise CheckpointError(
                f"{checkpoint.path} is at step {checkpoint.global_step}, past --max_steps {max_steps}: "
                "resume from an earlier checkpoint, or pass --overwrite_output_dir to start over"
            )
        if checkpoint.global_step == max_steps:
            return self._restore_finished(checkpoint)
        output = super().train(str(checkpoint.path), **kwargs)
        return output._replace(training_loss=output.metrics["train_loss"])  # the whole run's (see log)

    def planned_max_steps(self) -> int:
        """The step at which train() stops, as Trainer computes it from the flags and the data."""
        return self.set_initial_training_values(self.args, self.get_train_dataloader())[-1]

    def _restore_finished(self, checkpoint: Checkpoint) -> TrainOutput:
        """The state of a run whose checkpoint is its last step (Trainer would train one step more)."""
        logger.warning(
            "%s is at max_steps %d: the run is finished, restored without training", checkpoint.path,
            checkpoint.global_step,
        )  # fmt: skip
        self._load_from_checkpoint(str(checkpoint.path))
        self.state = TrainerState.load_from_json(str(checkpoint.path / "trainer_state.json"))
        if self.state.is_world_process_zero:
            self.metrics.restart(self.args, self.state.global_step)
        if self._loss_before is None:  # an older checkpoint: the run's train_loss is unknown
            return TrainOutput(self.state.global_step, None, {})
        # Trainer's end-of-train summary, which the killed run did not log (issue 49: it was missing)
        metrics = speed_metrics("train", time.time(), num_samples=0, num_steps=0)
        metrics |= {"total_flos": self.state.total_flos, "train_loss": 0.0}  # log() makes it the run's mean
        self._total_loss_scalar = 0.0
        self.log(metrics)
        return TrainOutput(self.state.global_step, metrics["train_loss"], metrics)

    def make_training_batch(self, batch: dict) -> dict:
        """Collated prompts (+ data-set answers) -> a training batch with `--sample_source` responses."""
        student = self.accelerator.unwrap_model(self.model)
        dataset_responses = responses_from_labels(batch["labels"]) if "labels" in batch else None
        if self.args.sample_source == "teacher" and dataset_responses is not None:
            return batch
        was_training = student.training
        student.eval()  # no dropout while the student generates
        responses = sample_responses(
            self.args.sample_source,
            student,
            self.teacher_model,
            batch["prompt_ids"],
            batch["prompt_attention_mask"],
            self.sampling,
            mix_ratio=self.args.mix_ratio,
            dataset_responses=dataset_responses,
            generator=self.sample_generator,
        )
        student.train(was_training)
        prompts = unpad(batch["prompt_ids"], batch["prompt_attention_mask"])
        max_length = getattr(self.data_collator, "max_length", None)
        train = make_train_batch(
            prompts,
            responses,
            self.pad_token_id,
            self.is_encoder_decoder,
            getattr(student.config, "decoder_start_token_id", None),
            max_length,
        )
        device = batch["prompt_ids"].device
        return {**batch, **{k: v.to(device) for k, v in train.items()}}

    def get_batch_samples(
        self, epoch_iterator: Iterator, num_batches: int, device: torch.device
    ) -> tuple[list[dict], torch.Tensor | None]:
        """The micro-batches of one optimizer step, sampled, and their total count of response tokens."""
        batch_samples, _ = super().get_batch_samples(epoch_iterator, num_batches, device)
        if self.args.mode == "online":  # the online loop serves the collated queries itself
            return batch_samples, None
        batch_samples = [self.make_training_batch(b) for b in batch_samples]
        if not batch_samples:
            return batch_samples, None
        num_items = sum(b["loss_mask"].sum().to(device) for b in batch_samples)
        if self.args.average_tokens_across_devices and self.args.world_size > 1:
            num_items = self.accelerator.gather(num_items).sum()
        return batch_samples, num_items

    def distill_loss(
        self,
        student_logits: torch.Tensor,
        teacher_logits: torch.Tensor,
        mask: torch.Tensor,
        num_items_in_batch: torch.Tensor | int | None = None,
    ) -> torch.Tensor:
        """The `--kl_method` divergence over masked positions: logits [B, T, V] or [N, V], mask [B, T] or [N].

        With `num_items_in_batch` (counted positions of the whole optimizer step): sum / num_items,
        so accumulated micro-batches add up to the mean over the step. Without: the mean here.
        """
        teacher_logits = teacher_logits.to(student_logits.device)
        kwargs = {"temperature": self.args.distill_temperature}
        if num_items_in_batch is None:
            return self.divergence(student_logits, teacher_logits, mask, **kwargs)
        loss = self.divergence(student_logits, teacher_logits, mask, reduction="sum", **kwargs)
        loss = loss / num_items_in_batch
        if self.args.average_tokens_across_devices and self.args.world_size > 1:
            # num_items counts every process's tokens while DDP averages gradients over processes
            loss = loss * self.accelerator.num_processes
        return loss

    def teacher_logits(self, inputs: dict) -> torch.Tensor:
        """Teacher logits for the model inputs of a training batch (no gradient)."""
        device = self.teacher_model.device
        with torch.no_grad():
            return self.teacher_model(**{k: inputs[k].to(device) for k in MODEL_INPUTS if k in inputs}).logits

    def compute_loss(
        self,
        model: torch.nn.Module,
        inputs: dict,
        return_outputs: bool = False,
        num_items_in_batch: torch.Tensor | int | None = None,
    ):
        with compact_logits(model):  # a sub-vocabulary head's logits [B, T, V'] (the divergence gathers V')
            outputs = model(**{k: inputs[k] for k in MODEL_INPUTS if k in inputs}, use_cache=False)
        loss = self.distill_loss(
            outputs.logits, self.teacher_logits(inputs), inputs["loss_mask"], num_items_in_batch
        )
        return (loss, outputs) if return_outputs else loss

    # ---- checkpoints: atomic, with the state that decides samples ---------------------------

    # private, but Trainer's only place that writes a checkpoint: staging it makes it atomic
    def _save_checkpoint(self, model: nn.Module, trial) -> None:
        """Trainer's checkpoint, written to incomplete/checkpoint-N with this trainer's own state,
        then committed (manifest, fsync, rename to checkpoint-N) and older ones rotated."""
        run_dir = Path(self._get_output_dir(trial))
        name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        staged, final = run_dir / STAGING_DIR / name, run_dir / name
        if self.args.should_save and staged.exists():
            shutil.rmtree(staged)  # left by an interrupted write of the same step
        self.accelerator.wait_for_everyone()
        self._staging = staged.parent
        try:
            super()._save_checkpoint(model, trial)  # its run_dir is _get_output_dir(): the staging folder
        finally:
            self._staging = None
        self._save_run_state(staged)
        self.accelerator.wait_for_everyone()
        if not self.args.should_save:
            return
        if self.state.best_model_checkpoint == str(staged):  # where it will be
            self.state.best_model_checkpoint = str(final)
            self.state.save_to_json(str(staged / "trainer_state.json"))
        commit_checkpoint(staged, final, self.state.global_step, self.run_identity, self.metrics.lines)
        shutil.rmtree(staged.parent, ignore_errors=True)  # and what interrupted writes left there
        rotate_checkpoints(str(run_dir), self.args.save_total_limit, self.state.best_model_checkpoint)

    # private, but where _save_checkpoint reads its folder from: the staging folder while one is written
    def _get_output_dir(self, trial) -> str:
        return str(self._staging) if self._staging is not None else super()._get_output_dir(trial)

    def _rng_file(self, folder: Path) -> Path:
        suffix = f"_{self.args.process_index}" if self.args.world_size > 1 else ""
        return folder / f"sample_rng{suffix}.pt"

    def _save_run_state(self, folder: Path) -> None:
        """What a checkpoint needs besides Trainer's files: the sampling generator (mix_* sources, sampling),
        and the step losses summed so far (the whole run's train_loss after a resume)."""
        folder.mkdir(parents=True, exist_ok=True)
        torch.save(self.sample_generator.get_state(), self._rng_file(folder))
        if self.args.should_save and self._loss_before is not None:
            # Trainer's accumulator: _total_loss_scalar (drained at each log) + _tr_loss (since the last log)
            loss_sum = self._loss_before + self._total_loss_scalar + self._tr_loss.item()
            (folder / LOSS_FILE).write_text(
                json.dumps({"loss_sum": loss_sum, "steps": self.state.global_step})
            )

    def _load_run_state(self, folder: Path | None) -> None:
        """Restore what _save_run_state saved (None: a fresh start, re-seeded)."""
        if folder is None:
            self.sample_generator.manual_seed(self.args.seed)
            self._loss_before = 0.0
            return
        self.sample_generator.set_state(torch.load(self._rng_file(folder), weights_only=True))
        loss_file = folder / LOSS_FILE
        if loss_file.exists():
            self._loss_before = json.loads(loss_file.read_text())["loss_sum"]
        else:
            self._loss_before = None
            logger.warning(
                "%s holds no %s (an older version wrote it): the end-of-train train_loss covers the steps "
                "after it only", folder, LOSS_FILE,
            )  # fmt: skip

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """Trainer's; its end-of-train `train_loss` (its summed step losses over the steps of this train()
        call) becomes the mean over the whole run: the sum the resumed checkpoint carried is added."""
        if "train_loss" in logs and self._loss_before is not None and self.state.global_step > 0:
            logs["train_loss"] = (self._loss_before + self._total_loss_scalar) / self.state.global_step
        super().log(logs, start_time)

    # ---- evaluation: acceptance rate ---------------------------------------------------------

    def evaluate(
        self,
        eval_dataset: Dataset | None = None,
        ignore_keys: list[str] | None = None,
        metric_key_prefix: str = "eval",
    ) -> dict[str, float | None]:
        """alpha and mean accepted length of SD (draft = student, gamma = --max_propose_num) on the eval
        set, overall and per dataset/topic/language value (`{prefix}_alpha/{field}/{value}`, the online entries'
        names: osd.metric_keys), token-weighted; an alpha with nothing proposed (gamma auto may choose 0) is
        None."""
        dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
        if dataset is None:
            raise ValueError("evaluation needs an eval set (--eval_data_path)")
        student = self.accelerator.unwrap_model(self.model)
        was_training = student.training
        student.eval()
        decoder = SpeculativeDecoder(
            student, self.teacher_model, self.args.max_propose_num, self.gamma_policy
        )
        # on the device the draft samples on (osd.spec.sampling.generator_on covers a spread teacher)
        generator = torch.Generator(device=student.device).manual_seed(self.args.seed)
        items = [dataset[i] for i in range(len(dataset))]
        outputs = [
            decoder.generate(
                torch.tensor([item["prompt_ids"]], dtype=torch.long, device=student.device),
                max_new_tokens=self.args.max_new_tokens,
                temperature=self.args.eval_temperature,
                eos_token_id=self.eos_token_id,
                generator=generator,
            )
            for item in items
        ]
        student.train(was_training)
        stats = AcceptanceStats.from_outputs(outputs)
        metrics = {
            f"{metric_key_prefix}_alpha": stats.alpha,
            f"{metric_key_prefix}_accepted_length": stats.mean_accepted_length,
            f"{metric_key_prefix}_tokens_per_step": stats.tokens_per_step,
            f"{metric_key_prefix}_num_generated": stats.num_generated,
        }
        per_group = group_alphas(
            (item, o.alpha_sum, o.num_proposed) for item, o in zip(items, outputs, strict=True)
        )
        metrics |= {f"{metric_key_prefix}_{key}": alpha for key, alpha in per_group.items()}
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics
