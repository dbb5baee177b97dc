"""The lean Llama step, the engine's path for drafts and targets: HF's logits and a head's states, its cache kept
through crops and growth, its weights following in-place updates, a target's serving layout kept, and the
engine's output unchanged, alone and in batches."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from osd.spec import batched, lean_llama
from osd.spec.cached_model import CachedModel
from osd.spec.decoder import SpeculativeDecoder
from osd.spec.draft_vocab import set_draft_vocab
from osd.spec.evaluate import target_only_greedy
from osd.spec.lean_llama import LeanLlamaCache, draft_cache, product_kind, supports_lean_step, target_cache
from osd.spec.packed_linear import packing_available
from osd.spec.serving_choice import available_layouts, serving_copy
from osd.spec.timing import draft_step_time, target_pass_time
from tests.devices import DEVICES, on_device
from tests.spec.references import (
    NOISE,
    hf_attention_as_the_lean_step,
    hf_greedy,
    left_padded,
    random_prompt,
    random_prompts,
)
from tests.tiny_models import VOCAB, draft_from_target, tiny_llama, tiny_model

# bf16: one product over concatenated weights may round otherwise than three apart on some CPUs
TOLERANCE = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.bfloat16: dict(atol=3e-2, rtol=3e-2)}


def draft_variants() -> dict[str, torch.nn.Module]:
    return {
        "llama": tiny_llama(seed=1, initializer_range=0.3),
        "grouped-query": tiny_llama(seed=2, kv_heads=2, initializer_range=0.3),
        "untied, 3 layers": tiny_llama(layers=3, seed=3, tie_word_embeddings=False, initializer_range=0.3),
        "sub-vocabulary head": set_draft_vocab(tiny_llama(seed=4, initializer_range=0.3), range(2, VOCAB, 2)),
        "rope theta 500": tiny_llama(seed=5, rope_parameters={"rope_type": "default", "rope_theta": 500.0}),
    }


def feeds(seed: int = 0) -> list[tuple[torch.Tensor, int]]:
    """The engine's kind of calls: a prompt, then 1-3 tokens at a time, with crops (0: none) before some."""
    g = torch.Generator().manual_seed(seed)
    calls = [(torch.randint(3, VOCAB, (1, 9), generator=g), 0)]
    for i in range(40):
        calls.append((torch.randint(3, VOCAB, (1, 1 + i % 3), generator=g), 2 if i % 5 == 4 else 0))
    return calls


def assert_equal_up_to_rounding(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """float32: elementwise within TOLERANCE. bf16, a 3-layer target's logits and a head's states: rounding adds up
    over the layers and the residual stream grows to about 20 (a bf16 ulp there is 0.125; a small sum of large
    terms keeps their absolute rounding), so the error is judged over the whole tensor: within 3% of its norm (a
    state from another row or position is off by about 100%; oneDNN's AMX kernels, which it takes for some shapes
    only, sum in another order: up to 1.04% seen on an AMX CPU, where the same shapes without AMX give 0)."""
    if expected.dtype == torch.float32:
        torch.testing.assert_close(actual, expected, **TOLERANCE[torch.float32])
        return
    error = float((actual.float() - expected.float()).norm() / expected.float().norm())
    assert error < 3e-2, f"relative error {error:.4f}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", list(draft_variants()))
@torch.inference_mode()
def test_logits_equal_hf_forward_through_crops_and_growth(name, dtype, device, monkeypatch):
    # the 9-token prompt and later steps grow the cache
    monkeypatch.setattr(lean_llama, "INITIAL_CAPACITY", 8)
    model = hf_attention_as_the_lean_step(draft_variants()[name].to(device, dtype))
    assert supports_lean_step(model)
    hf, lean = CachedModel(model, None), LeanLlamaCache(model)
    assert lean.device.type == device
    for tokens, drop in feeds():
        if drop:
            hf.crop(len(hf) - drop)
            lean.crop(len(lean) - drop)
        num_logits = min(2, tokens.shape[1])
        tokens = tokens.to(device)
        expected, got = hf.forward(tokens, num_logits), lean.forward(tokens, num_logits)
        assert got.shape == expected.shape == (num_logits, VOCAB) and got.dtype == expected.dtype
        torch.testing.assert_close(got, expected, **TOLERANCE[dtype])
        assert len(lean) == len(hf)
    assert lean.keys.shape[2] >= len(lean) > 8


