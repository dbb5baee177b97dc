"""osd.demo.report: the main job's tables."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from osd.demo.report import TailServing, print_tables
from osd.models import load_model
from osd.online.records import QueryStats
from osd.paths import TINY_DRAFT_PATH, TINY_TEACHER_PATH
from osd.spec import SpeculativeDecoder


def row(domain: str, queries: int, online_alpha: float | None) -> dict:
    return {"domain": domain, "queries": list(range(queries)),
            "standard": {"alpha": 0.25, "sd_tokens": 30, "sd_s": 1.0, "target_tokens": 30, "target_s": 1.5},
            "online": {"alpha": online_alpha, "tokens": 30, "s": 0.75}}  # fmt: skip


@pytest.mark.parametrize(
    ("counts", "header"), [((1, 1), "last 1 query of each"), ((2, 1), "last 1/2 queries")]
)
def test_the_header_counts_the_tail_and_an_undefined_alpha_prints_as_a_dash(capsys, counts, header):
    print_tables(
        [row("sql", counts[0], None), row("math", counts[1], 0.5)], {"standard": 1, "online": "auto"}
    )
    out = capsys.readouterr().out
    assert header in out and "nan" not in out.lower() and "gamma: Standard SD 1, online SD adaptive" in out
    sql = next(line for line in out.splitlines() if line.startswith("sql") and "x)" not in line)
    assert sql.split()[1:3] == ["0.250", "-"]
    assert "all" in out and "(1.50x)" in out and "(2.00x)" in out


def test_each_domains_tail_is_served_alone_and_by_standard_sd_right_after_its_last_query():
    # a mixed stream: sql's last two queries are 2 and 5, math's 3 and 4
    domains = ["sql", "math", "sql", "math", "math", "sql"]
    stream = [{"dataset": d} for d in domains]
    torch.manual_seed(0)
    dataset = [{"prompt_ids": torch.randint(3, 200, (5 + i,)).tolist()} for i in range(len(stream))]
    target, draft = (
        load_model(TINY_TEACHER_PATH, "float32", None),
        load_model(TINY_DRAFT_PATH, "float32", None),
    )
    decoder = SpeculativeDecoder(draft.eval(), target.eval(), gamma=2)
    args = SimpleNamespace(domains=["sql", "math"], tail=2, max_new_tokens=6)
    tails = TailServing(stream, dataset, decoder, target, eos=-1, args=args)
    served_after = []
    for step in range(1, len(stream) + 1):  # after step n the stream's queries 0..n-1 are served
        tails.on_step_end(None, SimpleNamespace(global_step=step), None)
        served_after.append(sorted(tails.served))
    assert served_after == [[], [], [], [], ["math"], ["math", "sql"]]
    for result in tails.served.values():  # greedy on an fp32 target: both emit the target's own tokens
        assert result["sd_tokens"] == result["target_tokens"] == 2 * 6 and 0.0 <= result["alpha"] <= 1.0
        assert result["sd_s"] > 0 and result["target_s"] > 0
    queries = [QueryStats(alpha_sum=i, num_proposed=10, accepted=i, steps=4, groups={}, num_generated=6,
                          wall_time_s=1.0, update_time_s=0.5 * i) for i in range(len(stream))]  # fmt: skip
    rows = tails.rows(queries)
    assert [(r["domain"], r["queries"]) for r in rows] == [("sql", [2, 5]), ("math", [3, 4])]
    assert rows[0]["online"] == {"alpha": (2 + 5) / 20, "tokens": 12, "s": 2.0 + 0.5 * (2 + 5)}
    assert rows[1]["standard"] is tails.served["math"]
