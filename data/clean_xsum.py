"""XSum (extreme summarisation): one-sentence instruction + document -> summary.

Writes data/raw_data/xsum_train.json (--size, 10000) and xsum_test.json (--eval_size, 200).

    python data/clean_xsum.py                                    # from the hub: EdinburghNLP/xsum
    python data/clean_xsum.py --raw_path ~/xsum                  # train/validation/test as parquet or jsonl
"""

from __future__ import annotations

from collector import DatasetSpec, Split, cli, conversation, run_main

INSTRUCTION = "Summarize the following document in one sentence:\n"

SPEC = DatasetSpec(
    name="xsum",
    tag="xsum",
    hub_name="EdinburghNLP/xsum",
    hub_config=None,
    splits=(Split("train", "train"), Split("test", "test", is_eval=True)),
    required=("document", "summary"),
)


def transform(case: dict) -> dict:
    return {"conversation": conversation(INSTRUCTION + case["document"], case["summary"])}


def main(argv: list[str] | None = None) -> None:
    cli(SPEC, transform, argv)


if __name__ == "__main__":
    raise SystemExit(run_main(main))