@torch.inference_mode()
def test_a_sub_vocabulary_head_gives_minus_infinity_outside_its_tokens():
    model = set_draft_vocab(tiny_llama(seed=4), [3, 5, 7, EOS_ID := 2])
    logits = LeanLlamaCache(model).forward(random_prompt(), 1)  # [1, V]
    inside = torch.tensor([2, 3, 5, 7])
    assert torch.isfinite(logits[0, inside]).all()
    outside = torch.ones(VOCAB, dtype=torch.bool)
    outside[inside] = False
    assert torch.isneginf(logits[0, outside]).all()
    assert int(logits.argmax()) in (3, 5, 7, EOS_ID)


def test_weights_follow_an_in_place_update_and_are_shared_while_unchanged():
    model = tiny_llama(seed=1)  # made outside inference mode, as loaded models are
    prompt = random_prompt()
    with torch.inference_mode():
        first = LeanLlamaCache(model)
        assert LeanLlamaCache(model).lean.w is first.lean.w  # derived once, shared by every sequence
        before = first.forward(prompt, 1)
    with torch.no_grad():
        model.model.layers[1].mlp.down_proj.weight.mul_(
            -1.5
        )  # as an optimizer step or a serving-copy refresh
    with torch.inference_mode():
        cache = LeanLlamaCache(model)
        assert cache.lean.w is not first.lean.w
        after = cache.forward(prompt, 1)
        expected = CachedModel(model, None).forward(prompt, 1)
    assert not torch.allclose(after, before)
    torch.testing.assert_close(after, expected, atol=1e-5, rtol=1e-5)


def shares_a_prefix(prompt: torch.Tensor, shared: int, seed: int = 1) -> torch.Tensor:
    """`prompt` [1, n] with its tokens after the first `shared` drawn afresh, each unlike the one it replaces."""
    other = prompt.clone()
    g = torch.Generator().manual_seed(seed)
    fresh = torch.randint(3, VOCAB - 1, (prompt.shape[1] - shared,), generator=g)
    other[0, shared:] = fresh + (fresh >= prompt[0, shared:]).long()  # skips the replaced token
    return other


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", ["grouped-query", "untied, 3 layers"])
def test_a_prompt_takes_the_keys_and_values_it_shares_with_the_last_prompt(name, dtype):
    """A sequence's first forward computes only the tokens after those it shares with the last prompt of the same
    weights; its logits, and those of the steps after it, are HF's forward's."""
    model = hf_attention_as_the_lean_step(draft_variants()[name].to(dtype))  # made outside inference mode
    last = random_prompt(9, seed=3)
    with torch.inference_mode():
        LeanLlamaCache(model).forward(last, 1)
        for prompt, num_logits, reused in [
            (shares_a_prefix(last, 5), 1, 5),
            (shares_a_prefix(last, 5), 3, 6),  # the same prompt again: all but the tokens it needs logits of
            (shares_a_prefix(last, 5), 6, 3),
            (shares_a_prefix(last, 0), 1, 0),
        ]:
            hf, lean = CachedModel(model, None), LeanLlamaCache(model)
            expected = hf_as_taken(hf, last, prompt, reused, num_logits)
            assert_equal_up_to_rounding(lean.forward(prompt, num_logits), expected)
            assert lean.reused == reused and len(lean) == len(hf) == 9
            last = prompt
            for tokens, drop in feeds(seed=4)[1:8]:
                if drop:
                    hf.crop(len(hf) - drop)
                    lean.crop(len(lean) - drop)
                n = tokens.shape[1]
                assert_equal_up_to_rounding(lean.forward(tokens, n), hf.forward(tokens, n))
        LeanLlamaCache(model, reuse_prompt=False).forward(random_prompt(9, seed=3), 1)
    assert torch.equal(model_prompt(model), prompt[0])  # a cache that does not reuse leaves no prompt either


