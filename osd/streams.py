"""Query streams for the online experiments: abrupt shifts, gradual drift and mixes.

Every builder takes `sources`, a dict from a source name (e.g. "gsm8k") to its conversation
records (a list, or a `datasets.Dataset` as `osd.conversations.load_conversation_dataset` reads
them), and returns a list of new records in serving order. Each output record keeps the
source record's `id`, `conversation` and grouping fields, gets `dataset` = the source name when
it has none, and `stream_index` = its position in the stream. A source is read round-robin: when
a stream needs more records than a source has, it wraps around to the source's first record.
All builders are deterministic given their arguments (and seed): a list and a `datasets.Dataset`
of the same records give the same stream. The draws stay Python's `random.Random`, not
`datasets.interleave_datasets` (numpy's generator, fixed proportions only): recorded streams and
results depend on these exact orders. The experiment drivers' sources are the local workload's
domains (`load_sources`) or topics (`topic_sources`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import datasets

from osd.conversations import GROUP_FIELDS, load_conversations
from osd.paths import workload_path

KEPT_FIELDS = ("id", "conversation", *GROUP_FIELDS)
Records = Sequence[dict] | datasets.Dataset  # one source's records, in order


def stream_record(record: dict, source: str, index: int) -> dict:
    """The stream's copy of `record` (a field a `datasets.Dataset` row holds as None is absent)."""
    out = {k: record[k] for k in KEPT_FIELDS if record.get(k) is not None}
    out.setdefault("dataset", source)
    out["stream_index"] = index
    return out


def _check_sources(sources: dict[str, Records]) -> None:
    if not sources:
        raise ValueError("sources is empty; expected at least one name -> records entry")
    for name, records in sources.items():
        if not records:
            raise ValueError(f"source {name!r} has no records")


def _check_weights(weights: Sequence[float], sources: dict[str, Records], what: str) -> None:
    if len(weights) != len(sources):
        raise ValueError(f"{what} has {len(weights)} values for {len(sources)} sources {list(sources)}")
    if any(w < 0 for w in weights) or sum(weights) <= 0:
        raise ValueError(f"{what} {list(weights)}: expected non-negative values with a positive sum")


def abrupt_stream(sources: dict[str, Records], lengths: list[int]) -> list[dict]:
    """Segments in the dict's order, segment k of `lengths[k]` records from the k-th source.

    Stream position i of a segment takes the source's record i (mod its size), so consecutive
    segments use different parts of their files; with the reference's files and lengths
    (2000, 2000, 2000) this is gsm8k[0:2000] + spider[2000:4000] + finance[4000:6000].
    """
    _check_sources(sources)
    if len(lengths) != len(sources):
        raise ValueError(f"lengths has {len(lengths)} values for {len(sources)} sources {list(sources)}")
    if any(n < 0 for n in lengths) or not sum(lengths):
        raise ValueError(f"lengths {lengths}: expected non-negative segment lengths, not all 0")
    stream: list[dict] = []
    for (name, records), length in zip(sources.items(), lengths, strict=True):
        for _ in range(length):
            i = len(stream)
            stream.append(stream_record(records[i % len(records)], name, i))
    return stream


def drift_stream(
    sources: dict[str, Records], n: int, start_weights: list[float], end_weights: list[float], seed: int
) -> list[dict]:
    """`n` records whose source is drawn with proportions moving linearly from start to end.

    At position i the weights are start + (end - start) * i / n (the reference's smooth.json is
    (0.1, 0.8, 0.1) -> (0.8, 0.1, 0.1) over [gsm8k, spider, finance], n = 6000); each source
    hands out its records in order, round-robin.
    """
    _check_sources(sources)
    if n < 1:
        raise ValueError(f"n {n}: expected a stream of at least 1 record")
    _check_weights(start_weights, sources, "start_weights")
    _check_weights(end_weights, sources, "end_weights")
    rng = random.Random(seed)
    names = list(sources)
    taken = dict.fromkeys(names, 0)
    stream = []
    for i in range(n):
        weights = [s + (e - s) * i / n for s, e in zip(start_weights, end_weights, strict=True)]
        name = rng.choices(names, weights=weights)[0]
        records = sources[name]
        stream.append(stream_record(records[taken[name] % len(records)], name, i))
        taken[name] += 1
    return stream


def mix_stream(
    sources: dict[str, Records], n: int, weights: list[float] | None = None, seed: int = 0
) -> list[dict]:
    """`n` records drawn i.i.d. from the sources with fixed `weights` (uniform by default)."""
    weights = [1.0] * len(sources) if weights is None else weights
    return drift_stream(sources, n, weights, weights, seed)


def load_sources(domains: Sequence[str], split: str = "train") -> dict[str, list[dict]]:
    """The local workload's records (`data/local/{domain}_{split}.json`) of each domain, by domain."""
    return {d: load_conversations(workload_path(d, split)) for d in domains}


def topic_sources(domains: Sequence[str], topics: Sequence[str]) -> dict[str, list[dict]]:
    """The records of each topic (the workload's `topic` field, any of `domains`), by topic, in file order."""
    records = [r for recs in load_sources(domains).values() for r in recs]
    sources = {t: [r for r in records if r.get("topic") == t] for t in topics}
    missing = [t for t, recs in sources.items() if not recs]
    if missing:
        known = sorted({r["topic"] for r in records if isinstance(r.get("topic"), str)})
        raise ValueError(f"no record of {domains} has topic {missing}; topics there: {known}")
    return sources
