"""Conversation records -> token ids -> batches for the distillation trainer.

Symbols: B batch, P padded prompt length, L padded training length.

A dataset item (one record, tokenized once for the whole set with `Dataset.map`):
    prompt_ids   list[int]  the prompt (osd.prompting.encode_prompt; for encoder-decoder models the
                            query itself plus EOS), unpadded
    input_ids    list[int]  only when the record has an answer: prompt + answer + EOS (decoder-only)
                            or the prompt (encoder-decoder, the encoder's input)
    labels       list[int]  same length as the decoder tokens; -100 on the prompt (decoder-only),
                            the answer + EOS otherwise
    index        int        the record's index in its source (file, or split of a folder / hub dataset)
    dataset/topic/language  str, when the record carries them (per-group alpha)

A training batch (`make_train_batch`), always right-padded:
    input_ids, attention_mask  [B, L]
    labels                     [B, L] (decoder-only) or [B, Ld] (encoder-decoder); -100 = not a response token
    decoder_input_ids, decoder_attention_mask  [B, Ld], encoder-decoder only
    loss_mask                  bool, the logits' leading shape: True where the logits predict a response token
"""

from __future__ import annotations

import logging

import torch
from torch.utils.data import Dataset
from transformers import PreTrainedTokenizerBase

from osd.conversations import (
    GROUP_FIELDS,
    ConversationSource,
    assistant_answer,
    load_conversation_dataset,
    record_groups,
    user_query,
)
from osd.prompting import encode_answer, encode_prompt

IGNORE_INDEX = -100
TRUNCATION_WARNINGS = 5  # truncated records named one by one; the rest are counted

logger = logging.getLogger(__name__)


def truncate_prompt(prompt: list[int], max_len: int) -> list[int]:
    """Keep the first token (BOS) and the last `max_len - 1`: the end of a chat prompt ("ASSISTANT:") matters most."""
    return prompt if len(prompt) <= max_len else prompt[:1] + prompt[len(prompt) - max_len + 1 :]


def tokenize_record(
    record: dict,
    index: int,
    tokenizer: PreTrainedTokenizerBase,
    model_max_length: int,
    prompt_max_length: int,
    is_encoder_decoder: bool,
    query_prefix: str,
) -> dict:
    """One record's item (module docstring; None for absent fields) plus `prompt_length`, its prompt's
    length before truncation to `prompt_max_length`. A `Dataset.map` function."""
    query = query_prefix + user_query(record)
    if is_encoder_decoder:  # T5 reads the bare query (its tokenizer appends EOS)
        full = tokenizer(query).input_ids
    else:
        full = encode_prompt(tokenizer, query)
    prompt = truncate_prompt(full, prompt_max_length)
    item: dict = {
        "prompt_ids": prompt,
        "index": index,
        "prompt_length": len(full),
        "input_ids": None,
        "labels": None,
    }
    item.update({name: record_groups(record).get(name) for name in GROUP_FIELDS})
    answer = assistant_answer(record)
    if answer is not None:
        if is_encoder_decoder:
            item["input_ids"] = prompt
            item["labels"] = encode_answer(tokenizer, answer)[:model_max_length]
        else:
            response = encode_answer(tokenizer, answer)[: model_max_length - len(prompt)]
            item["input_ids"] = prompt + response
            item["labels"] = [IGNORE_INDEX] * len(prompt) + response
    return item


class ConversationDataset(Dataset):
    """Conversation records (`osd.conversations.load_conversation_dataset`: a file, a folder, a hub
    dataset name with `split`, or a `datasets.Dataset`), validated and tokenized once with
    `Dataset.map` (cached by `datasets` when the records come from its cache).

    `records` are the validated records (a `datasets.Dataset`), `items` their tokenized items,
    `truncated` the indices of records whose prompt was truncated, `name` the source in messages."""

    def __init__(
        self,
        source: ConversationSource,
        tokenizer: PreTrainedTokenizerBase,
        model_max_length: int = 512,
        is_encoder_decoder: bool = False,
        max_samples: int | None = None,
        prompt_max_length: int | None = None,
        query_prefix: str = "",
        split: str = "train",
        flag: str = "--data_path",
    ) -> None:
        """`prompt_max_length` (decoder-only; default model_max_length - 1) leaves room for generation;
        `query_prefix` goes before every query (--source_prefix)."""
        records, self.name = load_conversation_dataset(source, split, flag)
        self.query_prefix = query_prefix
        self.records = records.select(range(min(max_samples, len(records)))) if max_samples else records
        self.prompt_max_length = (
            model_max_length if is_encoder_decoder else (prompt_max_length or model_max_length - 1)
        )
        self.items = self.records.map(
            tokenize_record,
            with_indices=True,
            remove_columns=self.records.column_names,
            fn_kwargs={
                "tokenizer": tokenizer,
                "model_max_length": model_max_length,
                "prompt_max_length": self.prompt_max_length,
                "is_encoder_decoder": is_encoder_decoder,
                "query_prefix": self.query_prefix,
            },
            desc="tokenizing",
        )
        lengths = self.items["prompt_length"]
        self.truncated = [i for i, n in enumerate(lengths) if n > self.prompt_max_length]
        for i in self.truncated[:TRUNCATION_WARNINGS]:
            logger.warning(
                "%s, record %d: prompt of %d tokens truncated to its first token and last %d",
                self.name, i, lengths[i], self.prompt_max_length - 1,
            )  # fmt: skip
        if self.truncated:
            logger.warning(
                "%s: %d of %d prompts truncated to %d tokens",
                self.name, len(self.truncated), len(lengths), self.prompt_max_length,
            )  # fmt: skip

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict:
        row = self.items[index]
        return {k: v for k, v in row.items() if v is not None and k != "prompt_length"}


