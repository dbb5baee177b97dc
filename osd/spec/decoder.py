"""Speculative decoding: a draft proposes, the target verifies in one forward pass.

Symbols: T prompt length (decoder-only) or 1 (the decoder-start token, encoder-decoder),
L committed sequence length, k proposed tokens in a step (k <= gamma), V shared vocabulary.
See `osd.spec.sampling` for p/q, accepted, recovered and bonus tokens.

Each step (`SpeculativeDecoder._step`):
1. propose: the draft extends the committed sequence by k tokens, one forward each (KV cached);
2. verify: the target scores the last committed token and the k proposals in ONE forward;
3. accept/reject: n proposals are kept, then one target token (recovered or bonus);
4. both KV caches are cropped back to the committed sequence.

Cache invariant between steps: the target cache holds the first L - 1 committed tokens (the last
one is fed at the next verification), the draft cache holds at most L - 1.
"""

from __future__ import annotations

import time

import torch
from transformers import PretrainedConfig, PreTrainedModel

from osd.spec.adaptive import GammaPolicy, RowState
from osd.spec.batch_step import BatchRow, batch_step
from osd.spec.batched import RowCache
from osd.spec.cached_model import CachedModel
from osd.spec.draft_vocab import apply_draft_vocab
from osd.spec.drafter import DraftCache, Drafter, row_cache, sequence_cache, target_layers
from osd.spec.gamma import AUTO, DEFAULT, Gamma, parse_gamma
from osd.spec.lean_llama import LeanLlamaCache, target_cache
from osd.spec.records import SequenceRecord, SpecOutput, StepTimes
from osd.spec.sampling import (
    accept_reject,
    acceptance_probability,
    greedy,
    logits_to_probs,
    sample,
)

# Draft and target may differ by a few padding rows (e.g. an added [PAD] token, or an embedding
# matrix padded to a multiple of 64); a larger difference means different tokenizers.
MAX_VOCAB_PADDING = 128


def context_limit(config: PretrainedConfig) -> int | None:
    """Longest decoder sequence a model supports (None when positions are relative, e.g. T5)."""
    if config.is_encoder_decoder:
        return None
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(config, name, None)
        if isinstance(value, int):
            return value
    return None


