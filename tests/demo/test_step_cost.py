"""osd.demo.step_cost: c is the draft's cost as it serves, sub-vocabulary head included."""

from __future__ import annotations

import osd.demo.step_cost as step_cost
from osd.spec.draft_vocab import CONFIG_KEY, SubVocabHead
from tests.tiny_models import tiny_model


def test_cost_ratio_times_a_saved_sub_vocabulary_draft_with_its_head(monkeypatch):
    draft, target = tiny_model("llama", layers=1), tiny_model("llama", layers=2, seed=1)
    setattr(draft.config, CONFIG_KEY, list(range(8)))  # as from_pretrained leaves a draft saved with one
    timed = []

    def record(model, context, **timing) -> float:  # seconds 1, 2, ... in call order
        timed.append(model)
        return float(len(timed))

    monkeypatch.setattr(step_cost, "draft_step_time", record)  # the draft as the engine steps it
    monkeypatch.setattr(step_cost, "target_pass_time", record)
    c, t_draft, t_target = step_cost.cost_ratio(draft, target, context=4)
    assert isinstance(timed[0].get_output_embeddings(), SubVocabHead) and timed[1] is target
    assert (c, t_draft, t_target) == (0.5, 1.0, 2.0)


def test_with_gamma_the_draft_is_timed_in_chains_between_target_passes(monkeypatch):
    draft, target = tiny_model("llama", layers=1), tiny_model("llama", layers=2, seed=1)
    setattr(draft.config, CONFIG_KEY, list(range(8)))
    calls = []

    def chain(model, between, context, gamma, **timing) -> float:
        calls.append((model, between, gamma))
        return 1.0

    monkeypatch.setattr(step_cost, "chain_step_time", chain)
    monkeypatch.setattr(step_cost, "target_pass_time", lambda model, context, **timing: 4.0)
    assert step_cost.cost_ratio(draft, target, context=4, gamma=3) == (0.25, 1.0, 4.0)
    assert calls[0][1] is target and calls[0][2] == 3
    assert isinstance(calls[0][0].get_output_embeddings(), SubVocabHead)


def test_a_chain_step_is_timed_on_the_real_caches_and_leaves_the_models_as_they_were():
    import torch

    from osd.spec.timing import chain_step_time

    draft, target = tiny_model("llama", layers=1), tiny_model("llama", layers=2, seed=1)
    before = {k: v.clone() for k, v in draft.state_dict().items()}
    seconds = chain_step_time(draft, target, context=8, gamma=3, reps=2, rounds=1)
    assert 0 < seconds < 10 and all(torch.equal(v, draft.state_dict()[k]) for k, v in before.items())
