"""osd.metric_keys: one name per group, token-weighted alpha per group, wandb's names."""

from __future__ import annotations

import pytest

from osd.metric_keys import group_alphas, group_key, upgrade_entry, wandb_key


def test_group_alpha_is_token_weighted_per_field_and_value():
    queries = [({"dataset": "sql", "topic": "joins"}, 1.5, 3), ({"dataset": "sql", "language": "en"}, 0.0, 1),
               ({"dataset": "math", "topic": "joins"}, 2.0, 2), ({"topic": None}, 9.0, 9), ({"dataset": "x"}, 0.0, 0)]  # fmt: skip
    got = group_alphas(queries)
    # fields in GROUP_FIELDS order, values sorted; a query counts in each of its fields; None is no group
    assert list(got) == ["alpha/dataset/math", "alpha/dataset/sql", "alpha/dataset/x", "alpha/topic/joins",
                         "alpha/language/en"]  # fmt: skip
    assert got["alpha/dataset/sql"] == pytest.approx(1.5 / 4)  # not the mean of per-query alphas (0.25)
    assert got["alpha/topic/joins"] == pytest.approx(3.5 / 5)
    assert got["alpha/language/en"] == 0.0 and got["alpha/dataset/x"] is None  # nothing proposed: no rate


def test_group_key_keeps_the_hierarchy_and_refuses_unknown_fields():
    assert group_key("topic", "c/c++ *") == "alpha/topic/c_c++ _"
    with pytest.raises(ValueError, match="group field must be one of"):
        group_key("domain", "sql")


def test_wandb_names_are_the_ones_hf_wandbcallback_logs():
    assert wandb_key("alpha/dataset/sql") == "train/alpha/dataset/sql"
    assert wandb_key("eval_alpha/dataset/sql") == "eval/alpha/dataset/sql"


def test_upgrade_renames_the_old_counter_of_online_entries_only():
    assert upgrade_entry({"queries": 3, "alpha_window": 0.1}) == {"queries_served": 3, "alpha_window": 0.1}
    assert upgrade_entry({"queries": 3, "loss": 1.0}) == {"queries": 3, "loss": 1.0}