class SpeculativeDecoder:
    """Draft-and-verify decoding whose output is distributed exactly as the target's (batch size 1)."""

    def __init__(
        self,
        draft_model: Drafter,
        target_model: PreTrainedModel,
        gamma: Gamma = DEFAULT,
        policy: GammaPolicy | None = None,
        lean_draft: bool = True,
        lean_target: bool = True,
        reuse_prompt: bool = True,
    ) -> None:
        """draft_model: a draft model, or an EAGLE-3 head (`osd.spec.eagle3`) that reads the target's hidden
        states (`osd.spec.drafter`). gamma: draft tokens per step (0: plain target decoding through this engine,
        a baseline), or "auto" (chosen per step by `policy`, by default a fresh `GammaPolicy()`; pass one to keep its
        estimate and measured costs across decoders). lean_draft, lean_target: a Llama draft and a Llama target step
        through `osd.spec.lean_llama` (the same logits, without HF's per-call machinery), alone and in batches,
        where they can; False: always through HF's forward. reuse_prompt: a lean cache's first forward takes the
        leading tokens its prompt shares with the last prompt of the same weights from that prompt's cache
        (`osd.spec.lean_llama.LeanLlamaCache`); False: every prompt computed whole, so that a rerun repeats the last
        bit whatever ran before. The models are used as given, never retyped: a float32 CPU target verifies faster
        once its owner applies `osd.spec.weight_major.use_weight_major_linears` (to the target-only baseline too)."""
        gamma = parse_gamma(gamma, "gamma")
        if gamma == AUTO:
            policy = policy or GammaPolicy(lean_draft=lean_draft, lean_target=lean_target)
            gamma = policy.max_gamma
        elif policy is not None:
            raise ValueError(f"a GammaPolicy needs gamma='auto', got gamma={gamma!r}")
        self.policy = policy
        # the target layers whose input states an EAGLE-3 head reads, kept from each verification pass
        self.head_layers = target_layers(draft_model)
        v_target = target_model.get_output_embeddings().weight.shape[0]
        if self.head_layers:
            draft_model.check_target(target_model)
            if policy is not None:
                raise ValueError(
                    "gamma='auto' times a draft model's step; with an EAGLE-3 head give gamma as an int"
                )
            v_draft = draft_ids = draft_model.config.vocab_size
        else:
            v_draft = _check_draft_model(draft_model, target_model, v_target)
            apply_draft_vocab(draft_model)  # a draft saved with a sub-vocabulary head (config.draft_vocab)
            draft_ids = draft_model.get_input_embeddings().num_embeddings
        self.draft, self.target, self.gamma = draft_model, target_model, gamma
        self.lean_draft, self.lean_target, self.reuse_prompt = lean_draft, lean_target, reuse_prompt
        self.vocab_size = min(v_draft, v_target)
        # ids the prompt may hold: rows of both input embeddings
        self.num_input_ids = min(draft_ids, target_model.get_input_embeddings().num_embeddings)
        self.is_encoder_decoder = target_model.config.is_encoder_decoder
        limits = [
            x
            for x in (context_limit(draft_model.config), context_limit(target_model.config))
            if x is not None
        ]
        self.context_limit = min(limits) if limits else None

    @torch.inference_mode()
    def generate(
        self,
        input_ids: torch.Tensor,
        max_new_tokens: int = 128,
        temperature: float = 0.0,
        top_p: float = 1.0,
        eos_token_id: int | list[int] | None = None,
        generator: torch.Generator | None = None,
        return_target_logits: bool = False,
    ) -> SpecOutput:
        """Generate up to max_new_tokens after input_ids [1, T] (the encoder input for seq2seq models).
        return_target_logits: keep the target's logits that produced each token (`SpecOutput.target_logits`) and,
        when a head drafts, the target's states it read (`target_features`): what an online update trains on."""
        if input_ids.dim() != 2 or input_ids.shape[0] != 1:
            raise ValueError(
                f"SpeculativeDecoder.generate takes input_ids of shape [1, T], got {tuple(input_ids.shape)}"
            )
        _check_sampling(temperature, top_p)
        self._check_prompt(input_ids)
        start = time.perf_counter()
        (prefix,) = self._prefixes([input_ids[0].tolist()])
        budget = self._budget(prefix, max_new_tokens)
        encoder_ids = input_ids if self.is_encoder_decoder else None
        draft, target = (
            sequence_cache(self.draft, self.target, encoder_ids, self.lean_draft, self.reuse_prompt),
            target_cache(self.target, encoder_ids, self.head_layers, self.lean_target, self.reuse_prompt),
        )
        record, times, eos = (
            SequenceRecord(prefix, len(prefix), return_target_logits),
            StepTimes(),
            _eos(eos_token_id),
        )
        while record.num_generated < budget:
            remaining = budget - record.num_generated
            emitted = self._step(record, draft, target, times, remaining, eos, temperature, top_p, generator)
            if eos.intersection(emitted):
                break
        if self.policy is not None:
            self.policy.observe_row(record.alpha_sum, record.num_proposed)
        return record.to_output(eos, times, time.perf_counter() - start, input_ids.device)

    @torch.inference_mode()
    def generate_batch(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        max_new_tokens: int = 128,
        temperature: float = 0.0,
        top_p: float = 1.0,
        eos_token_id: int | list[int] | None = None,
        generator: torch.Generator | None = None,
        return_target_logits: bool = False,
    ) -> list[SpecOutput]:
        """Generate for B prompts at once: input_ids [B, T], attention_mask [B, T] with 0 at padding
        (left padding, as HF generate; the encoder input for seq2seq models). Returns one SpecOutput
        per row, as `generate` on that row alone would (generated_ids [1, N_i], no padding); the
        timings are the batch's. Layout and guarantees: `osd.spec.batched`."""
        if input_ids.dim() != 2:
            raise ValueError(f"generate_batch takes input_ids of shape [B, T], got {tuple(input_ids.shape)}")
        _check_sampling(temperature, top_p)
        mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        if mask.shape != input_ids.shape:
            raise ValueError(
                f"attention_mask {tuple(mask.shape)} must have input_ids' shape {tuple(input_ids.shape)}"
            )
        prompts = [ids[m.bool()].tolist() for ids, m in zip(input_ids.cpu(), mask.cpu(), strict=True)]
        if not all(prompts):
            raise ValueError(
                f"rows {[i for i, p in enumerate(prompts) if not p]} of input_ids are all padding"
            )
        self._check_prompt(input_ids[mask.bool()][None])
        start, eos = time.perf_counter(), _eos(eos_token_id)
        rows = [
            BatchRow(
                prefix, len(prefix), return_target_logits, budget=self._budget(prefix, max_new_tokens, row=i)
            )
            for i, prefix in enumerate(self._prefixes(prompts))
        ]
        draft = row_cache(self.draft, self.target, input_ids, mask, self.lean_draft)
        target = RowCache.start(
            self.target, input_ids, mask, self.lean_target, hidden_layers=self.head_layers, pack_plain=False
        )
        times = StepTimes()
        active = list(range(len(rows)))  # rows still decoding, in cache order
        while active:
            batch = [rows[i] for i in active]
            # a head drafts from the target's states: none before the prompts' prefill
            gamma = 0 if self.head_layers and target.width == 0 else self.next_gamma(len(batch), batch)
            finished = batch_step(batch, draft, target, times, eos, gamma, self.vocab_size,
                                  self.policy, temperature, top_p, generator)  # fmt: skip
            active = [i for i, done in zip(active, finished, strict=True) if not done]
            if self.policy is not None:  # what each finished row showed of the spread of alpha between rows
                for row in (r for r, done in zip(batch, finished, strict=True) if done):
                    self.policy.observe_row(row.alpha_sum, row.num_proposed)
        wall = time.perf_counter() - start  # every row's timings are the whole batch's
        return [row.to_output(eos, times, wall, input_ids.device) for row in rows]

    def _prefixes(self, prompts: list[list[int]]) -> list[list[int]]:
        """Each row's committed start: its prompt, or the decoder-start token for seq2seq models."""
        if self.is_encoder_decoder:
            return [[self.target.config.decoder_start_token_id] for _ in prompts]
        return prompts

    def _budget(self, prefix: list[int], max_new_tokens: int, row: int | None = None) -> int:
        """New tokens a sequence may have: max_new_tokens, or less near the models' context limit."""
        if self.context_limit is None:
            return max_new_tokens
        if len(prefix) >= self.context_limit:
            where = "prompt" if row is None else f"row {row}: prompt"
            raise ValueError(
                f"{where} of {len(prefix)} tokens leaves no room within the models' context of {self.context_limit}; "
                f"truncate it to fewer tokens (osd.distill.data.truncate_prompt keeps its start and end)"
            )
        return min(max_new_tokens, self.context_limit - len(prefix))

    def _check_prompt(self, input_ids: torch.Tensor) -> None:
        """Refuse an empty prompt or ids outside the models' vocabulary (one host sync per call)."""
        if input_ids.shape[1] == 0:
            raise ValueError(
                "SpeculativeDecoder.generate got an empty prompt (input_ids of shape [1, 0]); "
                "encode at least one token (e.g. BOS or the chat template)"
            )
        low, high = torch.aminmax(input_ids)
        low, high = int(low), int(high)
        if low < 0 or high >= self.num_input_ids:
            bad = low if low < 0 else high
            raise ValueError(
                f"prompt token id {bad} is outside the models' vocabulary [0, {self.num_input_ids}); "
                "encode the prompt with the target's tokenizer"
            )

    def _step(
        self,
        s: SequenceRecord,
        draft: DraftCache,
        target: CachedModel | LeanLlamaCache,
        times: StepTimes,
        remaining: int,
        eos: set[int],
        temperature: float,
        top_p: float,
        gen: torch.Generator | None,
    ) -> list[int]:
        """One propose / verify / accept-reject step; returns the tokens it committed."""
        k = min(
            self.next_gamma(1), remaining - 1
        )  # the step always adds one target token after the n accepted
        if self.head_layers and len(target) == 0:
            k = 0  # a head drafts from the target's states: none before the prompt's prefill
        L = len(s.tokens)
        t0 = time.perf_counter()
        draft_tokens, q = self._propose(draft, s.tokens, k, temperature, top_p, gen)  # [k], [k, V]
        draft_list = draft_tokens.tolist()  # also waits for the device, so the timings are honest
        t1 = time.perf_counter()
        # proposals after a drafted EOS cannot be emitted: do not verify them
        k = next((i + 1 for i, t in enumerate(draft_list) if t in eos), k)
        draft_tokens, q, draft_list = draft_tokens[:k], q[:k], draft_list[:k]
        # verify: the committed tokens the target has not seen (the last one; the whole prompt at
        # the first step) and the k proposals, in one target forward
        verify_in = torch.tensor([s.tokens[len(target) :] + draft_list], device=target.device)
        target_logits = target.forward(verify_in, num_logits=k + 1)[:, : self.vocab_size]  # [k + 1, V]
        t2 = time.perf_counter()
        draft_tokens = draft_tokens.to(target_logits.device)
        if temperature == 0.0:
            target_argmax = greedy(target_logits)  # [k + 1]
            matches = (draft_tokens == target_argmax[:k]).long()
            n = int(matches.cumprod(0).sum())
            next_token = target_argmax[n]
            alphas = matches.float()  # sum_v min(p, q) of two point masses
        else:
            p = logits_to_probs(target_logits, temperature, top_p)  # [k + 1, V]
            q = q.to(p.device)
            uniforms = torch.rand(k, generator=gen, device=gen.device if gen is not None else p.device)
            n, next_token = accept_reject(draft_tokens, p, q, uniforms.to(p.device), gen)
            alphas = acceptance_probability(p[:k], q)
        # count positions whose prefix is the committed one: accepted ones and the first rejected
        counted = min(n + 1, k)
        step_alpha = float(alphas[:counted].sum())
        if self.policy is not None:
            self.policy.observe(step_alpha, counted)
        t3 = time.perf_counter()
        emitted = s.commit(draft_list, n, k, int(next_token), step_alpha, counted, target_logits)
        draft.crop(min(L + n, len(draft)))
        target.crop(len(s.tokens) - 1)
        if self.head_layers:  # the head's next chain reads the target's states at the tokens just committed
            committed = target.features[:, : verify_in.shape[1] - k + n]  # [1, u + n, K H]
            draft.add_features(committed)
            s.keep_features(committed[0])
        t4 = time.perf_counter()
        times.add(t0, t1, t2, t3, t4)
        if self.policy is not None and verify_in.shape[1] == k + 1:  # not the prompt's prefill
            self.policy.observe_step(1, k, t4 - t0)
        return emitted

    def next_gamma(self, batch: int, rows: list[BatchRow] | None = None) -> int:
        """Draft tokens to propose at the next step: gamma, or the policy's choice for `batch` rows (`rows`:
        a batch's active rows, whose slowest the policy's choice waits for)."""
        if self.policy is None:
            return self.gamma
        states = [RowState(r.budget - r.num_generated, r.alpha_sum, r.num_proposed) for r in rows or ()]
        return self.policy.choose(self.draft, self.target, batch, states)

    def _propose(
        self,
        draft: DraftCache,
        tokens: list[int],
        k: int,
        temperature: float,
        top_p: float,
        gen: torch.Generator | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Draft k tokens after `tokens`; returns draft tokens [k] and draft probs q [k, V]."""
        if k == 0:
            return torch.empty(0, dtype=torch.long), torch.empty(0, self.vocab_size)
        feed = torch.tensor([tokens[len(draft) :]], device=draft.device)  # tokens the draft has not seen
        proposed, probs = [], []
        for _ in range(k):
            logits = draft.forward(feed, num_logits=1)[:, : self.vocab_size]  # [1, V]
            if temperature == 0.0:
                token = greedy(logits)  # [1]
            else:
                q_i = logits_to_probs(logits, temperature, top_p)  # [1, V]
                token = sample(q_i, gen)
                probs.append(q_i)
            proposed.append(token)
            feed = token.view(1, 1)
        q = torch.cat(probs) if probs else torch.empty(0)
        return torch.cat(proposed), q


def _check_draft_model(draft: PreTrainedModel, target: PreTrainedModel, v_target: int) -> int:
    """Refuse a draft model of another kind or tokenizer than the target's; returns its vocabulary rows."""
    d_enc, t_enc = draft.config.is_encoder_decoder, target.config.is_encoder_decoder
    if d_enc != t_enc:
        raise ValueError(
            f"draft ({draft.config.model_type}) and target ({target.config.model_type}) must both be "
            "decoder-only or both encoder-decoder"
        )
    v_draft = draft.get_output_embeddings().weight.shape[0]
    if abs(v_draft - v_target) > MAX_VOCAB_PADDING:
        raise ValueError(
            f"draft vocabulary ({v_draft}) and target vocabulary ({v_target}) differ by more than padding rows: "
            "speculative decoding needs a shared tokenizer. Use a draft trained with the target's tokenizer."
        )
    return v_draft


def _check_sampling(temperature: float, top_p: float) -> None:
    if temperature < 0 or not 0 < top_p <= 1:
        raise ValueError(f"need temperature >= 0 and 0 < top_p <= 1, got {temperature}, {top_p}")


def _eos(eos_token_id: int | list[int] | None) -> set[int]:
    return {eos_token_id} if isinstance(eos_token_id, int) else set(eos_token_id or ())
