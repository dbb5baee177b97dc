"""Command-line configuration of the distillation trainer: three dataclasses for HfArgumentParser.

The flags and defaults are the reference's (`--student_model_path`, `--teacher_model_path`,
`--data_path`, `--mode`, `--sample_source`, `--kl_method`, `--max_propose_num`, ...), plus every
`transformers.TrainingArguments` flag.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from transformers import TrainingArguments

from osd.distill.losses import DIVERGENCES
from osd.model_checks import DEFAULT_MAX_LENGTH
from osd.online.config import OnlineArguments
from osd.spec.gamma import DEFAULT as GAMMA_DEFAULT
from osd.spec.gamma import NEEDS_PROPOSALS, parse_gamma

MODES = ("offline", "online")
SAMPLE_SOURCES = ("teacher", "student", "mix_request", "mix_token")
DTYPES = ("auto", "float32", "bfloat16", "float16")


def _check_choice(flag: str, value: str, choices: tuple[str, ...] | list[str]) -> None:
    if value not in choices:
        raise ValueError(f"--{flag} must be one of {list(choices)}, got {value!r}")


@dataclass
class ModelArguments:
    student_model_path: str = field(
        default="facebook/opt-125m",
        metadata={"help": "The draft (student) model: a hub name or a local path."},
    )
    teacher_model_path: str | None = field(
        default=None,
        metadata={
            "help": "The target (teacher) model: a hub name or a local path. The tokenizer is loaded from it."
        },
    )
    cache_dir: str | None = field(default=None, metadata={"help": "Where downloaded models are cached."})
    student_dtype: str = field(
        default="float32",
        metadata={
            "help": f"Student weights dtype, one of {DTYPES} (the reference trains the student in float32)."
        },
    )
    teacher_dtype: str = field(
        default="auto",
        metadata={"help": f"Teacher weights dtype, one of {DTYPES}; auto = bfloat16 on GPU, float32 on CPU."},
    )
    teacher_device_map: str | None = field(
        default=None,
        metadata={
            "help": "device_map for the teacher (e.g. 'auto' to spread a large teacher over several GPUs); "
            "default: the student's device."
        },
    )

    def __post_init__(self) -> None:
        _check_choice("student_dtype", self.student_dtype, DTYPES)
        _check_choice("teacher_dtype", self.teacher_dtype, DTYPES)


@dataclass
class DataArguments:
    data_path: str | None = field(
        default=None,
        metadata={
            "help": "Training conversations (the online stream in --mode online): a conversation-JSON file "
            "(.json list or .jsonl), a folder (of such files, split by file name as datasets does, or a "
            "Dataset.save_to_disk folder), or a hub dataset name (read from the local datasets cache "
            "when offline); split: --data_split."
        },
    )
    data_split: str = field(
        default="train",
        metadata={"help": "Split of a --data_path folder or hub dataset (a single file is its own split)."},
    )
    eval_data_path: str | None = field(
        default=None,
        metadata={
            "help": "Conversations on which acceptance (alpha) is measured; the same forms as --data_path."
        },
    )
    eval_data_split: str = field(
        default="test",
        metadata={"help": "Split of an --eval_data_path folder or hub dataset."},
    )
    model_max_length: int = field(
        default=DEFAULT_MAX_LENGTH,
        metadata={"help": "Maximum prompt + response length in tokens (longer ones are truncated)."},
    )
    max_eval_samples: int | None = field(
        default=None, metadata={"help": "Measure alpha on at most this many eval records (the first ones)."}
    )
    max_train_samples: int | None = field(
        default=None, metadata={"help": "Train on at most this many records of --data_path (the first ones)."}
    )
    source_prefix: str = field(
        default="",
        metadata={"help": "Text put before every query (the reference's T5 flag, e.g. 'summarize: ')."},
    )
    lazy_preprocess: bool = field(
        default=True,
        metadata={
            "help": "Kept for compatibility with the reference's scripts; records are always tokenized up "
            "front with datasets' Dataset.map (cached)."
        },
    )

    def __post_init__(self) -> None:
        if self.model_max_length < 2:
            raise ValueError(f"--model_max_length must be >= 2, got {self.model_max_length}")
        for flag in ("max_eval_samples", "max_train_samples"):
            if getattr(self, flag) is not None and getattr(self, flag) < 1:
                raise ValueError(f"--{flag} must be >= 1, got {getattr(self, flag)}")


@dataclass
class DistillTrainingArguments(OnlineArguments, TrainingArguments):
    """TrainingArguments, the online loop's (osd.online.config), and the distillation's own."""

    mode: str = field(
        default="offline",
        metadata={"help": f"{list(MODES)}: distil on a fixed data set, or serve a stream and distil online."},
    )
    sample_source: str = field(
        default="student",
        metadata={
            "help": f"{list(SAMPLE_SOURCES)}: where the training tokens come from: the teacher's answer "
            "(from the data set, else generated), the student's own generation, a per-request mix, "
            "or a per-token mix (ratios: --mix_ratio)."
        },
    )
    kl_method: str = field(
        default="forward",
        metadata={
            "help": f"{sorted(DIVERGENCES)}: forward = KL(teacher||student), reverse = KL(student||teacher), "
            "jsd = generalised JSD (--jsd_beta), tvd = total variation, reference_mix = 0.9*forward + 0.1*reverse "
            "(what the reference code called jsd)."
        },
    )
    max_propose_num: int | str = (
        field(  # a Gamma (osd.spec.gamma) after __post_init__: an int >= 1, or "auto"
            default=GAMMA_DEFAULT,
            metadata={
                "help": "gamma: draft tokens proposed per verification step (eval and serving), or 'auto': chosen "
                "per step from the running alpha and the measured draft/verify costs (osd.spec.adaptive)."
            },
        )
    )
    mix_ratio: float = field(
        default=0.5,
        metadata={
            "help": "mix_request / mix_token: probability that a request (or a token) is generated by the student; "
            "the rest comes from the teacher."
        },
    )
    jsd_beta: float = field(
        default=0.5, metadata={"help": "--kl_method jsd: the teacher's weight beta in (0, 1)."}
    )
    distill_temperature: float = field(
        default=1.0, metadata={"help": "Temperature dividing both logits inside the distillation loss."}
    )
    sample_temperature: float = field(
        default=0.0,
        metadata={
            "help": "Temperature when the student/teacher generate training samples; 0 = greedy (the reference's argmax)."
        },
    )
    max_new_tokens: int = field(
        default=128,
        metadata={
            "help": "Tokens generated per request: student/teacher sampling, alpha evaluation, serving."
        },
    )
    eval_temperature: float = field(
        default=0.0, metadata={"help": "Speculative-decoding temperature when measuring alpha; 0 = greedy."}
    )
    freeze_embeddings: bool = field(
        default=False,
        metadata={
            "help": "Train the student without its input embedding, and the LM head when tied to it: only its "
            "other weights learn. A small draft's tied [V, H] embedding is most of its weights (12.6M of the "
            "demo draft's 14.7M): without its dense gradient and AdamW moments an update step costs about a "
            "third, but the draft learns less (benchmarks/README.md, History: online_demo/v3_45x32_thp)."
        },
    )
    draft_vocab_rows_only: bool = field(
        default=False,
        metadata={
            "help": "With a sub-vocabulary head tied to the input embedding: train only the V' rows of the shared "
            "weight, as their own [V', H] weight copied back after every step (no dense [V, H] gradient or "
            "AdamW moments); the other rows stay as they are. The main job's worker is then busy 0.18 of "
            "serving time instead of 0.28 (osd.distill.subvocab; benchmarks/README.md, History: online_demo/v3_45x32_rows)."
        },
    )
    draft_vocab_size: int | None = field(
        default=None,
        metadata={
            "help": "Give the student a sub-vocabulary LM head over this many tokens, the most frequent of "
            "--draft_vocab_counts (plus the tokenizer's special tokens); q = 0 outside them, so SD stays exact, "
            "and the losses compare the distributions renormalised on them. Saved with the model "
            "(config.draft_vocab). A student saved with such a head keeps it without this flag."
        },
    )
    draft_vocab_counts: str | None = field(
        default=None,
        metadata={"help": "Token-frequency file (data/token_counts.py) that --draft_vocab_size picks from."},
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "Start over in a --output_dir that holds a run: its checkpoints, metrics.jsonl and model "
            "are deleted first. (To continue it instead: --resume_from_checkpoint last.)"
        },
    )
    # Changed defaults. The reference trains with adamw_torch and without gradient clipping (it forced
    # max_grad_norm=0; here 0 is the default and a flag may set it); "Standard" speculative decoding is
    # measured before the first step; the collated batches carry prompt_ids and group names that
    # the model's forward does not take, so Trainer must not drop "unused" columns.
    optim: str = field(
        default="adamw_torch", metadata={"help": "The optimizer (the reference's adamw_torch)."}
    )
    max_grad_norm: float = field(
        default=0.0, metadata={"help": "Gradient clipping norm; 0 = none (the reference forced 0)."}
    )
    eval_on_start: bool = field(
        default=True, metadata={"help": "Measure alpha before the first step: the 'Standard' SD baseline."}
    )
    remove_unused_columns: bool = field(
        default=False, metadata={"help": "Must stay False: the trainer needs prompt_ids and group fields."}
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_choice("mode", self.mode, MODES)
        _check_choice("sample_source", self.sample_source, SAMPLE_SOURCES)
        _check_choice("kl_method", self.kl_method, sorted(DIVERGENCES))
        self.max_propose_num = parse_gamma(self.max_propose_num, plain_decoding=NEEDS_PROPOSALS)
        if self.max_new_tokens < 1:
            raise ValueError(f"--max_new_tokens must be >= 1, got {self.max_new_tokens}")
        # Trainer takes max_steps 0 as "not set" (it trains --num_train_epochs) and epochs 0 as no step at all
        if self.max_steps == 0 or self.max_steps < -1:
            raise ValueError(
                f"--max_steps must be >= 1, or -1 to train --num_train_epochs; got {self.max_steps}"
            )
        if self.learning_rate < 0:  # torch refused it only after the run folder was written
            raise ValueError(f"--learning_rate must be >= 0, got {self.learning_rate}")
        if self.num_train_epochs <= 0:
            raise ValueError(f"--num_train_epochs must be > 0, got {self.num_train_epochs}")
        if (self.draft_vocab_size is None) != (self.draft_vocab_counts is None):
            raise ValueError(
                "--draft_vocab_size and --draft_vocab_counts go together (the size, and the file to pick from)"
            )
        if self.drafter == "head" and (self.mode != "online" or self.draft_vocab_size or self.draft_vocab_rows_only
                                       or self.freeze_embeddings):  # fmt: skip
            raise ValueError(
                "--drafter head learns online (--mode online) over its own draft vocabulary and no embedding of "
                "its own: drop --draft_vocab_size, --draft_vocab_rows_only and --freeze_embeddings"
            )
        if self.online_update_process and self.save_strategy != "no":
            raise ValueError(
                "--online_update_process keeps the optimizer's state in the update process, where no checkpoint "
                "would find it: add --save_strategy no, or drop --online_update_process"
            )
        if self.draft_vocab_rows_only and self.freeze_embeddings:
            raise ValueError(
                "--draft_vocab_rows_only trains rows that --freeze_embeddings freezes: choose one"
            )
        if self.draft_vocab_size is not None and self.draft_vocab_size < 1:
            raise ValueError(f"--draft_vocab_size must be >= 1, got {self.draft_vocab_size}")
        if not 0.0 <= self.mix_ratio <= 1.0:
            raise ValueError(f"--mix_ratio must be in [0, 1], got {self.mix_ratio}")
        if not 0.0 < self.jsd_beta < 1.0:
            raise ValueError(f"--jsd_beta must be in (0, 1), got {self.jsd_beta}")
        if self.distill_temperature <= 0:
            raise ValueError(f"--distill_temperature must be > 0, got {self.distill_temperature}")
        for flag in ("sample_temperature", "eval_temperature"):
            if getattr(self, flag) < 0:
                raise ValueError(f"--{flag} must be >= 0 (0 = greedy), got {getattr(self, flag)}")
        if self.remove_unused_columns:
            raise ValueError(
                "--remove_unused_columns must be False: the trainer reads prompt_ids and group fields"
            )