def pad(seqs: list[list[int]], pad_value: int, side: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad to the longest; returns (ids [B, L], attention_mask [B, L]); side is "left" (generation) or "right"."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_value, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        span = slice(width - len(s), width) if side == "left" else slice(0, len(s))
        ids[i, span] = torch.tensor(s, dtype=torch.long)
        mask[i, span] = 1
    return ids, mask


def unpad(ids: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
    """Rows of `ids` [B, L] without their padding (mask 0)."""
    return [row[m.bool()].tolist() for row, m in zip(ids, mask, strict=True)]


def loss_mask_from_labels(labels: torch.Tensor, is_encoder_decoder: bool) -> torch.Tensor:
    """[B, L] bool over logits positions: True where the logits predict a response token.

    Decoder-only logits at position t predict token t+1 (the shift); encoder-decoder logits at
    decoder position t predict labels[t].
    """
    counted = labels != IGNORE_INDEX
    if is_encoder_decoder:
        return counted
    return torch.cat([counted[:, 1:], torch.zeros_like(counted[:, :1])], dim=1)


def make_train_batch(
    prompts: list[list[int]],
    responses: list[list[int]],
    pad_token_id: int,
    is_encoder_decoder: bool = False,
    decoder_start_token_id: int | None = None,
    max_length: int | None = None,
) -> dict[str, torch.Tensor]:
    """The right-padded training batch (module docstring) for prompt i followed by response i."""
    if is_encoder_decoder:
        if decoder_start_token_id is None:
            raise ValueError("an encoder-decoder batch needs the model's decoder_start_token_id")
        responses = [r[:max_length] for r in responses] if max_length else responses
        input_ids, attention_mask = pad(prompts, pad_token_id, "right")
        labels, decoder_attention_mask = pad(responses, IGNORE_INDEX, "right")
        # teacher forcing: the decoder reads [start] + response[:-1] and predicts response
        decoder_input_ids, _ = pad(
            [[decoder_start_token_id] + r[:-1] for r in responses], pad_token_id, "right"
        )
        batch = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "decoder_input_ids": decoder_input_ids,
            "decoder_attention_mask": decoder_attention_mask,
            "labels": labels,
        }
    else:
        seqs = [(p + r)[:max_length] for p, r in zip(prompts, responses, strict=True)]
        input_ids, attention_mask = pad(seqs, pad_token_id, "right")
        label_seqs = [
            ([IGNORE_INDEX] * len(p) + r)[:max_length] for p, r in zip(prompts, responses, strict=True)
        ]
        labels, _ = pad(label_seqs, IGNORE_INDEX, "right")
        batch = {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}
    batch["loss_mask"] = loss_mask_from_labels(batch["labels"], is_encoder_decoder)
    return batch


def responses_from_labels(labels: torch.Tensor) -> list[list[int]]:
    """The response tokens of each row of `labels` [B, L] (everything not -100)."""
    return [row[row != IGNORE_INDEX].tolist() for row in labels]


class DistillCollator:
    """Items -> batch: `prompt_ids`/`prompt_attention_mask` left-padded [B, P] (ready for generation),
    plus the training batch of `make_train_batch` when every item has an answer, plus `index` and
    the group fields as lists (None where an item lacks the field)."""

    def __init__(
        self,
        pad_token_id: int,
        is_encoder_decoder: bool = False,
        decoder_start_token_id: int | None = None,
        max_length: int | None = None,
    ) -> None:
        self.pad_token_id = pad_token_id
        self.is_encoder_decoder = is_encoder_decoder
        self.decoder_start_token_id = decoder_start_token_id
        self.max_length = max_length

    def __call__(self, items: list[dict]) -> dict:
        prompts = [list(item["prompt_ids"]) for item in items]
        prompt_ids, prompt_attention_mask = pad(prompts, self.pad_token_id, "left")
        batch: dict = {"prompt_ids": prompt_ids, "prompt_attention_mask": prompt_attention_mask}
        if all("labels" in item for item in items):
            responses = [[t for t in item["labels"] if t != IGNORE_INDEX] for item in items]
            batch.update(
                make_train_batch(
                    prompts,
                    responses,
                    self.pad_token_id,
                    self.is_encoder_decoder,
                    self.decoder_start_token_id,
                    self.max_length,
                )
            )
        batch["index"] = [item.get("index") for item in items]
        for name in GROUP_FIELDS:
            if any(name in item for item in items):
                batch[name] = [item.get(name) for item in items]
        return batch
