"""GSM8K (grade-school math): question -> worked answer ending in `#### <number>`.

Writes data/raw_data/gsm8k_train.json (--size, default 10000) and gsm8k_test.json (--eval_size, 200).

    python data/clean_gsm8k.py                                   # from the hub: openai/gsm8k, config main
    python data/clean_gsm8k.py --raw_path ~/gsm8k/main            # train.jsonl/test.jsonl or the hub's parquet shards
    python data/clean_gsm8k.py --raw_path train.jsonl --size 500 --seed 1 --output_dir /tmp/osd_data
"""

from __future__ import annotations

from collector import DatasetSpec, Split, cli, conversation, run_main

SPEC = DatasetSpec(
    name="gsm8k",
    tag="gsm8k",
    hub_name="openai/gsm8k",
    hub_config="main",
    splits=(Split("train", "train"), Split("test", "test", is_eval=True)),
    required=("question", "answer"),
)


def transform(case: dict) -> dict:
    return {"conversation": conversation(case["question"], case["answer"])}


def main(argv: list[str] | None = None) -> None:
    cli(SPEC, transform, argv)


if __name__ == "__main__":
    raise SystemExit(run_main(main))
