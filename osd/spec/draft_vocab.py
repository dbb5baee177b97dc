"""Sub-vocabulary draft heads (after FR-Spec, Zhao et al. 2025): the draft scores only V' chosen tokens.

A draft's LM head is most of its cost when the vocabulary is large (SmolLM2: 49152 rows x 256 for
a 2-layer draft). Restricting the head to the V' tokens the target actually writes (the most
frequent ones in its answers) cuts that cost by V / V' while the tokens outside V' are rare.

How it works. `SubVocabHead` replaces the model's output embedding. It keeps the full weight (the
same Parameter, so tied embeddings stay tied and `save_pretrained` writes the usual checkpoint) and
an index buffer `token_ids` [V']. In its default mode it returns logits over the FULL vocabulary
with -inf outside V': q = 0 there, so every consumer (greedy argmax, rejection sampling, the exact
alpha sum_v min(p, q), HF assisted generation) works unchanged and speculative decoding stays
exact: the target's distribution is reproduced whatever the draft proposes. Under
`compact_logits(model)` it returns the V' logits only (training: no [B, T, V] scatter).

Losses. `restrict_divergence` compares student and teacher on V' only: the teacher's logits are
gathered at V' and renormalised there (forward KL against p renormalised on V', and likewise for
the other divergences); `outside_mass` reports the teacher's probability outside V', the part no
draft with this head can match.

Save and load. The token set travels in the model's config (`config.draft_vocab`, a sorted list of
ids; HF keeps unknown config attributes), so `from_pretrained` restores it and any tool that does
not know about it (vLLM, llama.cpp, HF) sees an ordinary full-vocabulary model. `apply_draft_vocab`
(called by the engine, the trainer and `osd.analysis.simulate`) installs the head from the config.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import torch
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

CONFIG_KEY = "draft_vocab"


class SubVocabHead(nn.Module):
    """LM head over `token_ids` [V'] of a full weight [V, H] (see the module docstring)."""

    def __init__(self, weight: nn.Parameter, bias: nn.Parameter | None, token_ids: torch.Tensor) -> None:
        super().__init__()
        self.weight = weight  # [V, H], shared with the full head (and the input embedding when tied)
        self.bias = bias  # [V] or None
        self.register_buffer("token_ids", token_ids.to(weight.device, torch.long), persistent=False)
        self.compact = False
        self._cached: tuple[int, int, torch.Tensor] | None = None  # (data_ptr, version, rows) for serving
        # (rows [V', H],) while a trainer trains the rows as their own weight (osd.distill.subvocab); a tuple,
        # so that the embedding that owns the Parameter stays its only registered holder
        self.trained_rows: tuple[nn.Parameter, ...] = ()

    def _rows(self) -> torch.Tensor:
        """weight[token_ids] [V', H]; cached while the weight is unchanged and no gradient is needed."""
        if torch.is_grad_enabled() and self.trained_rows:
            return self.trained_rows[0]
        # (a weight made under inference mode keeps no version counter to cache by)
        if (torch.is_grad_enabled() and self.weight.requires_grad) or self.weight.is_inference():
            return self.weight.index_select(0, self.token_ids)
        key = (self.weight.data_ptr(), self.weight._version)
        if self._cached is None or self._cached[:2] != key or self._cached[2].dtype != self.weight.dtype:
            with torch.no_grad():
                self._cached = (*key, self.weight.index_select(0, self.token_ids))
        return self._cached[2]

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [..., H] -> logits [..., V] (-inf outside V'), or [..., V'] under `compact_logits`."""
        logits = hidden @ self._rows().to(hidden.dtype).T  # [..., V']
        if self.bias is not None:
            logits = logits + self.bias.index_select(0, self.token_ids).to(logits.dtype)
        if self.compact:
            return logits
        return full_vocab_logits(logits, self.token_ids, self.weight.shape[0])


def full_vocab_logits(logits: torch.Tensor, token_ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Logits over V' [..., V'] placed in a [..., vocab_size] vector, -inf elsewhere (q = 0 outside V')."""
    full = logits.new_full((*logits.shape[:-1], vocab_size), float("-inf"))
    return full.index_copy_(-1, token_ids, logits)


def draft_vocab_ids(model: PreTrainedModel) -> torch.Tensor | None:
    """The model's head token set [V'] (sorted ids), or None for a full-vocabulary head."""
    head = model.get_output_embeddings()
    if isinstance(head, SubVocabHead):
        return head.token_ids
    ids = getattr(model.config, CONFIG_KEY, None)
    return torch.tensor(ids, dtype=torch.long) if ids else None


def set_draft_vocab(
    model: PreTrainedModel, token_ids: Sequence[int] | torch.Tensor | None
) -> PreTrainedModel:
    """Give `model` a head over `token_ids` only (None: the full head again); recorded in its config."""
    head = model.get_output_embeddings()
    if head is None:
        raise ValueError(f"{type(model).__name__} has no output embedding to restrict")
    full = head.weight.shape[0]
    if isinstance(head, SubVocabHead):
        head = _full_head(head)
    if token_ids is None:
        model.set_output_embeddings(head)
        setattr(model.config, CONFIG_KEY, None)
        return model
    ids = torch.as_tensor(token_ids, dtype=torch.long).unique(sorted=True)  # [V']
    if ids.numel() == 0 or int(ids[0]) < 0 or int(ids[-1]) >= full:
        raise ValueError(
            f"draft vocabulary ids must be non-empty and within [0, {full}), got {ids.numel()} ids"
        )
    model.set_output_embeddings(SubVocabHead(head.weight, getattr(head, "bias", None), ids))
    setattr(model.config, CONFIG_KEY, ids.tolist())
    return model


def _full_head(head: SubVocabHead) -> nn.Linear:
    linear = nn.Linear(head.weight.shape[1], head.weight.shape[0], bias=head.bias is not None)
    linear.weight = head.weight
    if head.bias is not None:
        linear.bias = head.bias
    return linear


def apply_draft_vocab(model: PreTrainedModel) -> PreTrainedModel:
    """Install the head that `config.draft_vocab` names (a model saved with one); else no change."""
    ids = getattr(model.config, CONFIG_KEY, None)
    if ids and not isinstance(model.get_output_embeddings(), SubVocabHead):
        set_draft_vocab(model, ids)
    return model


@contextlib.contextmanager
def compact_logits(model: nn.Module) -> Iterator[None]:
    """Within: a sub-vocabulary head returns logits [..., V'] (no scatter); a full head is unchanged."""
    unwrapped = getattr(model, "module", model)  # DDP
    head = unwrapped.get_output_embeddings() if hasattr(unwrapped, "get_output_embeddings") else None
    if not isinstance(head, SubVocabHead):
        yield
        return
    head.compact = True
    try:
        yield
    finally:
        head.compact = False


def restrict_divergence(divergence: Callable[..., torch.Tensor], token_ids: torch.Tensor | None):
    """`divergence` computed on the token set only: the teacher's logits are gathered at `token_ids`
    (so renormalised on V'), and the student's, each unless it already is [..., V'] (compact)."""
    if token_ids is None:
        return divergence

    def on_subvocab(student: torch.Tensor, teacher: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        if student.shape[-1] != token_ids.numel():
            student = student.index_select(-1, token_ids.to(student.device))
        if teacher.shape[-1] != token_ids.numel():
            teacher = teacher.index_select(-1, token_ids.to(teacher.device))
        return divergence(student, teacher.to(student.device), *args, **kwargs)

    return on_subvocab


def outside_mass(
    teacher_logits: torch.Tensor, token_ids: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """The teacher's probability outside the token set, per position: logits [..., V] -> [...]."""
    log_p = torch.log_softmax(teacher_logits.float() / temperature, dim=-1)
    inside = torch.logsumexp(log_p.index_select(-1, token_ids.to(log_p.device)), dim=-1)
    return -torch.expm1(inside)


# ---- the token set: the most frequent tokens of the target's answers --------------------------------


def count_tokens(answers: Iterable[str], tokenizer: PreTrainedTokenizerBase) -> tuple[Counter, int]:
    """Token counts of the answers, each followed by EOS (the end of every answer); and the number of answers."""
    counts: Counter = Counter()
    n = 0
    for answer in answers:
        counts.update(tokenizer(answer, add_special_tokens=False).input_ids)
        if tokenizer.eos_token_id is not None:
            counts[tokenizer.eos_token_id] += 1
        n += 1
    return counts, n


def select_token_ids(counts: dict[int, int], size: int, always: Sequence[int] = ()) -> list[int]:
    """The `size` most frequent ids of `counts` (ties: lower id first), the `always` ids included
    (e.g. EOS, so the draft can propose the end of an answer); sorted."""
    if size < 1:
        raise ValueError(f"--draft_vocab_size must be >= 1, got {size}")
    chosen = set(always)
    for token, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if len(chosen) >= size:
            break
        chosen.add(token)
    return sorted(chosen)


def load_token_counts(path: str | Path) -> dict:
    """A token-frequency file written by `data/token_counts.py`: {"tokenizer", "num_tokens", "counts"}."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        counts = {int(token): int(n) for token, n in data["counts"]}
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{path}: token-frequency file not found (write one with data/token_counts.py)"
        ) from None
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{path}: not a token-frequency file of data/token_counts.py ({err})") from None
    return data | {"counts": counts}
