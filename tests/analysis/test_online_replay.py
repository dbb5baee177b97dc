"""osd.analysis.online_replay: the served alpha equals simulate's, updates happen at the interval only,
and the buffer holds the wrong positions with the target's top-K there."""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import replace

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from osd.analysis import online_replay, record, replay_server
from osd.analysis.online_replay import PRESET, offline_ceiling, replay, summarize
from osd.analysis.recording import (
    PromptRecord,
    Recording,
    RecordingError,
    check_same_target,
    load_recording,
    stream_groups,
    tokenizer_identity,
)
from osd.analysis.replay_server import topk_query
from osd.analysis.simulate import simulate
from osd.datafiles import DataFileError
from osd.distill.lm_training import IGNORE
from osd.paths import TINY_DRAFT_PATH, TINY_TEACHER_PATH, WORKLOAD_DIR
from osd.spec.draft_vocab import apply_draft_vocab
from osd.spec.eagle3 import Eagle3Head, load_head, save_head
from tests.tiny_models import RANDOM_TOKENIZER, distilled_head, draft_from_target, recorded_tiny_target


@pytest.fixture(scope="module")
def stream():
    target, recording = recorded_tiny_target(24)
    return draft_from_target(target, noise=0.6), recording


def test_without_learning_it_is_simulate(stream):
    draft, recording = stream
    served = replay(recording, copy.deepcopy(draft), RANDOM_TOKENIZER, 3, PRESET, learn=False)
    simulated = simulate(recording, draft, RANDOM_TOKENIZER, gamma=3)
    for s, sim in zip(served, simulated, strict=True):
        assert s["counted"] == sum(it.counted for it in sim.iterations)
        assert s["alpha_sum"] == sum(it.alpha_sum for it in sim.iterations)
        assert s["wrong"] == sum(it.accepted < it.proposed for it in sim.iterations)
    assert 0 < sum(s["wrong"] for s in served) < sum(s["counted"] for s in served)


def test_update_interval_zero_is_static(stream):
    """--online_update_interval 0 serves the stream with the draft as it is: what no learning serves."""
    draft, recording = stream
    static_draft = copy.deepcopy(draft)
    before = {k: v.clone() for k, v in static_draft.state_dict().items()}
    static = replay(recording, static_draft, RANDOM_TOKENIZER, 3, replace(PRESET, online_update_interval=0))
    assert static == replay(recording, copy.deepcopy(draft), RANDOM_TOKENIZER, 3, PRESET, learn=False)
    assert all(torch.equal(v, static_draft.state_dict()[k]) for k, v in before.items())
    assert static != replay(recording, copy.deepcopy(draft), RANDOM_TOKENIZER, 3, PRESET, learning_rate=1e-2)


def served_heads(monkeypatch) -> list[torch.Tensor]:
    """Fills, as the replay serves, with the LM head of the model serving each query."""
    heads, real = [], replay_server.replay_greedy

    def spy(model, *args, **kwargs):
        heads.append(model.lm_head.weight.detach().clone())
        return real(model, *args, **kwargs)

    monkeypatch.setattr(replay_server, "replay_greedy", spy)
    return heads


def test_the_draft_changes_only_at_updates_and_learns(stream, monkeypatch):
    draft, recording = stream
    draft = copy.deepcopy(draft)
    snapshots = served_heads(monkeypatch)
    replay(
        recording,
        draft,
        RANDOM_TOKENIZER,
        3,
        replace(PRESET, online_update_interval=2, online_steps_per_update=2),
        learning_rate=1e-2,
    )
    moved = [not torch.equal(a, b) for a, b in zip(snapshots, snapshots[1:], strict=False)]
    assert moved == [False, True, False, True, False]  # after queries 2 and 4 (6 ends the stream)


def test_buffered_example_labels_the_positions_and_keeps_their_top_k(stream):
    _, recording = stream
    rec = recording.prompts[0]
    query = topk_query(rec, [0, 3])
    (ids, labels), top = query.example, query.target
    t = len(rec.prompt_ids)
    assert ids == rec.prompt_ids + rec.output_ids
    assert [i for i, y in enumerate(labels) if y != IGNORE] == [t, t + 3]
    torch.testing.assert_close(
        top.logp.float(), (rec.topk_logits[[0, 3]] - rec.logsumexp[[0, 3], None]), atol=1e-2, rtol=0
    )
    assert torch.equal(top.ids, rec.topk_ids[[0, 3]])