def hf_as_taken(
    hf: CachedModel, last: torch.Tensor, prompt: torch.Tensor, reused: int, num_logits: int
) -> torch.Tensor:
    """HF's logits of `prompt` [1, n] computed as a lean cache takes it: its first `reused` tokens within the forward
    of the last prompt (`last` [1, m]), the rest after them (the same sums as the cache's, not one forward's);
    `hf.features` then covers the whole prompt where it keeps states."""
    hf.forward(last, 1)
    taken = hf.features[:, :reused] if hf.hidden_layers else None
    hf.crop(reused)
    logits = hf.forward(prompt[:, reused:], num_logits)
    if taken is not None:
        hf.features = torch.cat([taken, hf.features], dim=1)  # [1, n, K H]
    return logits


def model_prompt(model: torch.nn.Module) -> torch.Tensor:
    """The tokens of the last prompt the lean step of `model` keeps."""
    return lean_llama._derived[model].last_prompt.tokens


@torch.inference_mode()
def test_no_prompt_is_taken_across_weights_state_dtypes_or_the_states_a_head_reads():
    model = tiny_llama(seed=1)  # made outside inference mode, as loaded models are
    prompt = random_prompt(9)
    LeanLlamaCache(model).forward(prompt, 1)
    assert torch.equal(model_prompt(model), prompt[0])
    heads = target_cache(model, hidden_layers=(1,))  # it kept no states for a head to read
    heads.forward(prompt, 1)
    assert heads.reused == 0 and heads.features.shape[1] == 9
    other = target_cache(model, hidden_layers=(0, 1))
    other.forward(prompt, 1)
    assert other.reused == 0
    with torch.no_grad():
        model.model.layers[0].self_attn.v_proj.weight.mul_(2.0)  # as an optimizer step
    after = LeanLlamaCache(model)
    torch.testing.assert_close(after.forward(prompt, 1), CachedModel(model, None).forward(prompt, 1))
    assert after.reused == 0
    if "bf16_rows" in available_layouts():  # a draft's float32 states and a target's bf16 ones, one model
        served = serving_copy(model.to(torch.bfloat16), "bf16_rows")
        draft_cache(served, None).forward(prompt, 1)
        target = target_cache(served)
        assert target.lean.w is lean_llama._derived[served] and target.forward(prompt, 1) is not None
        assert target.reused == 0


