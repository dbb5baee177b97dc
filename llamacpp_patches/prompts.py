"""The prompt template handed to `llama-osd-stream`, rendered from the Python side's template.

`llama-osd-stream --osd-template T` builds each prompt as `T.replace("{query}", query)` and tokenizes
it with the GGUF's tokenizer (BOS added unless the text starts with it), which is what
`osd.prompting.encode_prompt` does with the HF tokenizer. The template is obtained by rendering
`osd.prompting.prompt_text` once with a sentinel query, so chat templates and the vicuna_v1.1
fallback are handled alike.
"""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase

from osd.conversations import user_query
from osd.prompting import prompt_text

PLACEHOLDER = "{query}"
_SENTINEL = "OSDQUERYSENTINEL7319"


def osd_template(tokenizer: PreTrainedTokenizerBase) -> str:
    """The `--osd-template` string equivalent to `prompt_text(tokenizer, query)`."""
    text = prompt_text(tokenizer, _SENTINEL)
    if text.count(_SENTINEL) != 1 or PLACEHOLDER in text:
        raise ValueError(
            f"the prompt template of {tokenizer.name_or_path!r} does not insert the query exactly once "
            f"(rendered: {text!r:.300}); llama-osd-stream needs one {PLACEHOLDER} slot"
        )
    return text.replace(_SENTINEL, PLACEHOLDER)


def render(template: str, query: str) -> str:
    """What llama-osd-stream does with the template (a literal replace, not str.format)."""
    return template.replace(PLACEHOLDER, query, 1)


def template_mismatches(tokenizer: PreTrainedTokenizerBase, template: str, records: list[dict]) -> list[int]:
    """Indices of records whose prompt the template would render differently from osd.prompting.

    A chat template that transforms the content (e.g. trims it) renders differently for some queries.
    """
    return [
        i
        for i, r in enumerate(records)
        if render(template, user_query(r)) != prompt_text(tokenizer, user_query(r))
    ]
