"""Distillation of the draft (student) from the target (teacher): losses, sample sources, trainer."""

from osd.distill.config import DataArguments, DistillTrainingArguments, ModelArguments
from osd.distill.losses import forward_kl, get_divergence, jsd, reference_mix, reverse_kl, tvd
from osd.distill.trainer import DistillTrainer

__all__ = [
    "DataArguments",
    "DistillTrainer",
    "DistillTrainingArguments",
    "ModelArguments",
    "forward_kl",
    "get_divergence",
    "jsd",
    "reference_mix",
    "reverse_kl",
    "tvd",
]
