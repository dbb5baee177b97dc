"""An EAGLE-3 head in the online loop: what a served query keeps (`FeatureQuery`, from verification), the buffer's
checkpoint round trip, the rejected proposals' term of the loss, and the loop serving and distilling a head."""

from __future__ import annotations

import argparse
import io
from dataclasses import asdict
from functools import partial

import pytest
import torch

from osd.distill.losses import forward_kl, rejected_proposal_loss
from osd.online.buffer import BufferedQuery, Buffers, teacher_forced_feature_query
from osd.online.config import OnlineArguments, add_online_flags, online_arguments
from osd.online.engine_server import EngineServer
from osd.online.head_loss import FeatureQuery, head_distillation_loss, target_features, ttt_logits
from osd.online.loop import SHARED_DRAFT, OnlineLoop, Query
from osd.online.records import OnlineState
from osd.online.updater import DraftUpdater, adamw_step
from osd.spec.eagle3 import Eagle3Head
from tests.tiny_models import EOS, tiny_llama

NEW_TOKENS = 12


@pytest.fixture(scope="module")
def target():
    return tiny_llama(layers=4, head_scale=8.0)


def served(target, head, prompt: list[int], positions: str = "all") -> FeatureQuery:
    """What the engine server keeps of `prompt` served by `head` (greedy, gamma 3)."""
    server = EngineServer(target, 3, NEW_TOKENS, EOS, 0, buffer_dtype=torch.float32)
    (query,) = server.serve([Query(prompt)], lambda route: head, 0)
    return query.keep(positions)


def test_a_served_query_keeps_the_verified_states_logits_and_rejected_proposals(target):
    """The tokens, the target's states at every position but the last and its logits at the loss positions, as
    teacher-forced passes compute them; each rejected proposal at the index of the target's token that replaced
    it (which rejected proposal a chain step made: tests/spec/test_eagle3.py)."""
    head = Eagle3Head.for_target(target, seed=2)
    prompt = [5, 9, 14, 3]
    query = served(target, head, prompt)
    assert query.tokens[:4].tolist() == prompt and len(query.tokens) == 4 + NEW_TOKENS
    torch.testing.assert_close(query.features, target_features(target, head.target_layers, query.tokens))
    assert query.positions.tolist() == list(range(4, 4 + NEW_TOKENS))
    with torch.no_grad():
        logits = target(query.tokens[None, :-1]).logits[0]  # row j predicts tokens[j + 1]
    torch.testing.assert_close(query.target_logits, logits[query.positions - 1], rtol=1e-4, atol=1e-4)
    assert len(query.rejected) > 0
    replaced_by = query.tokens[query.rejected[:, 0]]  # the target's token where each proposal was rejected
    assert (replaced_by != query.rejected[:, 2]).all()
    wrong = served(target, head, prompt, "wrong")
    assert wrong.positions.tolist() == query.rejected[:, 0].tolist()  # --online_loss_positions wrong


@pytest.mark.parametrize("positions", ["all", "wrong"])
def test_a_teacher_forced_query_keeps_what_verification_kept(target, positions):
    """Where the server keeps no target states nor logits (osd.serving on vLLM), one teacher-forced forward gives
    the query the engine's verification kept, but for the rejected proposals, which vLLM does not report."""
    head = Eagle3Head.for_target(target, seed=2)
    prompt = [5, 9, 14, 3]
    kept = served(target, head, prompt, positions)
    generated = kept.tokens[len(prompt) :].tolist()
    query = teacher_forced_feature_query(
        target, head.target_layers, prompt, generated, (kept.positions - len(prompt)).tolist(), torch.float32
    )
    assert torch.equal(query.tokens, kept.tokens) and torch.equal(query.positions, kept.positions)
    assert len(query.positions) > 0 and len(query.rejected) == 0
    torch.testing.assert_close(query.features, kept.features)
    torch.testing.assert_close(query.target_logits, kept.target_logits, rtol=1e-4, atol=1e-4)


def test_buffers_rebuild_a_heads_and_a_draft_models_queries_from_a_checkpoint(target):
    """`Buffers.state_dict` -> torch.save -> torch.load(weights_only) -> `load_state_dict`: the same queries, each
    of its kind, so that a resumed run trains on what the interrupted one had buffered."""
    head_query = served(target, Eagle3Head.for_target(target), [5, 9, 14, 3])
    ids = torch.tensor([4, 5, 6, 7])
    model_query = BufferedQuery(ids[:2], ids[2:], torch.tensor([1]), torch.randn(1, 8))
    buffers = Buffers(interval=2, replay=0)
    buffers.add("head", head_query)
    buffers.add("model", model_query)
    saved = io.BytesIO()
    torch.save(buffers.state_dict(), saved)
    saved.seek(0)
    restored = Buffers(interval=2, replay=0)
    restored.load_state_dict(torch.load(saved, weights_only=True))
    for route, original in (("head", head_query), ("model", model_query)):
        (query,) = restored.queries[route]
        assert type(query) is type(original)
        for name, value in asdict(original).items():
            torch.testing.assert_close(getattr(query, name), value, rtol=0, atol=0)