def test_summary_is_the_tail_of_each_group():
    served = [{"alpha_sum": a, "counted": 1} for a in (0.0, 0.0, 1.0, 0.5, 0.5, 0.0)]
    out = summarize(served, ["a", "a", "a", "b", "b", "b"])
    assert out == {"a": 1.0, "b": 0.0, "all": 2.0 / 6}


def other_queries(prompts: list[PromptRecord]) -> list[PromptRecord]:
    """The same queries under ids the stream does not use."""
    return [dataclasses.replace(p, id=f"other_{p.id}") for p in prompts]


def test_offline_ceiling_never_trains_on_the_tail_it_reports(stream, monkeypatch):
    import osd.analysis.online_replay as module

    draft, recording = stream
    groups = ["a"] * 3 + ["b"] * 3
    trained = []
    real = module.train_lm
    monkeypatch.setattr(
        module,
        "train_lm",
        lambda m, examples, *a, **k: trained.append(examples) or real(m, examples, *a, **k),
    )
    before = copy.deepcopy(draft.state_dict())
    # --offline_more: a larger recording of the same file (ids 2..5 are the stream's) and 2 other queries
    more = Recording(recording.header, recording.prompts[2:] + other_queries(recording.prompts[:2]))
    offline_ceiling(recording, draft, RANDOM_TOKENIZER, 3, groups, steps=2, more=(more, ["a"] * 6))
    assert all(torch.equal(v, draft.state_dict()[k]) for k, v in before.items())  # the draft is not touched
    prompts = [r.prompt_ids + r.output_ids for r in recording.prompts]
    a_only, b_only = ([ids for ids, _ in examples] for examples in trained)
    assert (
        a_only == prompts[:2] + prompts[:2]
    )  # a's first two, then --offline_more's queries not in the stream
    assert b_only == prompts[3:5]  # b's tail (the last query) is held out


def test_offline_ceiling_learns_what_it_is_given(stream):
    draft, recording = stream
    groups = ["a"] * 3 + ["b"] * 3
    more = Recording(recording.header, other_queries(recording.prompts))  # the tails' twins, under other ids
    ceiling = offline_ceiling(recording, draft, RANDOM_TOKENIZER, 3, groups, steps=30, more=(more, groups),
                              batch_size=3, learning_rate=1e-2)  # fmt: skip
    standard = summarize(replay(recording, draft, RANDOM_TOKENIZER, 3, PRESET, learn=False), groups)
    assert set(ceiling) == {"a", "b"}
    assert all(ceiling[g] > standard[g] for g in ("a", "b")), (ceiling, standard)


def test_a_heads_offline_ceiling_learns_what_it_is_given():
    """--drafter head --offline_steps: a fresh head distilled on the tails' twins (the target's recorded states and
    top-K) drafts the tails better than it did untrained."""
    target, recording = recorded_tiny_target(24, layers=4, features=True)
    head, embed = Eagle3Head.for_target(target).float(), target.get_input_embeddings()
    groups = ["a"] * 3 + ["b"] * 3
    more = Recording(recording.header, other_queries(recording.prompts))
    ceiling = offline_ceiling(recording, head, RANDOM_TOKENIZER, 3, groups, steps=30, more=(more, groups),
                              batch_size=3, learning_rate=1e-2, embed=embed)  # fmt: skip
    standard = summarize(
        replay(recording, head, RANDOM_TOKENIZER, 3, PRESET, learn=False, embed=embed), groups
    )
    assert set(ceiling) == {"a", "b"}
    assert all(ceiling[g] > standard[g] for g in ("a", "b")), (ceiling, standard)


def test_a_bf16_copy_serves_refreshed_after_each_update_while_the_draft_trains_in_float32(
    stream, monkeypatch
):
    draft, recording = stream
    draft = copy.deepcopy(draft)
    heads = served_heads(monkeypatch)
    bf16 = torch.bfloat16
    replay(
        recording,
        draft,
        RANDOM_TOKENIZER,
        3,
        replace(PRESET, online_update_interval=4, draft_serving_dtype="bfloat16"),
        learning_rate=1e-2,
    )
    assert draft.dtype == torch.float32
    assert all(h.dtype == bf16 for h in heads)
    assert torch.equal(heads[0], heads[3]) and torch.equal(heads[4], heads[5])
    assert torch.equal(heads[4], draft.lm_head.weight.detach().to(bf16))  # the update after query 4
    assert not torch.equal(heads[3], heads[4])


