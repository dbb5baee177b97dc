"""Loading models and tokenizers, one way for every tool: a hub name or a local folder, causal LMs or
encoder-decoder (T5) models as their config says, a load failure that names the path
(`osd.model_checks`), and the demo target converted from its package on first use (`osd.demo.target`).

dtype rules: a dtype *flag* ("auto", "float32", "bfloat16", ...) is `resolve_dtype`'d, "auto" meaning
bf16 on a GPU and float32 on a CPU (osd.train's --student_dtype/--teacher_dtype); None keeps the dtype the
folder stores (`load_demo_pair`'s default, and data/generate_answer.py's --dtype auto). Serving flags (the
main job's and bench_engine's --dtype) name a dtype of SERVING_DTYPES.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from osd.demo.target import ensure_if_demo_target
from osd.distill.config import ModelArguments
from osd.model_checks import check_model_path, check_same_tokenizer, load_pretrained
from osd.online.config import SERVING_DTYPES as SERVING_DTYPES  # re-exported: one definition
from osd.online.config import OnlineArguments
from osd.paths import DRAFT_PATH, TARGET_PATH
from osd.spec.draft_vocab import apply_draft_vocab
from osd.spec.drafter import Drafter
from osd.spec.eagle3 import Eagle3Head, load_head


def resolve_dtype(name: str) -> torch.dtype:
    """A dtype flag's torch dtype: "auto" is bf16 when CUDA is available, else float32."""
    if name == "auto":
        return torch.bfloat16 if torch.cuda.is_available() else torch.float32
    return getattr(torch, name)


def load_model(
    path: str | Path,
    dtype: str | torch.dtype | None = "auto",
    cache_dir: str | None = None,
    device_map: str | None = None,
) -> PreTrainedModel:
    """A causal LM or, when the config says so, an encoder-decoder model of `path`, in `dtype`: a flag's
    name (`resolve_dtype`), a torch dtype, or None for the dtype the folder stores."""
    ensure_if_demo_target(path)
    check_model_path(path)
    config = load_pretrained(AutoConfig, path, cache_dir=cache_dir)
    auto = AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModelForCausalLM
    dtype = resolve_dtype(dtype) if isinstance(dtype, str) else dtype or "auto"  # HF's "auto": as stored
    return load_pretrained(auto, path, cache_dir=cache_dir, dtype=dtype, device_map=device_map)


def random_model(config: PretrainedConfig | str | Path, dtype: torch.dtype, device: str) -> PreTrainedModel:
    """The causal LM that `config` (or a folder's config.json) describes, with random weights made on `device`
    (a 7B model is initialised there in seconds, not on the CPU first), with its sub-vocabulary head, in
    eval mode. Latency does not depend on the weights, so no weights need to travel to a machine."""
    if not isinstance(config, PretrainedConfig):
        config = AutoConfig.from_pretrained(config)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return apply_draft_vocab(model).eval()


def load_tokenizer(path: str | Path, cache_dir: str | None = None, **kwargs) -> PreTrainedTokenizerBase:
    """The tokenizer of `path`, with a pad token (unk, else eos, as the reference) when it has none."""
    ensure_if_demo_target(path)
    check_model_path(path)
    tokenizer = load_pretrained(AutoTokenizer, path, cache_dir=cache_dir, **kwargs)
    if tokenizer.pad_token is None:
        fallback = tokenizer.unk_token or tokenizer.eos_token
        if fallback is None:
            raise ValueError(f"tokenizer of {path} has no pad, unk or eos token to pad with")
        tokenizer.pad_token = fallback
    return tokenizer


def load_models(
    model_args: ModelArguments, online: OnlineArguments | None = None
) -> tuple[PreTrainedTokenizerBase, Drafter, PreTrainedModel]:
    """(tokenizer, student, teacher) named by the model flags; the tokenizer is the teacher's. With `online`'s
    --drafter head the student is an EAGLE-3 head (`load_head_drafter`; --student_model_path is not read)."""
    head = online is not None and online.drafter == "head"
    tokenizer = load_tokenizer(model_args.teacher_model_path, model_args.cache_dir)
    if not head:
        check_same_tokenizer(
            model_args.student_model_path, model_args.teacher_model_path, tokenizer, model_args.cache_dir
        )
    teacher = load_model(
        model_args.teacher_model_path,
        model_args.teacher_dtype,
        model_args.cache_dir,
        model_args.teacher_device_map,
    )
    if head:
        return tokenizer, load_head_drafter(teacher, online.head_path), teacher
    student = load_model(model_args.student_model_path, model_args.student_dtype, model_args.cache_dir)
    return tokenizer, student, teacher


def load_head_drafter(target: PreTrainedModel, path: str | Path | None, seed: int = 0) -> Eagle3Head:
    """The EAGLE-3 head that drafts for `target` and learns (--drafter head), in float32 on the target's device: the
    one saved in `path` (`osd.spec.eagle3.save_head`'s folder), or a fresh one (`Eagle3Head.for_target`, seeded)."""
    head = Eagle3Head.for_target(target, seed=seed) if path is None else load_head(path, target.device)
    head.check_target(target)
    return head.float()


def load_demo_pair(
    draft_path: str | Path = DRAFT_PATH,
    target_path: str | Path = TARGET_PATH,
    dtype: torch.dtype | None = None,
    draft_dtype: torch.dtype | None = None,
) -> tuple[PreTrainedModel, PreTrainedModel, PreTrainedTokenizerBase]:
    """(draft, target, tokenizer) in eval mode, each in the dtype its folder stores unless given (causal
    LMs, or seq2seq models for an encoder-decoder pair such as the T5 one); the tokenizer as stored."""
    ensure_if_demo_target(target_path)
    for path in (draft_path, target_path):
        if not (Path(path) / "config.json").exists():
            raise FileNotFoundError(
                f"{path}: no model here; build the demo draft with `bash bash_scripts/demo/build_demo_models.sh`"
            )
    tokenizer = AutoTokenizer.from_pretrained(target_path)
    check_same_tokenizer(draft_path, target_path, tokenizer)
    draft = load_model(draft_path, draft_dtype).eval()
    target = load_model(target_path, dtype).eval()
    return draft, target, tokenizer
