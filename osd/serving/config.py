"""Command-line configuration of `python -m osd.serving`: one dataclass for HfArgumentParser.

Flags that name a concept of `osd.train --mode online` keep its name, meaning and default
(--max_propose_num, --online_update_interval, --kl_method, ...); the model paths default to the
embedded demo pair.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from osd.distill.losses import DIVERGENCES
from osd.online.config import OnlineArguments
from osd.paths import DRAFT_PATH, TARGET_PATH
from osd.spec.gamma import DEFAULT as GAMMA_DEFAULT
from osd.spec.gamma import parse_gamma

VLLM_DTYPES = ("bfloat16", "float16", "float32")


@dataclass(kw_only=True)
class ServingArguments(OnlineArguments):
    """The online loop's flags (osd.online.config), vLLM's, and the trainer's beside it."""

    data_path: str = field(metadata={"help": "The query stream: a conversation-JSON file, served in order."})
    output_dir: str = field(metadata={"help": "Where metrics.jsonl and the exported draft go."})
    teacher_model_path: str = field(
        default=str(TARGET_PATH),
        metadata={
            "help": "The target, served by vLLM (and run teacher-forced by the trainer); its tokenizer."
        },
    )
    student_model_path: str = field(
        default=str(DRAFT_PATH),
        metadata={
            "help": "The draft: vLLM's draft_model speculator, distilled online (--drafter head serves --head_path "
            "with vLLM's eagle3 method instead)."
        },
    )
    max_propose_num: int = field(
        default=GAMMA_DEFAULT,
        metadata={"help": "gamma: vLLM's num_speculative_tokens (an int: no 'auto'); 0 = the target alone."},
    )
    max_new_tokens: int = field(default=128, metadata={"help": "Generated tokens per query, at most."})
    eval_temperature: float = field(default=0.0, metadata={"help": "Serving temperature; 0 = greedy."})
    concurrency: int = field(
        default=1,
        metadata={"help": "Queries in flight at once (vLLM batches them); the stream is submitted in order."},
    )
    kl_method: str = field(
        default="forward", metadata={"help": f"The divergence, one of {sorted(DIVERGENCES)}."}
    )
    jsd_beta: float = field(default=0.5, metadata={"help": "--kl_method jsd: the teacher's weight beta."})
    distill_temperature: float = field(
        default=1.0, metadata={"help": "Temperature inside the distillation loss."}
    )
    learning_rate: float = field(
        default=5e-5, metadata={"help": "AdamW learning rate (constant; Trainer's default)."}
    )
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay."})
    max_grad_norm: float = field(default=0.0, metadata={"help": "Gradient clipping norm; 0 = none."})
    teacher_dtype: str = field(
        default="bfloat16",
        metadata={"help": f"dtype of the served models and the teacher forward, one of {VLLM_DTYPES}."},
    )
    trainer_device: str = field(
        default="cpu", metadata={"help": "Where the trainer keeps the draft and the teacher (e.g. cuda:1)."}
    )
    source_prefix: str = field(default="", metadata={"help": "Text put before every query."})
    max_samples: int | None = field(
        default=None, metadata={"help": "Serve only the first this many queries."}
    )
    max_model_len: int = field(default=1024, metadata={"help": "vLLM's context length (prompt + generated)."})
    tensor_parallel_size: int = field(
        default=1, metadata={"help": "vLLM's tensor parallel size for the target."}
    )
    enforce_eager: bool = field(
        default=True, metadata={"help": "vLLM without CUDA graphs (the CPU backend's mode)."}
    )
    seed: int = field(default=0, metadata={"help": "vLLM's seed and torch's."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.online_rejected_weight:
            raise ValueError(
                "--online_rejected_weight: vLLM does not report the rejected proposals; osd.serving distils a "
                "head on the target's tokens"
            )
        checks = (
            ("kl_method", self.kl_method, sorted(DIVERGENCES)),
            ("teacher_dtype", self.teacher_dtype, VLLM_DTYPES),
        )
        for flag, value, choices in checks:
            if value not in choices:
                raise ValueError(f"--{flag} must be one of {list(choices)}, got {value!r}")
        self.max_propose_num = parse_gamma(
            self.max_propose_num, auto="vLLM speculates a fixed number of tokens"
        )
        minima = (
            ("max_new_tokens", 1),
            ("concurrency", 1),
            ("max_samples", 1),
        )
        if self.learning_rate < 0:
            raise ValueError(f"--learning_rate must be >= 0, got {self.learning_rate}")
        for flag, minimum in minima:
            if getattr(self, flag) is not None and getattr(self, flag) < minimum:
                raise ValueError(f"--{flag} must be >= {minimum}, got {getattr(self, flag)}")

    @property
    def distils(self) -> bool:
        """Whether the draft is updated online (a draft, and an update interval)."""
        return self.max_propose_num > 0 and self.online_update_interval > 0
