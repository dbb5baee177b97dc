"""Spider (text-to-SQL): the reference's translation instruction + question -> SQL query.

Writes data/raw_data/spider_train.json (--size, default 10000) and spider_validation.json
(--eval_size, 200 random records of the validation split, as in the reference).

    python data/clean_spider.py                                  # from the hub: xlangai/spider
    python data/clean_spider.py --raw_path ~/spider/data         # train.json + validation.json (or dev.json), or parquet shards
    python data/clean_spider.py --raw_path ~/spider/train_spider.json --splits train
"""

from __future__ import annotations

from collector import DatasetSpec, Split, cli, conversation, run_main

INSTRUCTION = (
    "Could you translate the following question into SQL. "
    "Please only generate SQL, don't include explanation in the answer. "
)

SPEC = DatasetSpec(
    name="spider",
    tag="spider",
    hub_name="xlangai/spider",
    hub_config=None,
    splits=(Split("train", "train"), Split("validation", "validation", is_eval=True)),
    required=("question", "query"),
)


def transform(case: dict) -> dict:
    return {"conversation": conversation(INSTRUCTION + case["question"], case["query"])}


def main(argv: list[str] | None = None) -> None:
    cli(SPEC, transform, argv)


if __name__ == "__main__":
    raise SystemExit(run_main(main))