def test_the_rejected_term_adds_the_weighted_minus_log_one_minus_q_of_each_rejected_proposal(target):
    """loss(w) - loss(0) = w * -log(1 - q(x)) at the entry and step that proposed each rejected x, over the step's
    counted positions (the term of `osd.online.head_loss`, computed apart from it)."""
    head = Eagle3Head.for_target(target, seed=1)
    tokens = torch.tensor([5, 9, 14, 3, 7, 20, 11, 30, 8])
    with torch.no_grad():
        logits = target(tokens[None, :-1]).logits[0]
    positions = torch.arange(2, 9)
    features = target_features(target, head.target_layers, tokens)
    rejected = torch.tensor([[6, 0, 40], [8, 2, 41]])  # (index into tokens, chain step, proposed id)
    query = FeatureQuery(tokens, features, positions, logits[positions - 1], rejected)
    loss = partial(head_distillation_loss, embed=target.get_input_embeddings(), divergence=forward_kl)
    with torch.no_grad():
        gap = loss(head, [query], rejected_weight=0.5) - loss(head, [query])
        ttt = ttt_logits(head, target.get_input_embeddings(), tokens, features, 3)
    counted = [int((positions >= 2 + s).sum()) for s in range(3)]
    q = [torch.softmax(ttt[s][p - 2 - s], -1)[x] for p, s, x in rejected.tolist()]
    steps = rejected[:, 1].tolist()
    expected = 0.5 * sum(-torch.log1p(-qi) / counted[s] for qi, s in zip(q, steps, strict=True))
    torch.testing.assert_close(gap, expected, rtol=1e-5, atol=1e-6)


def test_the_rejected_proposal_loss_is_finite_when_q_is_sure_and_lowers_q():
    """-log(1 - Q(x)) in log space: finite at Q(x) = 1 - 1e-40 (a direct log1p(-Q) is inf), and a gradient step
    lowers Q(x) alone's share."""
    logits = torch.tensor([[100.0, 0.0, 0.0], [1.0, 2.0, 0.5]], requires_grad=True)
    loss = rejected_proposal_loss(logits, torch.tensor([0, 1]))
    assert torch.isfinite(loss).all() and loss[0] > 90
    torch.testing.assert_close(loss[1], -torch.log1p(-torch.softmax(logits[1], -1)[1]))
    loss.sum().backward()
    with torch.no_grad():
        stepped = torch.softmax(logits - 0.1 * logits.grad, -1)
    assert stepped[1, 1] < torch.softmax(logits[1], -1)[1]


def test_the_loop_serves_and_distils_a_head_whose_bfloat16_copy_serves(target):
    """The engine server and the updater with a head: updates on FeatureQuery buffers change the float32 head, its
    bfloat16 serving copy follows, and the loss falls on a stream that repeats one prompt."""
    head = Eagle3Head.for_target(target, seed=3).float()
    config = OnlineArguments(online_update_interval=1, online_loss_positions="all", draft_serving_dtype="bfloat16",
                             drafter="head", online_rejected_weight=0.5)  # fmt: skip
    loss = partial(head_distillation_loss, embed=target.get_input_embeddings(), divergence=forward_kl,
                   rejected_weight=config.online_rejected_weight)  # fmt: skip
    step = adamw_step(head.parameters(), 3e-3)
    updater = DraftUpdater({SHARED_DRAFT: head}, loss, step, config, OnlineState())
    before = head.fc.weight.detach().clone()
    server = EngineServer(target, 3, NEW_TOKENS, EOS, 0)
    state = OnlineLoop(server, updater, config).run([Query([5, 9, 14, 3])] * 6)
    assert state.updates == 6 and state.losses[-1] < state.losses[0]
    assert not torch.equal(head.fc.weight, before)
    copy = updater.serving(SHARED_DRAFT)
    assert copy is not head and copy.fc.weight.dtype == torch.bfloat16
    torch.testing.assert_close(copy.fc.weight.float(), head.fc.weight.detach(), rtol=1e-2, atol=1e-2)


def test_the_drafter_flags_parse_and_refuse_head_flags_without_a_head():
    parser = argparse.ArgumentParser()
    add_online_flags(parser)
    args = online_arguments(parser.parse_args(["--drafter", "head", "--head_path", "h", "--online_rejected_weight",
                                               "0.25"]))  # fmt: skip
    assert (args.drafter, args.head_path, args.online_rejected_weight) == ("head", "h", 0.25)
    assert online_arguments(parser.parse_args([])).drafter == "model"  # the paper's draft model by default
    with pytest.raises(ValueError, match="--drafter head"):
        OnlineArguments(head_path="h")
    with pytest.raises(SystemExit):
        parser.parse_args(["--drafter", "tree"])


def test_online_flags_keep_their_types_after_hf_argument_parser_resolved_the_dataclass():
    """HfArgumentParser (osd.train) replaces the dataclass fields' annotation strings with types; the argparse
    flags built afterwards must still parse numbers as numbers."""
    from transformers import HfArgumentParser

    from osd.distill.config import DistillTrainingArguments

    HfArgumentParser(DistillTrainingArguments)
    parser = argparse.ArgumentParser()
    add_online_flags(parser)
    args = online_arguments(
        parser.parse_args(["--online_update_interval", "3", "--online_background_update"])
    )
    assert (args.online_update_interval, args.online_background_update) == (3, True)
