"""osd.streams: abrupt segments, linear drift of mixing proportions, fixed mixes."""

from collections import Counter

import pytest

from osd.streams import abrupt_stream, drift_stream, mix_stream


def source(name: str, n: int, **extra) -> list[dict]:
    return [
        {
            "id": f"{name}{i}",
            "conversation": [{"role": "user", "content": f"{name} query {i}"}],
            "tstamp": i,
            **extra,
        }
        for i in range(n)
    ]


def test_abrupt_segments_in_order_with_wraparound():
    sources = {"a": source("a", 5), "b": source("b", 3), "c": source("c", 4, topic="Games", dataset="orig")}
    stream = abrupt_stream(sources, [4, 6, 2])
    # position i of the stream takes record i mod len(source) of its segment's source
    assert [r["id"] for r in stream] == [
        "a0",
        "a1",
        "a2",
        "a3",
        "b1",
        "b2",
        "b0",
        "b1",
        "b2",
        "b0",
        "c2",
        "c3",
    ]
    assert [r["stream_index"] for r in stream] == list(range(12))
    assert [r["dataset"] for r in stream] == ["a"] * 4 + ["b"] * 6 + [
        "orig"
    ] * 2  # an existing dataset is kept
    assert stream[-1]["topic"] == "Games" and "tstamp" not in stream[0]
    assert stream[0]["conversation"] == sources["a"][0]["conversation"]


def test_abrupt_rejects_mismatched_lengths_and_empty_sources():
    with pytest.raises(ValueError, match="lengths has 1 values for 2 sources"):
        abrupt_stream({"a": source("a", 2), "b": source("b", 2)}, [3])
    with pytest.raises(ValueError, match="source 'b' has no records"):
        abrupt_stream({"a": source("a", 2), "b": []}, [1, 1])


def test_drift_proportions_move_linearly():
    n = 20000
    stream = drift_stream({"a": source("a", 7), "b": source("b", 5)}, n, [0.9, 0.1], [0.1, 0.9], seed=3)
    names = [r["dataset"] for r in stream]

    def share_a(lo: float, hi: float) -> float:
        window = names[int(lo * n) : int(hi * n)]
        return window.count("a") / len(window)

    # P(a) at position i is 0.9 - 0.8 i/n, so its mean over [lo, hi) is 0.9 - 0.4 (lo + hi);
    # 0.03 is about 4 standard errors of a 2000-draw window.
    for lo, hi in [(0.0, 0.1), (0.45, 0.55), (0.9, 1.0)]:
        assert share_a(lo, hi) == pytest.approx(0.9 - 0.4 * (lo + hi), abs=0.03)
    a_ids = [r["id"] for r in stream if r["dataset"] == "a"]
    assert a_ids[:9] == ["a0", "a1", "a2", "a3", "a4", "a5", "a6", "a0", "a1"]  # round-robin within a source


def test_drift_is_deterministic_in_the_seed():
    sources = {"a": source("a", 3), "b": source("b", 3), "c": source("c", 3)}
    args = (sources, 300, [0.1, 0.8, 0.1], [0.8, 0.1, 0.1])
    assert drift_stream(*args, seed=0) == drift_stream(*args, seed=0)
    assert drift_stream(*args, seed=0) != drift_stream(*args, seed=1)


def test_mix_weights_and_uniform_default():
    sources = {"a": source("a", 4), "b": source("b", 4)}
    counts = Counter(r["dataset"] for r in mix_stream(sources, 8000, [3, 1], seed=0))
    assert counts["a"] / 8000 == pytest.approx(0.75, abs=0.02)  # ~4 standard errors
    uniform = Counter(r["dataset"] for r in mix_stream(sources, 8000))
    assert uniform["a"] / 8000 == pytest.approx(0.5, abs=0.02)
    with pytest.raises(ValueError, match="expected non-negative values"):
        mix_stream(sources, 10, [1, -1])
