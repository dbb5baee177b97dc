"""Turning a user query into prompt token ids, the same way in every tool.

With a tokenizer that has a chat template, the template is applied with a generation prompt.
Without one, the FastChat `vicuna_v1.1` template is used (the reference code's choice), i.e.
`"{VICUNA_SYSTEM} USER: {query} ASSISTANT:"` with the tokenizer's BOS token. The answer is
tokenized on its own (no special tokens) and followed by EOS, so that the loss can mask the
prompt exactly.
"""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase

VICUNA_SYSTEM = (
    "A chat between a curious user and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the user's questions."
)
PLAIN_TEMPLATE = VICUNA_SYSTEM + " USER: {query} ASSISTANT:"


def prompt_text(tokenizer: PreTrainedTokenizerBase, query: str) -> str:
    """The prompt string for `query` (without BOS when the template does not write one)."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": query}], add_generation_prompt=True, tokenize=False
        )
    return PLAIN_TEMPLATE.format(query=query)


def encode_prompt(tokenizer: PreTrainedTokenizerBase, query: str) -> list[int]:
    """Token ids of the prompt for `query`, BOS included exactly once."""
    text = prompt_text(tokenizer, query)
    has_bos_text = tokenizer.bos_token is not None and text.startswith(tokenizer.bos_token)
    return tokenizer(text, add_special_tokens=not has_bos_text).input_ids


def encode_answer(tokenizer: PreTrainedTokenizerBase, answer: str) -> list[int]:
    """Token ids of an assistant answer, followed by EOS."""
    ids = tokenizer(answer, add_special_tokens=False).input_ids
    return ids + ([tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else [])