def test_static_bf16_serving_is_simulate_with_a_bf16_draft(stream):
    draft, recording = stream
    bf16 = replace(PRESET, draft_serving_dtype="bfloat16")
    served = replay(recording, copy.deepcopy(draft), RANDOM_TOKENIZER, 3, bf16, learn=False)
    simulated = simulate(recording, copy.deepcopy(draft).to(torch.bfloat16), RANDOM_TOKENIZER, gamma=3)
    assert [s["alpha_sum"] for s in served] == [
        sum(it.alpha_sum for it in sim.iterations) for sim in simulated
    ]


@pytest.fixture(scope="module")
def recorded_file(tmp_path_factory):
    """(recording stem, conversation file): the tiny demo teacher on four sql eval prompts, 8 tokens, top-8."""
    folder = tmp_path_factory.mktemp("recorded")
    stream = folder / "stream.json"
    stream.write_text(json.dumps(json.loads((WORKLOAD_DIR / "sql_eval.json").read_text())[:4]))
    record.main(["--target", str(TINY_TEACHER_PATH), "--conversations", str(stream), "--max_new_tokens", "8",
                 "--top_k", "8", "--output", str(folder / "rec")])  # fmt: skip
    return folder / "rec", stream


def test_saved_draft_is_the_online_draft_after_the_stream(recorded_file, tmp_path):
    """--save_draft writes the draft the online replay ended with (in --draft_dtype, with its tokenizer), the
    one a direct replay of the same stream and recipe ends with; it refuses to write over --draft."""
    rec, stream = recorded_file
    flags = ["--recording", str(rec), "--stream", str(stream), "--draft", str(TINY_DRAFT_PATH),
             "--gamma", "3", "--learning_rate", "1e-2", "--draft_dtype", "bfloat16"]  # fmt: skip
    online_replay.main(flags + ["--save_draft", str(tmp_path / "online")])

    start = AutoModelForCausalLM.from_pretrained(TINY_DRAFT_PATH, dtype=torch.float32)
    expected = apply_draft_vocab(copy.deepcopy(start))
    torch.manual_seed(0)  # main's --seed
    tokenizer = tokenizer_identity(AutoTokenizer.from_pretrained(TINY_DRAFT_PATH))
    replay(load_recording(rec), expected, tokenizer, 3, PRESET, learning_rate=1e-2)
    saved = AutoModelForCausalLM.from_pretrained(tmp_path / "online")
    assert saved.dtype == torch.bfloat16
    assert any(not torch.equal(v, start.state_dict()[k]) for k, v in expected.state_dict().items())
    for name, value in expected.state_dict().items():
        assert torch.equal(saved.state_dict()[name], value.to(torch.bfloat16)), name
    assert (
        AutoTokenizer.from_pretrained(tmp_path / "online").get_vocab()
        == AutoTokenizer.from_pretrained(TINY_DRAFT_PATH).get_vocab()
    )
    with pytest.raises(DataFileError, match="--save_draft"):
        online_replay.main(flags + ["--save_draft", str(TINY_DRAFT_PATH)])


def test_limit_replays_the_first_queries_only(recorded_file, tmp_path):
    rec, stream = recorded_file
    flags = ["--recording", str(rec), "--stream", str(stream), "--draft", str(TINY_DRAFT_PATH), "--gamma", "3"]  # fmt: skip
    online_replay.main(flags + ["--limit", "2", "--out", str(tmp_path / "two.json")])
    served = json.loads((tmp_path / "two.json").read_text())["queries"]
    first = [r.id for r in load_recording(rec).prompts[:2]]
    assert [q["id"] for q in served["standard"]] == [q["id"] for q in served["online"]] == first
    with pytest.raises(SystemExit):
        online_replay.main(flags + ["--limit", "0"])


