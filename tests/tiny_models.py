"""The tests' one builder of tiny tokenizers and tiny random models (built in seconds, no downloads)."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    GPTBigCodeConfig,
    GPTBigCodeForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    OPTConfig,
    OPTForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    T5Config,
    T5ForConditionalGeneration,
)

VOCAB = 64
EOS = 2  # every tiny model's eos_token_id
# the tokenizer identity (osd.analysis.recording) recorded for tiny_model pairs, which have no tokenizer
RANDOM_TOKENIZER = {"name": "random", "vocab_size": VOCAB, "vocab_sha256": "0" * 64}


def tiny_tokenizer(
    vocab: Iterable[str] | Mapping[str, int],
    *,
    split_punctuation: bool = True,
    template: str | None = "<s> $A",
    bos: str | None = "<s>",
    eos: str = "</s>",
    unk: str = "<unk>",
    pad: str | None = "<pad>",
) -> PreTrainedTokenizerFast:
    """A word-level tokenizer: `vocab` maps words to ids (or lists them, first occurrence = id).

    Words are split on whitespace and, with `split_punctuation`, between word characters and
    punctuation (`pre_tokenizers.Whitespace`); `template` is the post-processor's single-sequence
    template (special tokens and `$A`), None for none; `bos` and `pad` None leave them unset."""
    if not isinstance(vocab, Mapping):
        vocab = {word: i for i, word in enumerate(dict.fromkeys(vocab))}
    backend = Tokenizer(models.WordLevel(vocab=dict(vocab), unk_token=unk))
    backend.pre_tokenizer = (
        pre_tokenizers.Whitespace() if split_punctuation else pre_tokenizers.WhitespaceSplit()
    )
    if template is not None:
        specials = [(piece, vocab[piece]) for piece in template.split() if piece != "$A"]
        backend.post_processor = processors.TemplateProcessing(single=template, special_tokens=specials)
    tokens = {"bos_token": bos, "eos_token": eos, "unk_token": unk, "pad_token": pad}
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, **{key: token for key, token in tokens.items() if token is not None}
    )


def tiny_llama_config(
    vocab_size: int = VOCAB, layers: int = 2, hidden: int = 32, kv_heads: int = 4, **overrides
) -> LlamaConfig:
    """A Llama config of 4 heads, MLP width 2 * `hidden`, 256 positions, ids pad 0, bos 1, eos EOS;
    `overrides` set or replace config fields (e.g. `pad_token_id=None`)."""
    fields = dict(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=kv_heads,
        max_position_embeddings=256,
        bos_token_id=1,
        eos_token_id=EOS,
        pad_token_id=0,
    )
    return LlamaConfig(**{**fields, **overrides})


def tiny_llama(
    vocab_size: int = VOCAB,
    layers: int = 2,
    hidden: int = 32,
    seed: int = 0,
    head_scale: float = 1.0,
    **config,
) -> LlamaForCausalLM:
    """A random `tiny_llama_config(vocab_size, layers, hidden, **config)` model in eval mode, its
    output head multiplied by `head_scale` (sharper logits: fewer greedy near-ties)."""
    torch.manual_seed(seed)
    model = LlamaForCausalLM(tiny_llama_config(vocab_size, layers, hidden, **config)).eval()
    if head_scale != 1.0:
        with torch.no_grad():
            model.get_output_embeddings().weight.mul_(head_scale)
    return model


def tiny_t5_config(vocab_size: int = VOCAB, layers: int = 2, d_model: int = 32, **overrides) -> T5Config:
    """A T5 config of 4 heads of width 8, MLP width 2 * `d_model`, `layers` encoder and decoder layers,
    ids pad 0 (the decoder start) and eos EOS; `overrides` set or replace config fields."""
    fields = dict(
        vocab_size=vocab_size,
        d_model=d_model,
        d_kv=8,
        d_ff=2 * d_model,
        num_layers=layers,
        num_decoder_layers=layers,
        num_heads=4,
        decoder_start_token_id=0,
        eos_token_id=EOS,
        pad_token_id=0,
    )
    return T5Config(**{**fields, **overrides})


def _config(family: str, layers: int):
    # a wide initialisation keeps random models from repeating one token forever
    if family == "llama":
        return tiny_llama_config(VOCAB, layers, initializer_range=0.3)
    common = dict(vocab_size=VOCAB, bos_token_id=1, eos_token_id=EOS, pad_token_id=0, initializer_range=0.3)
    if family == "mistral":  # grouped-query attention
        return MistralConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=256,
            sliding_window=None,
            **common,
        )
    if family == "gpt2":
        return GPT2Config(n_embd=32, n_layer=layers, n_head=4, n_positions=256, **common)
    if family == "opt":
        return OPTConfig(
            hidden_size=32,
            ffn_dim=64,
            num_hidden_layers=layers,
            num_attention_heads=4,
            max_position_embeddings=256,
            word_embed_proj_dim=32,
            **common,
        )
    if family == "gpt_bigcode":  # multi-query attention
        return GPTBigCodeConfig(
            n_embd=32, n_layer=layers, n_head=4, n_positions=256, multi_query=True, **common
        )
    if family == "t5":
        return tiny_t5_config(
            VOCAB, layers, initializer_factor=3.0, feed_forward_proj="gated-gelu", tie_word_embeddings=False
        )
    raise ValueError(family)


_CLASSES = {
    "llama": LlamaForCausalLM,
    "mistral": MistralForCausalLM,
    "gpt2": GPT2LMHeadModel,
    "opt": OPTForCausalLM,
    "gpt_bigcode": GPTBigCodeForCausalLM,
    "t5": T5ForConditionalGeneration,
}
FAMILIES = tuple(_CLASSES)


def tiny_model(family: str, layers: int = 2, seed: int = 0, **overrides) -> PreTrainedModel:
    """A random model of `family` (see FAMILIES); `overrides` set config fields."""
    torch.manual_seed(seed)
    config = _config(family, layers)
    for key, value in overrides.items():
        setattr(config, key, value)
    return _CLASSES[family](config).eval()


def draft_from_target(target: PreTrainedModel, noise: float, seed: int = 1) -> PreTrainedModel:
    """A draft that agrees with the target often but not always: its weights plus Gaussian noise."""
    draft = copy.deepcopy(target)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in draft.parameters():
            param.add_(noise * param.std().nan_to_num(0.0) * torch.randn(param.shape, generator=gen))
    return draft


def recorded_tiny_target(max_new_tokens: int, num_prompts: int = 6, top_k: int = 8, layers: int = 2,
                         features: bool = False):  # fmt: skip
    """A tiny Llama target of `layers` layers and `osd.analysis.record`'s recording of it (top-k kept; with
    `features`, the states an EAGLE-3 head reads, which needs 4 layers or more) on seeded random prompts p0, p1,
    ...: what replay tests serve against. Returns (target, recording)."""
    from osd.analysis.record import record_prompts
    from osd.spec.eagle3 import eagle3_layers

    target = tiny_model("llama", layers=layers, seed=3)
    gen = torch.Generator().manual_seed(0)
    prompts = [(f"p{i}", torch.randint(3, VOCAB, (6,), generator=gen).tolist()) for i in range(num_prompts)]
    header = {"tokenizer": RANDOM_TOKENIZER, "vocab_rows": VOCAB}
    recording = record_prompts(target, prompts, header, max_new_tokens, eos_token_id=EOS, top_k=top_k,
                               feature_layers=eagle3_layers(layers) if features else ())  # fmt: skip
    return target, recording


def distilled_head(target: PreTrainedModel, vocab_size: int | None, steps: int):
    """An EAGLE-3 head over the `vocab_size` ids the target writes most (None: its whole vocabulary), distilled for
    `steps` AdamW steps on 8 of the target's sampled continuations of random 6-token prompts (seconds): it agrees
    with the target sometimes, not always."""
    from collections import Counter
    from functools import partial

    from osd.distill.losses import forward_kl
    from osd.online.head_loss import FeatureQuery, head_distillation_loss, target_features
    from osd.spec.draft_vocab import select_token_ids
    from osd.spec.eagle3 import Eagle3Head

    vocab = target.get_input_embeddings().num_embeddings
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, vocab, (1, 6), generator=gen) for _ in range(8)]
    torch.manual_seed(0)
    sequences = [
        target.generate(p, max_new_tokens=40, do_sample=True, top_k=0, pad_token_id=0)[0] for p in prompts
    ]
    ids = (
        None
        if vocab_size is None
        else select_token_ids(Counter(torch.cat(sequences).tolist()), vocab_size, [EOS])
    )
    head = Eagle3Head.for_target(target, ids)
    queries = []
    for tokens in sequences:
        with torch.no_grad():
            logits = target(tokens[None, :-1]).logits[0]  # row j predicts tokens[j + 1]
        positions = torch.arange(2, len(tokens))
        features = target_features(target, head.target_layers, tokens)
        queries.append(FeatureQuery(tokens, features, positions, logits[positions - 1]))
    loss = partial(head_distillation_loss, embed=target.get_input_embeddings(), divergence=forward_kl)
    optimizer = torch.optim.AdamW(head.parameters(), lr=3e-3)
    head.train()
    for step in range(steps):
        loss(head, queries[step % 2 * 4 : step % 2 * 4 + 4], torch.Tensor.backward)
        optimizer.step()
        optimizer.zero_grad()
    return head.eval()
