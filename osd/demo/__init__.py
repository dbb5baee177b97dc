"""The embedded demo: a local query workload and a small trained teacher/draft pair.

`data/build_local_workload.py` writes the workload; `python -m osd.demo.build_models` trains the
tokenizer, the teacher (target) and the draft (student) into `osd/demo/models/`. The pair is an
ordinary pair of `from_pretrained` paths, so every tool takes it like any hub model.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

REPO_ROOT = Path(__file__).resolve().parents[2]
MODELS_DIR = Path(__file__).resolve().parent / "models"
TEACHER_PATH = MODELS_DIR / "teacher"
DRAFT_PATH = MODELS_DIR / "draft"
WORKLOAD_DIR = REPO_ROOT / "data" / "local"
DOMAINS = ("sql", "math", "code", "finance")


def workload_path(domain: str, split: str) -> Path:
    """`data/local/{domain}_{split}.json`; raises naming the known domains for a typo."""
    if domain not in DOMAINS or split not in ("train", "eval"):
        raise ValueError(f"unknown workload file {domain}_{split}: domains are {DOMAINS}, splits train/eval")
    return WORKLOAD_DIR / f"{domain}_{split}.json"


def load_demo_pair(
    draft_path: str | Path = DRAFT_PATH,
    teacher_path: str | Path = TEACHER_PATH,
    dtype: torch.dtype | None = None,
) -> tuple[PreTrainedModel, PreTrainedModel, PreTrainedTokenizerBase]:
    """(draft, teacher, tokenizer) in eval mode, float32 by default (weights are stored in fp16)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = dtype or torch.float32
    for path in (draft_path, teacher_path):
        if not (Path(path) / "config.json").exists():
            raise FileNotFoundError(
                f"{path}: no demo model here; build it with `python -m osd.demo.build_models`"
            )
    draft = AutoModelForCausalLM.from_pretrained(draft_path, dtype=dtype).eval()
    teacher = AutoModelForCausalLM.from_pretrained(teacher_path, dtype=dtype).eval()
    return draft, teacher, AutoTokenizer.from_pretrained(teacher_path)