def test_the_positions_reused_serving_prompts_in_turn():
    prompts = [[5, 6, 7], [5, 6, 8, 9], [5, 6], [4], [4, 1]]
    assert lean_llama.reused_prompt_tokens(prompts) == [0, 2, 1, 0, 1]
    assert lean_llama.reused_prompt_tokens([]) == [] and lean_llama.reused_prompt_tokens([[3]]) == [0]
    assert lean_llama.prompt_sizes(prompts) == (12 // 5, 4 // 5)  # means, rounded down


@torch.inference_mode()
def test_a_model_made_under_inference_mode_is_derived_again_for_each_sequence():
    model = tiny_llama(seed=1)  # inference tensors: no version counters to tell an update by
    first = LeanLlamaCache(model)
    assert first.lean.w.key is None and LeanLlamaCache(model).lean.w is not first.lean.w
    prompt = random_prompt()
    model.model.layers[0].self_attn.v_proj.weight.mul_(2.0)
    torch.testing.assert_close(
        LeanLlamaCache(model).forward(prompt, 1),
        CachedModel(model, None).forward(prompt, 1),
        atol=1e-5,
        rtol=1e-5,
    )


def test_other_models_keep_hf_forward():
    assert isinstance(draft_cache(tiny_llama(), None), LeanLlamaCache)
    assert (
        type(draft_cache(tiny_llama(), None, lean=False)) is CachedModel
    )  # SpeculativeDecoder(lean_draft=False)
    refused = {
        "mistral": tiny_model("mistral", layers=2),
        "gpt2": tiny_model("gpt2", layers=2),
        "attention bias": tiny_llama(attention_bias=True),
        "mlp bias": tiny_llama(mlp_bias=True),
        "gelu": tiny_llama(hidden_act="gelu"),
        "dynamic rope": tiny_llama(
            rope_parameters={"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0}
        ),
    }
    for name, model in refused.items():
        assert not supports_lean_step(model), name
        assert type(draft_cache(model, None)) is CachedModel, name
    t5 = tiny_model("t5", layers=2)
    assert type(draft_cache(t5, torch.tensor([[3, 4, 2]]))) is CachedModel


def test_a_target_takes_the_lean_step_with_or_without_a_head_reading_its_states():
    target = tiny_llama(seed=1)
    assert isinstance(target_cache(target), LeanLlamaCache)
    assert type(target_cache(target, lean=False)) is CachedModel  # SpeculativeDecoder(lean_target=False)
    heads = target_cache(target, hidden_layers=(0, 1))  # an EAGLE-3 head reads the verification's states
    assert isinstance(heads, LeanLlamaCache) and heads.hidden_layers == (0, 1)
    assert type(target_cache(tiny_model("mistral", layers=2))) is CachedModel


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("layers", [(0, 2, 1), (1,)])
def test_the_kept_states_equal_hf_hidden_states_through_crops(layers, dtype):
    """The input states of a head's layers (in the order asked, the embeddings as layer 0's) at every fed token,
    as HF's `hidden_states` give them, through crops and a prompt whose leading tokens (and their states) are taken
    from the one before; the logits alike."""
    target = hf_attention_as_the_lean_step(tiny_llama(layers=3, seed=7, initializer_range=0.3).to(dtype))
    calls = feeds(seed=3)
    last = calls[0][0]
    for reused in (0, 5):  # the second prompt takes the first's 5 leading tokens and their states
        prompt = shares_a_prefix(last, reused)
        hf, lean = CachedModel(target, None, layers), target_cache(target, hidden_layers=layers)
        assert isinstance(lean, LeanLlamaCache)
        with torch.inference_mode():
            expected = hf_as_taken(hf, last, prompt, reused, 1) if reused else hf.forward(prompt, 1)
            assert_equal_up_to_rounding(lean.forward(prompt, 1), expected)
            assert lean.reused == reused and lean.features.shape[1] == prompt.shape[1]
            assert_equal_up_to_rounding(lean.features, hf.features)
            for tokens, drop in calls[1:]:
                if drop:
                    hf.crop(len(hf) - drop)
                    lean.crop(len(lean) - drop)
                n = tokens.shape[1]
                assert_equal_up_to_rounding(lean.forward(tokens, n), hf.forward(tokens, n))
                assert lean.features.shape == (1, n, len(layers) * target.config.hidden_size)
                assert_equal_up_to_rounding(lean.features, hf.features)
        last = prompt


@pytest.mark.parametrize("layout", available_layouts())
@torch.inference_mode()
def test_a_target_served_in_a_layout_keeps_its_products_and_hf_logits(layout):
    """Each layout on offer here (`osd.spec.serving_choice`) multiplies in the lean step as the target's own
    layers do; its logits are HF's forward's over the same served copy, through crops."""
    target = hf_attention_as_the_lean_step(serving_copy(tiny_llama(seed=6, initializer_range=0.3), layout))
    assert product_kind(target, pack_plain=False) == layout  # the layouts' names are their products'
    hf, lean = CachedModel(target, None), target_cache(target)
    assert lean.lean.w.product == layout
    tolerance = TOLERANCE[target.dtype]
    for tokens, drop in feeds(seed=2):
        if drop:
            hf.crop(len(hf) - drop)
            lean.crop(len(lean) - drop)
        n = tokens.shape[1]
        torch.testing.assert_close(lean.forward(tokens, n), hf.forward(tokens, n), **tolerance)


@pytest.mark.parametrize("layout", ["bf16_rows", "packed_rows"])
@pytest.mark.parametrize("name", ["grouped-query", "sub-vocabulary head"])
@torch.inference_mode()
def test_a_draft_multiplied_by_the_rows_kernel_keeps_float32_states(layout, name):
    """A bf16 draft served beside a target in a layout of the rows kernel keeps its states in float32 between the
    kernel's products (prompts included): its logits are HF's float32 forward's over the same bf16 weights,
    widened, through crops. A target in that layout keeps bf16 states, as HF's bf16 forward."""
    if layout not in available_layouts():
        pytest.skip(f"{layout} is not on offer here")
    model = draft_variants()[name].to(torch.bfloat16)
    draft = serving_copy(model, layout)  # the draft as `retype_draft` serves it
    widened = hf_attention_as_the_lean_step(copy.deepcopy(model).float())
    hf, lean = CachedModel(widened, None), draft_cache(draft, None)
    assert lean.lean.w.product == "bf16_rows" and lean.lean.state_dtype == torch.float32
    assert target_cache(draft).lean.state_dtype == torch.bfloat16
    for tokens, drop in feeds(seed=3):
        if drop:
            hf.crop(len(hf) - drop)
            lean.crop(len(lean) - drop)
        n = tokens.shape[1]
        got = lean.forward(tokens, n)
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, hf.forward(tokens, n), atol=1e-4, rtol=1e-4)


def test_a_drafts_plain_bf16_layers_are_packed_where_onednn_has_bf16_kernels():
    draft = tiny_llama(seed=1).to(torch.bfloat16)
    assert product_kind(draft, pack_plain=True) == ("packed" if packing_available() else "plain")
    assert product_kind(draft, pack_plain=False) == "plain"  # a target keeps its layout
    assert product_kind(tiny_llama(seed=1), pack_plain=True) == "plain"  # float32


def test_the_target_alone_decodes_hf_generates_tokens():
    target = tiny_model("llama", layers=3)
    prompt = random_prompt(7)
    assert target_only_greedy(target, prompt, 25, eos_id=-1) == hf_greedy(target, prompt, 25)[0].tolist()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_engine_tokens_equal_hf_generate_and_the_hf_draft_path(gamma, device):
    target = tiny_model("llama", layers=3)
    draft, target = on_device(device, draft_from_target(target, NOISE["llama"]), target)
    prompt = random_prompt(7).to(device)
    lean = SpeculativeDecoder(draft, target, gamma=gamma).generate(prompt, max_new_tokens=40)
    hf = SpeculativeDecoder(draft, target, gamma=gamma, lean_draft=False, lean_target=False).generate(
        prompt, max_new_tokens=40
    )
    assert lean.generated_ids.tolist() == hf.generated_ids.tolist() == hf_greedy(target, prompt, 40).tolist()
    assert lean.accepted_lengths == hf.accepted_lengths  # the draft proposed the same tokens
    assert 0 < sum(lean.accepted_lengths) < len(lean.accepted_lengths) * gamma  # some accepted, some not


def test_prompts_sharing_a_prefix_decode_hf_generates_tokens_in_turn(monkeypatch):
    """Served one after another, each prompt's leading tokens shared with the one before are taken from its cache
    by the draft and the target, the target alone too; every output is the target's own greedy decoding."""
    taken = []
    take = LeanLlamaCache._take_prompt

    def counted(cache: LeanLlamaCache, tokens: torch.Tensor, most: int) -> lean_llama.PromptKV | None:
        last = take(cache, tokens, most)
        taken.append(cache.reused)
        return last

    monkeypatch.setattr(LeanLlamaCache, "_take_prompt", counted)
    target = tiny_model("llama", layers=3)
    draft = draft_from_target(target, NOISE["llama"])
    first = random_prompt(12, seed=5)
    prompts = [first, shares_a_prefix(first, 8), shares_a_prefix(first, 8, seed=2), first]
    engine = SpeculativeDecoder(draft, target, gamma=3)
    for prompt in prompts:
        expected = hf_greedy(target, prompt, 20)
        assert engine.generate(prompt, max_new_tokens=20).generated_ids.tolist() == expected.tolist()
        assert target_only_greedy(target, prompt, 20, eos_id=-1) == expected[0].tolist()
    assert torch.equal(model_prompt(target), first[0]) and torch.equal(model_prompt(draft), first[0])
    # draft, target, then the target alone (after the same prompt: all but its last token)
    assert taken == [0, 0, 11] + [8, 8, 11] * 3


def test_sampled_output_equals_the_hf_draft_path_with_the_same_generator():
    target = tiny_model("llama", layers=3)
    draft = draft_from_target(target, NOISE["llama"])
    prompt = random_prompt(5)
    outputs = [
        SpeculativeDecoder(draft, target, gamma=3, lean_draft=lean).generate(
            prompt, max_new_tokens=30, temperature=1.0, generator=torch.Generator().manual_seed(7)
        )
        for lean in (True, False)
    ]
    assert outputs[0].generated_ids.tolist() == outputs[1].generated_ids.tolist()
    assert outputs[0].accepted_lengths == outputs[1].accepted_lengths


@pytest.mark.parametrize("batch, padded", [(1, False), (4, True)])
def test_draft_step_time_times_the_lean_step(batch, padded, monkeypatch):
    fed = []
    forward = lean_llama.LeanLlama.forward
    monkeypatch.setattr(
        lean_llama.LeanLlama,
        "forward",
        lambda self, tokens, *a: (fed.append(tokens.shape), forward(self, tokens, *a))[1],
    )
    seconds = draft_step_time(tiny_llama(seed=1), context=16, reps=3, rounds=1, batch=batch, padded=padded)
    assert 0 < seconds < 1
    assert fed[0] == (batch, 16) and fed[1:] == [(batch, 1)] * 4  # the context, then the timed steps


@pytest.mark.parametrize("batch, padded", [(1, False), (4, True)])
def test_target_pass_time_times_the_lean_step_in_the_targets_layout(batch, padded, monkeypatch):
    fed, products = [], []
    forward = lean_llama.LeanLlama.forward

    def recorded(self, tokens, *a):
        fed.append(tokens.shape)
        products.append(self.w.product)
        return forward(self, tokens, *a)

    monkeypatch.setattr(lean_llama.LeanLlama, "forward", recorded)
    target = tiny_llama(seed=1).to(torch.bfloat16)
    seconds = target_pass_time(target, context=16, length=3, reps=3, rounds=1, batch=batch, padded=padded)
    assert 0 < seconds < 1
    assert fed[0] == (batch, 16) and fed[1:] == [(batch, 3)] * 4  # the context, then the timed passes
    assert set(products) == {"plain"}  # a target's plain bf16 layers stay as they are: nothing packed


def row_feeds(seed: int = 0) -> list[tuple[list[list[int]], list[int] | None]]:
    """The batched engine's kind of calls on 4 rows: their committed tokens at each call, and before some calls
    the rows that stay (None: all). Rows grow by 1-3 tokens and drop 0-2 at random, as rejections do."""
    g = torch.Generator().manual_seed(seed)
    rows = [p[0].tolist() for p in random_prompts((3, 9, 6, 1))]
    calls, stay = [], None
    for i in range(24):
        calls.append(([list(r) for r in rows], stay))
        for r in rows:
            del r[max(1, len(r) - int(torch.randint(0, 3, (1,), generator=g))) :]
            r += torch.randint(3, VOCAB, (1 + i % 3,), generator=g).tolist()
        stay = None
        if i == 15:  # a row finishes
            stay = [0, 2, 3]
            rows = [rows[j] for j in stay]
    return calls


@pytest.mark.parametrize("slack", [0.0, 100.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", list(draft_variants()))
@torch.inference_mode()
def test_batched_rows_equal_hf_forward_through_padding_rejections_and_compaction(
    name, dtype, slack, monkeypatch
):
    """B rows of different lengths, left-padded, each dropping its own rejected tokens, compacted at every
    rejection (SLACK 0) or never: the lean step's logits at every row are HF's batched forward's."""
    monkeypatch.setattr(batched, "SLACK", slack)
    model = hf_attention_as_the_lean_step(draft_variants()[name].to(dtype))
    ids, mask = left_padded(random_prompts((3, 9, 6, 1)))
    hf, lean = (batched.RowCache.start(model, ids, mask, lean=flag) for flag in (False, True))
    assert hf.lean is None and lean.lean is not None
    for rows, stay in row_feeds():
        for cache in (hf, lean):
            if stay is not None:
                cache.keep(cache.lengths.clone(), torch.tensor(stay))
            feed, feed_mask = cache.feed_unseen(rows)
            cache.logits = cache.forward(feed, feed_mask, num_logits=1)  # [B, 1, V]
        assert lean.valid.equal(hf.valid) and lean.lengths.equal(hf.lengths)
        assert torch.isfinite(lean.logits.nan_to_num(neginf=0.0)).all()
        torch.testing.assert_close(lean.logits, hf.logits, **TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@torch.inference_mode()
def test_a_batched_target_keeps_its_layout_and_a_heads_states_as_hf_forward(dtype):
    """A target's rows (`pack_plain=False`, as `generate_batch` starts them) through padding, rejections and a
    row leaving: the lean step's logits and kept states at every row are HF's batched forward's."""
    target = hf_attention_as_the_lean_step(tiny_llama(layers=3, seed=8, initializer_range=0.3).to(dtype))
    ids, mask = left_padded(random_prompts((3, 9, 6, 1)))
    layers = (0, 2)
    hf, lean = (
        batched.RowCache.start(target, ids, mask, lean=flag, hidden_layers=layers, pack_plain=False)
        for flag in (False, True)
    )
    assert hf.lean is None and lean.lean.w.product == "plain"  # a target's plain layers are not packed
    for rows, stay in row_feeds(seed=1):
        for cache in (hf, lean):
            if stay is not None:
                cache.keep(cache.lengths.clone(), torch.tensor(stay))
            feed, feed_mask = cache.feed_unseen(rows)
            cache.logits = cache.forward(feed, feed_mask, num_logits=2)  # [B, 2, V]
            cache.fed = feed_mask.bool()
        # what padded slots give is never read: compare the fed tokens' logits and states
        last = lean.fed[:, -2:]  # [B, 2]
        assert_equal_up_to_rounding(lean.logits[last], hf.logits[last])
        assert_equal_up_to_rounding(lean.features[lean.fed], hf.features[hf.fed])


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_batched_engine_output_equals_the_hf_path(temperature):
    target = tiny_model("llama", layers=3)
    draft = draft_from_target(target, NOISE["llama"])
    ids, mask = left_padded(random_prompts((3, 9, 6, 1)))
    outputs = [
        SpeculativeDecoder(draft, target, gamma=3, lean_draft=lean, lean_target=lean).generate_batch(
            ids, mask, max_new_tokens=30, temperature=temperature, generator=torch.Generator().manual_seed(7)
        )
        for lean in (True, False)
    ]
    for lean_row, hf_row in zip(*outputs, strict=True):
        assert lean_row.generated_ids.tolist() == hf_row.generated_ids.tolist()
        assert lean_row.accepted_lengths == hf_row.accepted_lengths
    assert any(0 < a < 3 for row in outputs[0] for a in row.accepted_lengths)  # rows accepted some, not all


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rope_rotates_queries_and_keys_exactly_as_hf(dtype: torch.dtype):
    """The lean step's RoPE (cos and a sin with its first half negated, one roll) against HF's
    `apply_rotary_pos_emb`, bit for bit, on queries and keys rotated in one call."""
    model = tiny_llama(seed=5, kv_heads=2, rope_parameters={"rope_type": "default", "rope_theta": 500.0})
    lean = lean_llama.LeanLlama(model.to(dtype), pack_plain=False)
    positions = torch.tensor([[0, 3, 17, 250]])  # [1, n]
    cos, signed_sin = lean._rope(positions)
    hf_cos, hf_sin = model.model.rotary_emb(torch.zeros(1, dtype=dtype), positions)  # [1, n, D]
    q = torch.randn(1, lean.num_heads, 4, lean.head_dim, dtype=dtype)
    k = torch.randn(1, lean.num_kv_heads, 4, lean.head_dim, dtype=dtype)
    hf_q, hf_k = apply_rotary_pos_emb(q, k, hf_cos, hf_sin)
    rotated = lean_llama._rotate(torch.cat([q, k], dim=1), cos, signed_sin)
    assert torch.equal(rotated, torch.cat([hf_q, hf_k], dim=1))
