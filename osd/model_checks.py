"""Checks made where a draft and its target are loaded: each path names a model that loads (a load
failure names the path), both share one tokenizer (the same vocabulary and special ids, not just the
same size), and the training length and prompts fit both contexts."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from safetensors import SafetensorError
from transformers import AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from osd.spec.decoder import context_limit

logger = logging.getLogger(__name__)

HUB_ID = re.compile(r"[\w.-]+(/[\w.-]+)?")  # what the hub accepts as a repo id
SPECIAL_IDS = ("bos_token_id", "eos_token_id", "unk_token_id")
DEFAULT_MAX_LENGTH = (
    512  # --model_max_length's default: lowered to a shorter context, where a given value is refused
)


def check_model_path(path: str | Path) -> None:
    """Raise when `path` is neither an existing folder nor a hub id (org/name).

    A path whose first folder exists here (`runs/draft` with a `runs/` folder) is taken as local.
    """
    p = Path(path)
    if p.exists():
        return
    local_looking = str(path).startswith((".", "/", "~")) or (len(p.parts) > 1 and Path(p.parts[0]).is_dir())
    if HUB_ID.fullmatch(str(path)) and not local_looking:
        return  # the hub (or its offline cache) answers for it
    raise FileNotFoundError(
        f"model path {path}: no such folder here (and not a hub id of the form org/name); "
        "give the folder of a saved model (with its config.json) or a hub id"
    )


class ModelLoadError(ValueError):
    """A model, config or tokenizer that cannot be loaded from the path given."""


def load_pretrained(auto: Any, path: str | Path, hint: str = "", **kwargs: Any) -> Any:
    """`auto.from_pretrained(path, **kwargs)`; a failure (a missing or truncated file, a hub id that is
    not cached when offline) raises ModelLoadError naming the path, the library's reason and `hint`."""
    try:
        return auto.from_pretrained(path, **kwargs)
    except (OSError, ValueError, SafetensorError) as e:
        what = next((w for w in ("tokenizer", "config") if w in auto.__name__.lower()), "model")
        reason = " ".join(str(e).split()) or type(e).__name__
        raise ModelLoadError(f"{path}: cannot load its {what} ({reason}){'; ' + hint if hint else ''}") from e


def tokenizer_difference(draft: PreTrainedTokenizerBase, target: PreTrainedTokenizerBase) -> str | None:
    """How two tokenizers differ in vocabulary or special ids (None when they agree); a pad id
    set on one side only is not a difference (osd.train pads with unk or eos)."""
    dv, tv = draft.get_vocab(), target.get_vocab()
    if dv != tv:
        moved = sorted(t for t in dv.keys() & tv.keys() if dv[t] != tv[t])
        only = sorted(dv.keys() ^ tv.keys())
        example = (
            f"{moved[0]!r} is id {dv[moved[0]]} vs {tv[moved[0]]}" if moved else f"{only[0]!r} is in one only"
        )
        return (
            f"vocabularies differ ({len(dv)} vs {len(tv)} tokens; {len(moved)} shared tokens with other ids, "
            f"{len(only)} in one only; e.g. {example})"
        )
    for name in (*SPECIAL_IDS, "pad_token_id"):
        d, t = getattr(draft, name), getattr(target, name)
        if d != t and (name != "pad_token_id" or None not in (d, t)):
            return f"{name} {d} vs {t}"
    return None


def check_same_tokenizer(
    draft_path: str | Path,
    target_path: str | Path,
    target_tokenizer: PreTrainedTokenizerBase,
    cache_dir: str | None = None,
) -> None:
    """Raise when the draft's own tokenizer is not the target's; a draft folder without a tokenizer
    is only warned about (its vocabulary size is checked where the models meet)."""
    try:
        draft_tokenizer = AutoTokenizer.from_pretrained(draft_path, cache_dir=cache_dir)
    except (OSError, ValueError, TypeError) as e:
        logger.warning("%s has no tokenizer (%s): cannot check it is the target's", draft_path, e)
        return
    difference = tokenizer_difference(draft_tokenizer, target_tokenizer)
    if difference:
        raise ValueError(
            f"draft {draft_path} and target {target_path} have different tokenizers: {difference}. Speculative "
            "decoding and distillation compare token ids: use a draft built with the target's tokenizer"
        )


def fit_lengths(
    model_max_length: int, max_new_tokens: int, student: PreTrainedModel, teacher: PreTrainedModel
) -> tuple[int, int]:
    """(training length, longest prompt) within both models' contexts; a prompt (decoder-only)
    leaves --max_new_tokens of room to generate.

    A --model_max_length given past a context is an error (training would run past the model's
    positions); the default (512) is lowered to the context.
    """
    contexts = {
        name: c
        for name, c in (
            ("student", context_limit(student.config)),
            ("teacher", context_limit(teacher.config)),
        )
        if c is not None
    }
    if not contexts:
        return model_max_length, model_max_length - 1
    context = min(contexts.values())
    if model_max_length > context:
        if model_max_length != DEFAULT_MAX_LENGTH:
            name = min(contexts, key=contexts.get)
            raise ValueError(
                f"--model_max_length {model_max_length} exceeds the {name}'s context of {context} positions; "
                f"set --model_max_length {context} or less"
            )
        logger.info("--model_max_length %d lowered to the models' context %d", model_max_length, context)
        model_max_length = context
    limit = min(model_max_length - 1, context - max_new_tokens)
    if limit < 1:
        raise ValueError(
            f"--max_new_tokens {max_new_tokens} leaves no room for a prompt in the context of {context} positions; "
            "lower it"
        )
    return model_max_length, limit


def check_vocabularies(
    student: PreTrainedModel, teacher: PreTrainedModel, tokenizer: PreTrainedTokenizerBase | None
) -> None:
    """Distillation compares distributions token by token: one vocabulary for both models."""
    s, t = student.config.vocab_size, teacher.config.vocab_size
    if s != t:
        raise ValueError(
            f"--student_model_path has vocab_size {s} but --teacher_model_path has {t}; "
            "use a student and teacher that share a tokenizer and vocabulary"
        )
    if tokenizer is not None and len(tokenizer) > s:
        raise ValueError(
            f"the teacher's tokenizer has {len(tokenizer)} tokens, more than the models' vocab_size {s}"
        )
    if student.config.is_encoder_decoder != teacher.config.is_encoder_decoder:
        raise ValueError("student and teacher must both be decoder-only or both encoder-decoder")
