"""Distil a draft (student) model from a target (teacher), offline or online.

Usage (real models, as the paper; see bash_scripts/*/offline.sh):
    python -m osd.train --student_model_path JackFram/llama-160m --teacher_model_path lmsys/vicuna-7b-v1.3 \
        --data_path data/raw_data/gsm8k_train_with_answer.json --eval_data_path data/raw_data/gsm8k_test.json \
        --mode offline --sample_source student --kl_method forward --max_propose_num 5 \
        --output_dir runs/gsm8k_student_forward --bf16 True --num_train_epochs 2 --report_to wandb

Usage (embedded demo pair, CPU, no downloads): bash bash_scripts/demo/offline.sh runs/demo student forward

Every `transformers.TrainingArguments` flag works too, and so do the reference's command lines
(osd.distill.reference_flags maps its renamed and T5-only flags). An --output_dir that holds a run
is refused unless --resume_from_checkpoint (a checkpoint, or `last` for the newest complete one) or
--overwrite_output_dir (start over) is given; one that a running run holds, or that is or lies in a
model or data folder, is refused before any model loads: see osd.distill.run_dir.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from osd.cli import parse_train_args
from osd.conversations import ConversationSource
from osd.demo.target import ensure_if_demo_target
from osd.distill.callbacks import setup_wandb
from osd.distill.config import DataArguments, DistillTrainingArguments, ModelArguments
from osd.distill.data import ConversationDataset, DistillCollator
from osd.distill.run_dir import RunPlan, final_eval, open_run, run_identity
from osd.distill.trainer import DistillTrainer
from osd.model_checks import check_model_path, check_same_tokenizer, fit_lengths, load_pretrained
from osd.user_errors import disk_full_as_oserror

logger = logging.getLogger(__name__)


def resolve_dtype(name: str) -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if torch.cuda.is_available() else torch.float32
    return getattr(torch, name)


def load_model(
    path: str, dtype: str, cache_dir: str | None, device_map: str | None = None
) -> PreTrainedModel:
    """A causal LM or, when the config says so, an encoder-decoder (T5) model; hub name or local path."""
    ensure_if_demo_target(path)  # the demo target is converted from its package on first use
    check_model_path(path)
    config = load_pretrained(AutoConfig, path, cache_dir=cache_dir)
    auto = AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModelForCausalLM
    return load_pretrained(auto, path, cache_dir=cache_dir, dtype=resolve_dtype(dtype), device_map=device_map)


def load_tokenizer(path: str, cache_dir: str | None) -> PreTrainedTokenizerBase:
    """The teacher's tokenizer, with a pad token (unk, else eos, as the reference) when it has none."""
    ensure_if_demo_target(path)  # the demo target is converted from its package on first use
    check_model_path(path)
    tokenizer = load_pretrained(AutoTokenizer, path, cache_dir=cache_dir)
    if tokenizer.pad_token is None:
        fallback = tokenizer.unk_token or tokenizer.eos_token
        if fallback is None:
            raise ValueError(f"tokenizer of {path} has no pad, unk or eos token to pad with")
        tokenizer.pad_token = fallback
    return tokenizer


def load_models(
    model_args: ModelArguments,
) -> tuple[PreTrainedTokenizerBase, PreTrainedModel, PreTrainedModel]:
    """(tokenizer, student, teacher) named by the model flags; the tokenizer is the teacher's."""
    tokenizer = load_tokenizer(model_args.teacher_model_path, model_args.cache_dir)
    check_same_tokenizer(
        model_args.student_model_path, model_args.teacher_model_path, tokenizer, model_args.cache_dir
    )
    student = load_model(model_args.student_model_path, model_args.student_dtype, model_args.cache_dir)
    teacher = load_model(
        model_args.teacher_model_path,
        model_args.teacher_dtype,
        model_args.cache_dir,
        model_args.teacher_device_map,
    )
    return tokenizer, student, teacher


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


def main(argv: list[str] | None = None) -> dict[str, float]:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    model_args, data_args, training_args = parse_train_args(sys.argv[1:] if argv is None else argv)
    setup_wandb(training_args.report_to)
    identity = run_identity(model_args, data_args, training_args)
    with open_run(model_args, data_args, training_args, identity) as plan:  # refuses before models load
        return run(model_args, data_args, training_args, identity, plan)


def run(
    model_args: ModelArguments,
    data_args: DataArguments,
    training_args: DistillTrainingArguments,
    identity: dict,
    plan: RunPlan,
) -> dict[str, float]:
    """Load the models and data, train (or resume) into the planned folder; the final eval metrics."""
    tokenizer, student, teacher = load_models(model_args)
    is_enc_dec = bool(student.config.is_encoder_decoder)
    dataset = dataset_loader(data_args, tokenizer, student, teacher, training_args.max_new_tokens)
    train_dataset = dataset(data_args.data_path, data_args.max_train_samples, data_args.data_split)
    eval_dataset = (
        dataset(
            data_args.eval_data_path,
            data_args.max_eval_samples,
            data_args.eval_data_split,
            "--eval_data_path",
        )
        if data_args.eval_data_path
        else None
    )
    if eval_dataset is None:
        training_args.eval_on_start = False
    collator = DistillCollator(
        tokenizer.pad_token_id,
        is_enc_dec,
        getattr(student.config, "decoder_start_token_id", None),
        data_args.model_max_length,
    )
    if training_args.mode == "online":
        from osd.distill.online import OnlineDistillTrainer as trainer_class
    else:
        trainer_class = DistillTrainer
    trainer = trainer_class(
        model=student,
        teacher_model=teacher,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        data_collator=collator,
        processing_class=tokenizer,
        run_identity=identity,
        run_info={"data_path": data_args.data_path, "eval_data_path": data_args.eval_data_path},
    )
    if plan.is_finished(trainer.planned_max_steps()):
        return final_eval(plan.finished["log_history"], plan.finished["global_step"])
    plan.begin(training_args.should_save)
    if plan.checkpoint is not None:
        logger.info("resuming from %s", plan.checkpoint.path)
    with disk_full_as_oserror(training_args.output_dir):  # a checkpoint that did not fit: resume after
        trainer.train(resume_from_checkpoint=str(plan.checkpoint.path) if plan.checkpoint else None)
        trainer.save_model()
        metrics = {}
        if eval_dataset is not None and training_args.mode == "offline":  # unless measured at the last step
            metrics = final_eval(trainer.state.log_history, trainer.state.global_step) or trainer.evaluate()
        trainer.save_state()  # last: its trainer_state.json marks the run finished
    return metrics


if __name__ == "__main__":
    from osd.cli import train

    sys.exit(train())  # refusals as one error line, exit status 1
