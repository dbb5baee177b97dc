"""benchmarks/table1_offline.py on small pairs: a decoder-only pair (the tiny one) and the T5 demo pair,
one or two cells each, in seconds."""

from __future__ import annotations

import json

import pytest

from benchmarks.table1_offline import main
from osd.paths import TINY_DRAFT_PATH, TINY_TEACHER_PATH

SMALL = ["--max_steps", "2", "--batch_size", "2", "--max_eval_samples", "3", "--max_new_tokens", "8"]
SMALL += ["--max_propose_num", "2", "--teacher_dtype", "float32"]


def run(tmp_path, *args: str) -> dict:
    argv = [*SMALL, "--out_dir", str(tmp_path / "out"), "--work_dir", str(tmp_path / "work"), *args]
    main(argv)
    (result,) = (json.loads(p.read_text()) for p in (tmp_path / "out").glob("*.json"))
    return result


@pytest.mark.slow
def test_decoder_cells_with_the_two_new_divergences(tmp_path):
    tiny = ["--draft_path", str(TINY_DRAFT_PATH), "--teacher_path", str(TINY_TEACHER_PATH)]
    result = run(tmp_path, *tiny, "--sample_sources", "mix_token", "--kl_methods", "reference_mix", "tvd",
                 "--learning_rate", "1e-3", "--name", "grid")  # fmt: skip
    assert result["command"].startswith("python benchmarks/table1_offline.py --max_steps 2")
    assert [(r["sample_source"], r["kl_method"]) for r in result["runs"]] == [
        ("mix_token", "reference_mix"),
        ("mix_token", "tvd"),
    ]
    for r in result["runs"]:
        assert 0 <= r["alpha"] <= 1 and r["first_loss"] > 0
    table = (tmp_path / "out" / "grid.md").read_text()
    assert "| mix_token | " in table and "reference_mix | tvd |" in table
    (tmp_path / "out" / "grid.png").unlink()
    main(["--out_dir", str(tmp_path / "out"), "--name", "grid", "--plot_only"])  # redrawn from grid.json
    assert (tmp_path / "out" / "grid.png").stat().st_size > 0
    answers = json.loads((tmp_path / "work" / "sql_train_teacher_answers.json").read_text())
    assert len(answers) == 4  # max_steps x batch_size training queries answered by the teacher


@pytest.mark.slow
def test_t5_pair_cell_without_learning_keeps_the_standard_alpha(tmp_path):
    """lr 0 leaves the draft as it was, so the cell must measure exactly the Standard row: the
    T5 path (encoder inputs, decoder start, collator) is the one Standard was measured on."""
    result = run(tmp_path, "--pair", "t5", "--sample_sources", "student", "--kl_methods", "jsd",
                 "--learning_rate", "0")  # fmt: skip
    assert result["args"]["teacher_path"] == "osd/demo/models/t5/teacher"  # repository-relative, the default
    (cell,) = result["runs"]
    assert 0 < result["standard"]["alpha"] < 1
    assert cell["alpha"] == pytest.approx(result["standard"]["alpha"], abs=1e-12)
    assert (tmp_path / "out" / "table1_t5_sql.md").exists()


def test_unknown_divergence_is_refused(tmp_path):
    with pytest.raises(ValueError, match="--kl_methods: unknown \\['kl'\\]"):
        run(tmp_path, "--kl_methods", "kl")