@pytest.mark.parametrize(
    ("flags", "message"),
    [(["--offline_steps", "-1"], "argument --offline_steps: -1; expected 0 or more"),
     (["--threads", "0"], "argument --threads: 0; expected at least 1"),
     (["--offline_more", "r", "c.json"], "--offline_more adds training queries to the offline ceiling")],
)  # fmt: skip
def test_bad_flags_are_usage_errors_before_anything_loads(flags, message, capsys):
    """Issue 49: --offline_steps -1 printed the untrained draft as the offline "ceiling"."""
    with pytest.raises(SystemExit) as exit_info:
        online_replay.main(["--recording", "none", "--stream", "none.json", "--draft", "none", *flags])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_a_stream_other_than_the_recorded_one_is_refused_naming_both(recorded_file, tmp_path):
    """Issue 49 (rule 2): the groups came from any --stream, cut to the recording's length, unchecked."""
    rec, stream = recorded_file
    records = json.loads(stream.read_text())
    shifted, short = tmp_path / "shifted.json", tmp_path / "short.json"
    shifted.write_text(json.dumps(records[1:] + records[:1]))
    short.write_text(json.dumps(records[:2]))
    recording = load_recording(rec)
    assert stream_groups(recording, str(rec), stream, "--stream") == ["sql"] * 4
    with pytest.raises(RecordingError, match=f"--stream {shifted} is not the stream recorded in {rec}: the "
                       "recording's prompt 0 is 'sql_eval_0', the file has 'sql_eval_1'"):  # fmt: skip
        online_replay.main(
            ["--recording", str(rec), "--stream", str(shifted), "--draft", str(TINY_DRAFT_PATH)]
        )
    with pytest.raises(RecordingError, match=f"--offline_more {short} is not .* prompt 2 is 'sql_eval_2', the file "
                       "ends before it"):  # fmt: skip
        stream_groups(recording, str(rec), short, "--offline_more")


def test_recordings_of_another_target_are_refused_naming_both(recorded_file):
    recording = load_recording(recorded_file[0])
    check_same_target(recording, "a", load_recording(recorded_file[0]), "b")
    other = Recording({**recording.header, "temperature": 0.5, "tokenizer": {**recording.header["tokenizer"],
                       "eos_token_id": 7}}, recording.prompts)  # fmt: skip
    with pytest.raises(RecordingError, match="recordings a and b were made differently: temperature 1.0 vs 0.5; "
                       "tokenizer: eos_token_id .* vs 7"):  # fmt: skip
        check_same_target(recording, "a", other, "b")


def test_a_head_replay_measures_plain_distillation_against_the_rejected_proposals_term(tmp_path):
    """--drafter head on a recording of the target's states: one distilled head replayed on one stream with
    --online_rejected_weight 0 (plain distillation) and 1 (Aurora's term). Standard SD is the same run in both; the
    term changes the updates, so the online heads differ; both alphas are measured."""
    stream = tmp_path / "stream.json"
    stream.write_text(json.dumps(json.loads((WORKLOAD_DIR / "sql_eval.json").read_text())[:6]))
    record.main(["--target", str(TINY_TEACHER_PATH), "--conversations", str(stream), "--max_new_tokens", "12",
                 "--top_k", "8", "--features", "--output", str(tmp_path / "rec")])  # fmt: skip
    teacher = AutoModelForCausalLM.from_pretrained(TINY_TEACHER_PATH)
    head = distilled_head(teacher, vocab_size=1024, steps=40)
    save_head(head, tmp_path / "head")
    flags = ["--recording", str(tmp_path / "rec"), "--stream", str(stream), "--drafter", "head", "--head_path",
             str(tmp_path / "head"), "--gamma", "3", "--learning_rate", "3e-3", "--online_loss_positions", "all"]  # fmt: skip
    results = {
        weight: online_replay.main(
            [*flags, "--online_rejected_weight", weight, "--save_draft", str(tmp_path / weight)]
        )
        for weight in ("0", "1")
    }
    assert results["0"]["standard"] == results["1"]["standard"] and 0 < results["0"]["standard"]["all"] < 1
    plain, aurora = load_head(tmp_path / "0"), load_head(tmp_path / "1")
    assert not torch.equal(plain.fc.weight, aurora.fc.weight)
    assert all(0 <= results[w]["online"]["all"] <= 1 for w in results)
