"""One distillation run from typed arguments, and the pieces every trainer user shares: the dataset
reader fitted to the models (`dataset_loader`), the collator (`make_collator`), the trainer for the
run's mode (`build_trainer`), and training into a planned run folder (`train_planned`).

`run` is what `python -m osd.train` does after parsing its flags; `osd.distill.routing`, the online
demo and the benchmarks build their trainers with `build_trainer`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from osd.conversations import ConversationSource
from osd.distill.callbacks import setup_wandb
from osd.distill.config import DataArguments, DistillTrainingArguments, ModelArguments
from osd.distill.data import ConversationDataset, DistillCollator
from osd.distill.online import OnlineDistillTrainer
from osd.distill.run_dir import RunPlan, final_eval, open_run, run_identity
from osd.distill.trainer import DistillTrainer
from osd.model_checks import fit_lengths
from osd.models import load_models
from osd.spec.weight_major import use_weight_major_linears
from osd.user_errors import disk_full_as_oserror

logger = logging.getLogger(__name__)


def dataset_loader(
    data_args: DataArguments,
    tokenizer: PreTrainedTokenizerBase,
    student: PreTrainedModel,
    teacher: PreTrainedModel,
    max_new_tokens: int,
) -> Callable[..., ConversationDataset]:
    """A reader of conversations for this run (any `--data_path` form, or a `datasets.Dataset`):
    --model_max_length fitted to the models' context (prompts leave room for max_new_tokens),
    --source_prefix before every query."""
    data_args.model_max_length, prompt_limit = fit_lengths(
        data_args.model_max_length, max_new_tokens, student, teacher
    )
    is_enc_dec = bool(student.config.is_encoder_decoder)

    def dataset(
        source: ConversationSource,
        max_samples: int | None = None,
        split: str = "train",
        flag: str = "--data_path",
    ) -> ConversationDataset:
        return ConversationDataset(
            source, tokenizer, data_args.model_max_length, is_enc_dec, max_samples, prompt_limit,
            query_prefix=data_args.source_prefix, split=split, flag=flag,
        )  # fmt: skip

    return dataset


def make_collator(
    tokenizer: PreTrainedTokenizerBase, student: PreTrainedModel, model_max_length: int | None = None
) -> DistillCollator:
    """The batch collator for `student` (decoder-only, or encoder-decoder with its decoder start token)."""
    return DistillCollator(
        tokenizer.pad_token_id,
        bool(student.config.is_encoder_decoder),
        getattr(student.config, "decoder_start_token_id", None),
        model_max_length,
    )


def build_trainer(
    args: DistillTrainingArguments,
    student: PreTrainedModel,
    teacher: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    train_dataset: ConversationDataset,
    eval_dataset: ConversationDataset | None = None,
    model_max_length: int | None = None,
    trainer_class: type[DistillTrainer] | None = None,
    **kwargs,
) -> DistillTrainer:
    """The trainer of `args.mode` (DistillTrainer offline, OnlineDistillTrainer online, or
    `trainer_class`) distilling `student` from `teacher`; `kwargs` go to its constructor
    (callbacks, run_identity, run_info, a routed trainer's router...)."""
    if trainer_class is None:
        trainer_class = OnlineDistillTrainer if args.mode == "online" else DistillTrainer
    kwargs.setdefault("model", student)
    return trainer_class(
        teacher_model=teacher,
        args=args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        data_collator=make_collator(tokenizer, student, model_max_length),
        processing_class=tokenizer,
        **kwargs,
    )


def train_planned(trainer: DistillTrainer, plan: RunPlan, final_evaluation: bool = False) -> dict[str, float]:
    """Train (or resume, or find finished) into `plan`'s folder and save the model and state; with
    `final_evaluation`, the eval metrics at the end (measured at the last step, else now)."""
    if plan.is_finished(trainer.planned_max_steps()):
        return final_eval(plan.finished["log_history"], plan.finished["global_step"])
    plan.begin(trainer.args.should_save)
    if plan.checkpoint is not None:
        logger.info("resuming from %s", plan.checkpoint.path)
    with disk_full_as_oserror(trainer.args.output_dir):  # a checkpoint that did not fit: resume after
        trainer.train(resume_from_checkpoint=str(plan.checkpoint.path) if plan.checkpoint else None)
        trainer.save_model()
        metrics = {}
        if final_evaluation:
            metrics = final_eval(trainer.state.log_history, trainer.state.global_step) or trainer.evaluate()
        trainer.save_state()  # last: its trainer_state.json marks the run finished
    return metrics


def run(
    model_args: ModelArguments, data_args: DataArguments, training_args: DistillTrainingArguments
) -> dict[str, float]:
    """A whole run: refuse a used or unsafe --output_dir before any model loads, load the models and
    data, train (or resume) into it; the final eval metrics (offline mode with eval data)."""
    setup_wandb(training_args.report_to)
    identity = run_identity(model_args, data_args, training_args)
    with open_run(model_args, data_args, training_args, identity) as plan:
        tokenizer, student, teacher = load_models(model_args, training_args)
        # the run's own float32 CPU target verifies a few tokens in about one step (opt-in: osd.spec.weight_major)
        use_weight_major_linears(teacher)
        dataset = dataset_loader(data_args, tokenizer, student, teacher, training_args.max_new_tokens)
        train_dataset = dataset(data_args.data_path, data_args.max_train_samples, data_args.data_split)
        eval_dataset = None
        if data_args.eval_data_path:
            eval_dataset = dataset(
                data_args.eval_data_path,
                data_args.max_eval_samples,
                data_args.eval_data_split,
                "--eval_data_path",
            )
        else:
            training_args.eval_on_start = False
        trainer = build_trainer(
            training_args, student, teacher, tokenizer, train_dataset, eval_dataset, data_args.model_max_length,
            run_identity=identity,
            run_info={"data_path": data_args.data_path, "eval_data_path": data_args.eval_data_path},
        )  # fmt: skip
        return train_planned(trainer, plan, eval_dataset is not None and training_args.mode == "offline")
