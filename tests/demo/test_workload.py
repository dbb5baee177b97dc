"""The local workload: deterministic, in the conversation format, SQL that executes."""

from __future__ import annotations

import ast
import json
import sqlite3

import build_local_workload as wl
import pytest

from osd.conversations import load_conversations, save_conversations
from osd.paths import DOMAINS, workload_path


@pytest.fixture(scope="module")
def small() -> dict[str, list[dict]]:
    return wl.build(seed=3, train_size=40, eval_size=10)


def test_same_seed_gives_same_bytes(small, tmp_path):
    again = wl.build(seed=3, train_size=40, eval_size=10)
    for name in small:
        save_conversations(small[name], tmp_path / "a.json")
        save_conversations(again[name], tmp_path / "b.json")
        assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes(), name


def test_other_seed_gives_other_queries(small):
    other = wl.build(seed=4, train_size=40, eval_size=10)
    assert json.dumps(other["math_train"]) != json.dumps(small["math_train"])


def test_every_domain_has_both_splits_with_group_fields(small):
    for domain in DOMAINS:
        train, evals = small[f"{domain}_train"], small[f"{domain}_eval"]
        assert len(train) == 40 and len(evals) == 10
        for rec in train + evals:
            assert rec["dataset"] == domain and isinstance(rec.get("topic"), str)
            assert [t["role"] for t in rec["conversation"]] == ["user", "assistant"]
        assert all(r["language"] == "python" for r in train if domain == "code")
        # Eval queries never leak into train.
        assert not {r["conversation"][0]["content"] for r in evals} & {
            r["conversation"][0]["content"] for r in train
        }


def test_committed_workload_loads_and_is_sized(tmp_path):
    for domain in DOMAINS:
        train = load_conversations(workload_path(domain, "train"))
        evals = load_conversations(workload_path(domain, "eval"))
        # sql has fewer distinct queries: two phrasings over the templates' slot values
        assert len(train) >= (500 if domain == "sql" else 1000) and 50 <= len(evals) <= 100, domain
        assert {r["dataset"] for r in train + evals} == {domain}


def test_committed_sql_answers_execute():
    dbs = wl.sql_databases(seed=0)  # the seed the committed workload was built with
    records = load_conversations(workload_path("sql", "train")) + load_conversations(
        workload_path("sql", "eval")
    )
    assert records and {rec["topic"] for rec in records} <= set(dbs)
    errors = {}
    for rec in records:
        try:
            dbs[rec["topic"]].execute(rec["conversation"][1]["content"]).fetchall()
        except sqlite3.Error as err:
            errors[rec["id"]] = f"{err}: {rec['conversation'][1]['content']}"
    assert not errors, errors


def test_committed_code_answers_are_python_functions():
    for rec in load_conversations(workload_path("code", "eval")):
        tree = ast.parse(rec["conversation"][1]["content"])
        assert isinstance(tree.body[0], ast.FunctionDef), rec["id"]


def test_committed_math_answers_end_with_the_number():
    for rec in load_conversations(workload_path("math", "eval")):
        assert rec["conversation"][1]["content"].rsplit("#### ", 1)[1].lstrip("-").isdigit(), rec["id"]
