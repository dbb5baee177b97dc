"""data/prepare_online.py: the reference's sharp/smooth files and the general CLI."""

import json
import re
from collections import Counter
from pathlib import Path

import prepare_online
import pytest

from osd.conversations import load_conversations


def write_source(path: Path, name: str, n: int) -> list[dict]:
    recs = [
        {"id": f"{name}_train_{i}", "conversation": [{"role": "user", "content": f"{name} {i}"}]}
        for i in range(n)
    ]
    path.write_text(json.dumps(recs))
    return recs


@pytest.fixture
def raw_dir(tmp_path) -> Path:
    for name, file in prepare_online.REFERENCE_INPUTS.items():
        write_source(tmp_path / file, name, {"gsm8k": 2500, "spider": 2100, "finance": 900}[name])
    return tmp_path


def test_reference_files(raw_dir, tmp_path):
    out = tmp_path / "out"
    prepare_online.main(["--raw_dir", str(raw_dir), "--output_dir", str(out)])
    sharp = load_conversations(out / "sharp.json")
    assert len(sharp) == 6000
    for i in (0, 1999, 2000, 3999, 4000, 5999):
        name = ["gsm8k", "spider", "finance"][i // 2000]
        size = {"gsm8k": 2500, "spider": 2100, "finance": 900}[name]
        assert sharp[i]["dataset"] == name and sharp[i]["id"] == f"{name}_train_{i % size}"
        assert sharp[i]["stream_index"] == i
    smooth = load_conversations(out / "smooth.json")
    first, last = Counter(r["dataset"] for r in smooth[:600]), Counter(r["dataset"] for r in smooth[-600:])
    # (0.1, 0.8, 0.1) -> (0.8, 0.1, 0.1): spider dominates the start, gsm8k the end
    assert first["spider"] > 3 * first["gsm8k"] and last["gsm8k"] > 3 * last["spider"]
    assert Counter(r["dataset"] for r in load_conversations(out / "online_sample.json")) == {
        "gsm8k": 200,
        "spider": 200,
        "finance": 200,
    }


def test_general_kinds_and_flag_errors(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    write_source(a, "a", 3)
    write_source(b, "b", 4)
    out = tmp_path / "abrupt.json"
    prepare_online.main(
        ["--kind", "abrupt", "--inputs", f"a={a}", f"b={b}", "--lengths", "2", "3", "--output", str(out)]
    )
    assert [r["id"] for r in load_conversations(out)] == [
        "a_train_0",
        "a_train_1",
        "b_train_2",
        "b_train_3",
        "b_train_0",
    ]
    prepare_online.main(["--kind", "mix", "--inputs", f"a={a}", f"b={b}", "--n", "50", "--output", str(out)])
    assert len(load_conversations(out)) == 50
    with pytest.raises(ValueError, match="--kind drift needs --start_weights and --end_weights"):
        prepare_online.main(["--kind", "drift", "--inputs", f"a={a}", f"b={b}", "--output", str(out)])
    with pytest.raises(ValueError, match="expected name=path.json"):
        prepare_online.main(["--kind", "mix", "--inputs", str(a), "--output", str(out)])


@pytest.mark.parametrize(
    ("flags", "message"),
    [(["--kind", "mix", "--weights", "-1", "2"], "--weights -1 2: expected values >= 0, not all 0"),
     (["--kind", "mix", "--weights", "0", "0"], "--weights 0 0: expected values >= 0, not all 0"),
     (["--kind", "mix", "--weights", "1"], "--weights has 1 values for 2 --inputs"),
     (["--kind", "abrupt", "--lengths", "2", "-1"], "--lengths 2 -1: expected values >= 0"),
     (["--kind", "drift", "--start_weights", "1", "0", "--end_weights", "-0.5", "1"], "--end_weights -0.5 1: "),
     (["--kind", "mix", "--n", "0"], "--n must be >= 1, got 0"),
     (["--kind", "mix", "--lengths", "2", "3"], "--lengths is for --kind abrupt, not --kind mix"),
     ([], "--inputs is for --kind abrupt or drift or mix, not no --kind")],
)  # fmt: skip
def test_a_bad_flag_value_is_refused_naming_the_flag(tmp_path, flags, message):
    """Issue 49: --weights -1 2 was refused as "start_weights [-1.0, 2.0]", an internal argument's name."""
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    write_source(a, "a", 3)
    write_source(b, "b", 4)
    with pytest.raises(ValueError, match=re.escape(message)):
        prepare_online.main([*flags, "--inputs", f"a={a}", f"b={b}", "--output", str(tmp_path / "out.json")])
    assert not (tmp_path / "out.json").exists()
