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
    monkeypatch.setattr(step_cost, "step_time", record)
    c, t_draft, t_target = step_cost.cost_ratio(draft, target, context=4)
    assert isinstance(timed[0].get_output_embeddings(), SubVocabHead) and timed[1] is target
    assert (c, t_draft, t_target) == (0.5, 1.0, 2.0)
