"""osd.demo.report: the main job's tables."""

from __future__ import annotations

import pytest

from osd.demo.report import print_tables


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
