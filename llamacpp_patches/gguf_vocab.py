"""The vocabulary a GGUF file carries (`tokenizer.ggml.tokens`), checked against the HF tokenizer
whose token ids run.py serves (`--prompt_source ids`): a GGUF converted from another model would
read every prompt as other tokens."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from gguf import GGUFReader
from transformers import PreTrainedTokenizerBase

TOKENS = "tokenizer.ggml.tokens"


def gguf_tokens(path: str | Path, flag: str) -> list[str]:
    """The token strings of a GGUF file, by id."""
    try:
        field = GGUFReader(str(path)).fields.get(TOKENS)
    except (ValueError, IndexError) as e:  # not a GGUF file, or a truncated one
        raise ValueError(f"{flag} {path}: not a readable GGUF file ({e})") from None
    if field is None:
        raise ValueError(f"{flag} {path}: holds no vocabulary ({TOKENS}); convert the model with convert.sh")
    return [bytes(field.parts[i]).decode("utf-8", errors="replace") for i in field.data]


def check_gguf_vocab(
    tokenizer: PreTrainedTokenizerBase, tokenizer_path: str, ggufs: Mapping[str, str | Path]
) -> None:
    """Raise unless each GGUF (by flag) holds the tokenizer's tokens at the same ids; a GGUF may have
    more (a converter pads the vocabulary to the embedding's rows)."""
    hf = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    for flag, path in ggufs.items():
        tokens = gguf_tokens(path, flag)
        differ = next((i for i, (a, b) in enumerate(zip(hf, tokens, strict=False)) if a != b), None)
        if differ is None and len(tokens) >= len(hf):
            continue
        example = (
            f"id {differ} is {hf[differ]!r} vs {tokens[differ]!r}" if differ is not None else "fewer ids"
        )
        raise ValueError(
            f"--tokenizer_path {tokenizer_path} and {flag} {path} have different vocabularies ({len(hf)} vs "
            f"{len(tokens)} tokens; {example}): give the tokenizer of the model the GGUF was converted from"
        )
