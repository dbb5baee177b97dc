"""osd.streams: abrupt segments, linear drift of mixing proportions, fixed mixes."""

import random
from collections import Counter

import datasets
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


def reference_drift(sources: dict[str, list[dict]], n: int, start: list[float], end: list[float], seed: int):
    """The documented drift rule, written out: (source, record id) per position."""
    rng, taken, out = random.Random(seed), dict.fromkeys(sources, 0), []
    for i in range(n):
        name = rng.choices(
            list(sources), weights=[s + (e - s) * i / n for s, e in zip(start, end, strict=True)]
        )[0]
        out.append((name, sources[name][taken[name] % len(sources[name])]["id"]))
        taken[name] += 1
    return out


@pytest.mark.parametrize("seed", [0, 7])
def test_datasets_sources_give_the_same_streams_as_lists(seed):
    """Sources read as datasets.Dataset (as prepare_online reads them) give the records, order and
    fields that lists give, and the documented rules; fields a Dataset row holds as None stay absent."""
    lists = {"a": source("a", 5), "b": source("b", 3, topic="Games"), "c": source("c", 4, language="French")}
    sets = {name: datasets.Dataset.from_list(records) for name, records in lists.items()}
    assert sets["a"][0].keys() == lists["a"][0].keys()  # (no None columns within one source)
    mixed = {"ba": lists["b"] + lists["a"]}  # a topic on some records only: None in the Dataset's rows
    assert datasets.Dataset.from_list(mixed["ba"])[3]["topic"] is None
    assert abrupt_stream({n: datasets.Dataset.from_list(r) for n, r in mixed.items()}, [9]) == abrupt_stream(
        mixed, [9]
    )
    assert abrupt_stream(sets, [4, 6, 2]) == abrupt_stream(lists, [4, 6, 2])
    drift = drift_stream(sets, 400, [0.1, 0.8, 0.1], [0.8, 0.1, 0.1], seed)
    assert drift == drift_stream(lists, 400, [0.1, 0.8, 0.1], [0.8, 0.1, 0.1], seed)
    assert [(r["dataset"], r["id"]) for r in drift] == reference_drift(
        lists, 400, [0.1, 0.8, 0.1], [0.8, 0.1, 0.1], seed
    )
    assert mix_stream(sets, 300, [3, 1, 1], seed) == mix_stream(lists, 300, [3, 1, 1], seed)
    assert [r["stream_index"] for r in drift] == list(range(400))
