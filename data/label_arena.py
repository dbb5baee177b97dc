"""Topic and language labels for Arena-style data, and the per-group files of the routing experiments.

Languages: a record's own `language` field (Chatbot Arena ships one) is kept; missing ones are
detected offline from the script and common words. Topics (English records only, as in the
reference): the hub text classifier `alimazhar-110/website_classification` on the first user
turn (--classifier hub), or offline keyword rules over the same labels (--classifier local);
--classifier auto (default) falls back to the rules when the model cannot be loaded.

  --mode language  writes {output_dir}/{language}.json for each of --languages (default: the 5
                   most frequent), each filtered from all records (the reference filtered
                   cumulatively, leaving every file after English empty).
  --mode topic     writes {output_dir}/{topic}.json per topic ("/" in a label becomes "_").
  --mode mix       the first --per_topic records of each of --topics, shuffled with --seed,
                   each with its `topic`, to {output_dir}/mix_topics.json (the reference's mix).

    python data/label_arena.py --input data/raw_data/arena_train.json --mode mix
    python data/label_arena.py --input data/raw_data/arena_train.json --mode language --output_dir data/arena
    python data/label_arena.py --mode topic --classifier local --output_dir data/arena
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from collector import RAW_DATA_DIR
from transformers import HfArgumentParser, pipeline

from osd.conversations import load_conversations, save_conversations, user_query
from osd.datafiles import DataFileError, refuse_overwrite
from osd.user_errors import run_main

HUB_MODEL = "alimazhar-110/website_classification"
REFERENCE_TOPICS = [
    "Business/Corporate",
    "Computers and Technology",
    "Games",
    "Education",
    "Social Networking and Messaging",
]
UNKNOWN = "unknown"

# Keyword rules over the hub model's labels; a label wins by the number of its words in the text.
TOPIC_KEYWORDS: dict[str, set[str]] = {
    "Computers and Technology": set(
        "code python java javascript function program programming software computer algorithm sql database api "
        "linux server bug compile gpu cpu cuda opencl neural model data script html css react rust c++ array string class".split()
    ),
    "Business/Corporate": set(
        "business company market marketing sales customer revenue startup management strategy finance investment "
        "invest stock profit ceo corporate brand email employee employees product pricing".split()
    ),
    "Games": set(
        "game games play player players chess minecraft rpg level quest puzzle riddle dungeon pokemon".split()
    ),
    "Education": set(
        "learn learning student students school teacher university course explain homework exam math physics "
        "history science lesson essay study theorem equation".split()
    ),
    "Social Networking and Messaging": set(
        "friend friends message chat social twitter facebook instagram tweet post reply girlfriend boyfriend "
        "relationship wedding parent parents family text".split()
    ),
    "Health and Fitness": set(
        "health diet exercise doctor symptoms medicine workout sleep weight disease pain".split()
    ),
    "Food": set("recipe cook cooking food eat bake dinner restaurant ingredients".split()),
    "Travel": set("travel trip flight hotel visit tourist vacation city country".split()),
    "Sports": set("football soccer basketball tennis team match olympics coach".split()),
    "News": set("news president election government war politics".split()),
    "Law and Government": set("law legal court lawyer contract rights police".split()),
    "Streaming Services": set("movie movies film netflix series episode music song".split()),
    "Photography": set("photo photography camera picture image lens".split()),
    "E-Commerce": set("buy shop shopping order price amazon delivery".split()),
}

SCRIPT_RANGES = [  # (language, first, last code point); kana is checked before the shared CJK range
    ("Japanese", 0x3040, 0x30FF),
    ("Korean", 0xAC00, 0xD7AF),
    ("Chinese", 0x4E00, 0x9FFF),
    ("Russian", 0x0400, 0x04FF),
    ("Arabic", 0x0600, 0x06FF),
    ("Hindi", 0x0900, 0x097F),
    ("Greek", 0x0370, 0x03FF),
    ("Hebrew", 0x0590, 0x05FF),
    ("Thai", 0x0E00, 0x0E7F),
]
STOPWORDS: dict[str, set[str]] = {
    "English": set("the and is are of to in that it for you what how with this can be i my do".split()),
    "Spanish": set("el la los las de que y es en un una por para con cuál qué como del se".split()),
    "French": set("le la les des est et un une que qui pour dans avec ce je vous pas du".split()),
    "German": set("der die das und ist nicht ich ein eine zu mit den von wie was sie".split()),
    "Portuguese": set("o os as de que e é um uma para com não do da em você como".split()),
    "Italian": set("il lo gli di che e è un una per con non della sono come".split()),
    "Dutch": set("de het een en van is dat niet ik je met voor zijn op".split()),
}


def detect_language(text: str) -> str:
    """Language of `text` from its script, or, for Latin text, from its most common words."""
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return UNKNOWN
    for language, lo, hi in SCRIPT_RANGES:
        if sum(lo <= ord(c) <= hi for c in letters) >= max(1, 0.3 * len(letters)) or (
            language == "Japanese" and any(lo <= ord(c) <= hi for c in letters)
        ):
            return language
    words = re.findall(r"[^\W\d_]+", text.lower())
    hits = {lang: sum(w in stop for w in words) for lang, stop in STOPWORDS.items()}
    best = max(hits, key=hits.get)  # ties go to the first listed language
    return best if hits[best] > 0 else UNKNOWN


def keyword_topic(text: str) -> str:
    words = set(re.findall(r"[a-z+#]+", text.lower()))
    scores = {label: len(words & keys) for label, keys in TOPIC_KEYWORDS.items()}
    best = max(scores, key=scores.get)
    return best if scores[best] > 0 else UNKNOWN


def hub_topic_classifier(model: str, batch_size: int) -> Callable[[list[str]], list[str]]:
    pipe = pipeline("text-classification", model=model, truncation=True)
    return lambda texts: [out["label"] for out in pipe(texts, batch_size=batch_size)]


def topic_classifier(kind: str, model: str, batch_size: int) -> Callable[[list[str]], list[str]]:
    local = lambda texts: [keyword_topic(t) for t in texts]  # noqa: E731
    if kind == "local":
        return local
    try:
        return hub_topic_classifier(model, batch_size)
    except (OSError, ValueError) as e:
        if kind == "hub":
            raise
        print(f"could not load {model} ({type(e).__name__}: {e}); using the offline keyword rules")
        return local


@dataclass
class LabelArgs:
    input: str = field(
        default=str(RAW_DATA_DIR / "arena_train.json"),
        metadata={"help": "Conversation file (clean_arena.py)."},
    )
    mode: str = field(
        default="mix", metadata={"help": "Files to write.", "choices": ["language", "topic", "mix"]}
    )
    classifier: str = field(
        default="auto", metadata={"help": "Topic classifier.", "choices": ["auto", "hub", "local"]}
    )
    model: str = field(default=HUB_MODEL, metadata={"help": "Hub text classifier for topics."})
    output_dir: str = field(default=str(RAW_DATA_DIR), metadata={"help": "Where the files go."})
    languages: list[str] | None = field(
        default=None, metadata={"help": "language mode: languages to write (default: 5 most frequent)."}
    )
    topics: list[str] = field(
        default_factory=lambda: list(REFERENCE_TOPICS), metadata={"help": "mix mode: topics to mix."}
    )
    per_topic: int = field(default=5000, metadata={"help": "mix mode: first records taken per topic."})
    seed: int = field(default=0, metadata={"help": "mix mode: shuffle seed."})
    relabel: bool = field(
        default=False, metadata={"help": "Recompute `language`/`topic` even where present."}
    )
    batch_size: int = field(default=32, metadata={"help": "Hub classifier batch size."})


def label_languages(records: list[dict], relabel: bool) -> list[dict]:
    return [
        rec if rec.get("language") and not relabel else {**rec, "language": detect_language(user_query(rec))}
        for rec in records
    ]


def label_topics(
    records: list[dict], classify: Callable[[list[str]], list[str]], relabel: bool
) -> list[dict]:
    """English records get a `topic` (kept when present unless relabel); others are returned unchanged."""
    todo = [
        i for i, r in enumerate(records) if r.get("language") == "English" and (relabel or not r.get("topic"))
    ]
    labels = classify([user_query(records[i]) for i in todo]) if todo else []
    out = list(records)
    for i, label in zip(todo, labels, strict=True):
        out[i] = {**records[i], "topic": label}
    return out


def file_name(label: str) -> str:
    return label.replace("/", "_") + ".json"


def mix_topics(records: list[dict], topics: list[str], per_topic: int, seed: int) -> list[dict]:
    """The first `per_topic` records of each topic, shuffled together."""
    picked = []
    for topic in topics:
        members = [r for r in records if r.get("topic") == topic][:per_topic]
        if len(members) < per_topic:
            print(f"topic {topic!r}: only {len(members)} of {per_topic} records")
        picked += members
    random.Random(seed).shuffle(picked)
    return picked


def write(records: list[dict], path: Path, source: str, selection: str, counts: Counter) -> None:
    """Save the records with `selection` to `path`, never over the input `source`; none is an error."""
    if not records:
        raise DataFileError(
            f"{source}: no record with {selection} ({counts.total()} records; by value "
            f"{dict(counts.most_common(8))}); nothing to write to {path}"
        )
    refuse_overwrite({"--output_dir file": path}, {"--input": source})
    save_conversations(records, path)
    print(f"{path}: {len(records)} records")


def write_groups(records: list[dict], key: str, values: list[str], output_dir: Path, source: str) -> None:
    counts = Counter(r.get(key) for r in records)
    for value in values:
        group = [r for r in records if r.get(key) == value]  # each from all records, not cumulatively
        write(group, output_dir / file_name(value), source, f"{key} {value!r}", counts)


def main(argv: list[str] | None = None) -> None:
    (args,) = HfArgumentParser(LabelArgs).parse_args_into_dataclasses(args=argv)
    out_dir = Path(args.output_dir)
    records = label_languages(load_conversations(args.input), args.relabel)
    print(
        f"{args.input}: {len(records)} records; languages {dict(Counter(r['language'] for r in records).most_common(8))}"
    )
    if args.mode == "language":
        frequent = [
            lang for lang, _ in Counter(r["language"] for r in records).most_common() if lang != UNKNOWN
        ]
        write_groups(records, "language", args.languages or frequent[:5], out_dir, args.input)
        return
    needs_topic = args.relabel or any(r.get("language") == "English" and not r.get("topic") for r in records)
    if needs_topic:
        records = label_topics(
            records, topic_classifier(args.classifier, args.model, args.batch_size), args.relabel
        )
    topics = Counter(r["topic"] for r in records if r.get("topic"))
    print(f"topics {dict(topics.most_common())}")
    if args.mode == "topic":
        write_groups(records, "topic", list(topics), out_dir, args.input)
        return
    mixed = mix_topics(records, args.topics, args.per_topic, args.seed)
    write(mixed, out_dir / "mix_topics.json", args.input, f"a topic in {args.topics}", topics)


if __name__ == "__main__":
    raise SystemExit(run_main(main))
