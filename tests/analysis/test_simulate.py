"""Simulated speculative decoding from a recording equals the live engine's, step by step."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from osd.analysis.record import main as record_main
from osd.analysis.record import record_conversations, record_prompts
from osd.analysis.recording import RecordingError, load_recording, tokenizer_identity
from osd.analysis.simulate import main as simulate_main
from osd.analysis.simulate import simulate
from osd.paths import DRAFT_PATH, TINY_DRAFT_PATH, TINY_TEACHER_PATH, workload_path
from osd.spec import SpeculativeDecoder
from osd.spec.eagle3 import Eagle3Head, save_head
from tests.tiny_models import EOS, RANDOM_TOKENIZER, VOCAB, distilled_head, draft_from_target, tiny_model


def live(draft, target, prompt: list[int], gamma: int, max_new_tokens: int, eos: int):
    decoder = SpeculativeDecoder(draft, target, gamma=gamma)
    return decoder.generate(torch.tensor([prompt]), max_new_tokens=max_new_tokens, eos_token_id=eos)


def assert_same_as_live(simulated, draft, target, recording, gamma: int) -> None:
    for sim, rec in zip(simulated, recording.prompts, strict=True):
        out = live(
            draft,
            target,
            rec.prompt_ids,
            gamma,
            recording.header["max_new_tokens"],
            recording.header["eos_token_id"],
        )
        assert sim.accepted_lengths == out.accepted_lengths, rec.id
        assert sum(it.counted for it in sim.iterations) == out.num_proposed, rec.id
        assert sim.alpha == pytest.approx(out.alpha, abs=0, nan_ok=True), rec.id
        assert sim.generated_ids == out.generated_ids[0].tolist(), rec.id


@pytest.fixture(scope="module")
def random_pair():
    target = tiny_model("llama", layers=2, seed=3)
    return draft_from_target(target, noise=0.6), target


@pytest.fixture(scope="module")
def head_pair():
    target = tiny_model("llama", layers=4, seed=3)
    return distilled_head(target, vocab_size=48, steps=30), target


@pytest.mark.parametrize("gamma", [1, 4])
def test_a_head_simulated_from_a_recording_of_the_targets_states_equals_the_live_engine(
    head_pair, gamma, tmp_path
):
    """record --features, saved and read back, then simulate with an EAGLE-3 head: the live engine's accepted
    lengths, alpha and tokens, prompt by prompt."""
    head, target = head_pair
    gen = torch.Generator().manual_seed(gamma)
    prompts = [(f"p{i}", torch.randint(3, VOCAB, (5 + 3 * i,), generator=gen).tolist()) for i in range(4)]
    recording = record_prompts(target, prompts, {"tokenizer": RANDOM_TOKENIZER}, max_new_tokens=40,
                               eos_token_id=EOS, feature_layers=head.target_layers)  # fmt: skip
    recording.save(tmp_path / "rec")
    recording = load_recording(tmp_path / "rec")
    simulated = simulate(recording, head, RANDOM_TOKENIZER, gamma=gamma, embed=target.get_input_embeddings())
    lengths = [
        n for s in simulated for n in s.accepted_lengths[1:]
    ]  # the first: the prefill, nothing proposed
    assert 0 < sum(lengths) and min(lengths) < gamma  # some proposals accepted, some rejected: a real test
    assert_same_as_live(simulated, head, target, recording, gamma)


def test_simulate_runs_a_saved_head_on_the_command_line(tmp_path):
    """record --features, then simulate --head_path with the recording's target's embedding (its model, by default)."""
    record_main(["--target", str(TINY_TEACHER_PATH), "--conversations", str(workload_path("sql", "eval")),
                 "--limit", "2", "--max_new_tokens", "6", "--features", "--output", str(tmp_path / "rec")])  # fmt: skip
    teacher = AutoModelForCausalLM.from_pretrained(TINY_TEACHER_PATH)
    save_head(Eagle3Head.for_target(teacher), tmp_path / "head")
    simulate_main(["--recording", str(tmp_path / "rec"), "--head_path", str(tmp_path / "head"), "--tokenizer",
                   str(TINY_TEACHER_PATH), "--max_propose_num", "3", "--output", str(tmp_path / "sim")])  # fmt: skip
    summary = json.loads((tmp_path / "sim.summary.json").read_text())
    assert summary["draft"].endswith("head") and summary["alpha_topk"] is None
    with pytest.raises(RecordingError, match="--features"):  # a recording without the states a head reads
        record_main(["--target", str(TINY_TEACHER_PATH), "--conversations", str(workload_path("sql", "eval")),
                     "--limit", "1", "--max_new_tokens", "4", "--output", str(tmp_path / "plain")])  # fmt: skip
        simulate_main(["--recording", str(tmp_path / "plain"), "--head_path", str(tmp_path / "head"), "--tokenizer",
                       str(TINY_TEACHER_PATH), "--output", str(tmp_path / "sim2")])  # fmt: skip


@pytest.mark.parametrize("gamma", [1, 3, 6])
def test_random_pair_simulation_equals_live_engine(random_pair, gamma):
    draft, target = random_pair
    gen = torch.Generator().manual_seed(gamma)
    prompts = [(f"p{i}", torch.randint(3, VOCAB, (5 + 3 * i,), generator=gen).tolist()) for i in range(4)]
    recording = record_prompts(
        target, prompts, {"tokenizer": RANDOM_TOKENIZER}, max_new_tokens=40, eos_token_id=EOS
    )
    simulated = simulate(recording, draft, RANDOM_TOKENIZER, gamma=gamma)
    lengths = [n for s in simulated for n in s.accepted_lengths]
    assert 0 < sum(lengths) and min(lengths) < gamma  # some drafts accepted, some rejected: a real test
    assert_same_as_live(simulated, draft, target, recording, gamma)


@pytest.fixture(scope="module")
def tiny_demo(tmp_path_factory):
    """The tiny demo pair and a recording (full top-k) of its teacher on 4 SQL prompts, saved and reloaded."""
    stem = tmp_path_factory.mktemp("rec") / "tiny"
    record_conversations(
        TINY_TEACHER_PATH, workload_path("sql", "eval"), limit=4, max_new_tokens=48, top_k=3072
    ).save(stem)
    target = AutoModelForCausalLM.from_pretrained(TINY_TEACHER_PATH).eval()
    draft = AutoModelForCausalLM.from_pretrained(TINY_DRAFT_PATH).eval()
    identity = tokenizer_identity(AutoTokenizer.from_pretrained(TINY_DRAFT_PATH))
    return draft, target, identity, load_recording(stem)


@pytest.mark.parametrize("gamma", [2, 5])
def test_tiny_demo_pair_simulation_equals_live_engine(tiny_demo, gamma):
    draft, target, identity, recording = tiny_demo
    assert recording.header["prompt_template"] and recording.header["tokenizer"]["vocab_size"] == 3072
    assert_same_as_live(simulate(recording, draft, identity, gamma=gamma), draft, target, recording, gamma)


def test_topk_alpha_is_a_lower_bound_that_tightens_with_k(tiny_demo):
    draft, _, identity, recorded = tiny_demo
    full = copy.deepcopy(recorded)  # truncated below
    exact = simulate(full, draft, identity, gamma=2)
    for sim in exact:  # with every logit recorded the bounds meet
        assert sim.alpha_topk[0] == pytest.approx(sim.alpha_topk[1], abs=1e-5)
    previous = [0.0] * len(exact)
    for k in (1, 5, 50):
        for rec in full.prompts:
            rec.topk_ids, rec.topk_logits = rec.topk_ids[:, :k], rec.topk_logits[:, :k]
        for i, (sim, ref) in enumerate(zip(simulate(full, draft, identity, gamma=2), exact, strict=True)):
            lower, upper = sim.alpha_topk
            assert previous[i] - 1e-6 <= lower <= ref.alpha_topk[0] + 1e-6 <= upper + 2e-6
            previous[i] = lower
    assert any(p < 1.0 for p in previous)  # a draft that is not the target


def test_recording_refuses_a_draft_with_another_tokenizer(tiny_demo):
    draft, _, _, recording = tiny_demo
    other = tokenizer_identity(AutoTokenizer.from_pretrained(DRAFT_PATH))  # SmolLM2's, 49152 tokens
    with pytest.raises(RecordingError, match="tokenizer.*vocab_size 3072 vs 49152"):
        simulate(recording, draft, other)


def test_simulating_past_the_recorded_budget_is_refused(random_pair):
    draft, target = random_pair
    recording = record_prompts(
        target, [("a", [5, 6, 7])], {"tokenizer": RANDOM_TOKENIZER}, 8, eos_token_id=None
    )
    with pytest.raises(RecordingError, match="lower --max_new_tokens to 8"):
        simulate(recording, draft, RANDOM_TOKENIZER, max_new_tokens=20)


def test_record_command_writes_what_record_conversations_returns_on_the_threads_asked(tmp_path):
    """`python -m osd.analysis.record --threads N` runs torch on N threads and saves the recording."""
    before = torch.get_num_threads()
    threads = 1 if before != 1 else 2
    stem = tmp_path / "rec"
    try:
        record_main(["--target", str(TINY_TEACHER_PATH), "--conversations", str(workload_path("sql", "eval")),
                     "--limit", "2", "--max_new_tokens", "6", "--top_k", "4", "--output", str(stem),
                     "--threads", str(threads)])  # fmt: skip
        assert torch.get_num_threads() == threads
    finally:
        torch.set_num_threads(before)
    saved = load_recording(stem)
    direct = record_conversations(
        TINY_TEACHER_PATH, workload_path("sql", "eval"), limit=2, max_new_tokens=6, top_k=4
    )
    assert [p.output_ids for p in saved.prompts] == [p.output_ids for p in direct.prompts]
    assert saved.header["top_k"] == 4 and len(saved.prompts) == 2


@pytest.mark.parametrize("cut", ["tensors", "records", "nan"])
def test_a_cut_short_recording_is_refused_naming_the_file(tmp_path, cut):
    """Issue 49: a truncated tensor file raised safetensors' own error, a traceback; a records file cut
    at a line boundary was read as a shorter recording; a NaN logit gave simulate's bounds [nan, nan]."""
    stem = tmp_path / "rec"
    jsonl, tensors = stem.with_suffix(".jsonl"), stem.with_suffix(".safetensors")
    record_conversations(
        TINY_TEACHER_PATH, workload_path("sql", "eval"), limit=2, max_new_tokens=4, top_k=4
    ).save(stem)
    if cut == "tensors":
        tensors.write_bytes(tensors.read_bytes()[:-40])
        message = f"{tensors}: not a readable tensor file"
    elif cut == "nan":
        arrays = load_file(tensors)
        arrays["topk_logits.1"][2, 3] = float("nan")
        save_file(arrays, tensors)
        message = f"{tensors}: topk_logits.1 (prompt sql_eval_1) holds nan at position [2, 3]"
    else:
        jsonl.write_text("".join(jsonl.read_text().splitlines(keepends=True)[:-1]))
        message = f"{tensors} holds the tensors of 2 prompt records, {jsonl} 1: the two files are not one"
    with pytest.raises(RecordingError) as error:
        load_recording(stem)
    assert str(error.value).startswith(message)


@pytest.mark.parametrize("tool", [record_main, simulate_main])
def test_a_dtype_typo_is_a_usage_error(tool, tmp_path, capsys):
    flags = (
        ["--target", "t", "--conversations", "c.json"]
        if tool is record_main
        else ["--recording", "r", "--draft", "d"]
    )
    with pytest.raises(SystemExit) as exit_info:
        tool([*flags, "--output", str(tmp_path / "out"), "--dtype", "bf16"])
    assert exit_info.value.code == 2
    assert "argument --dtype: invalid choice: 'bf16'" in capsys.readouterr().err
