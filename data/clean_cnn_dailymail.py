"""CNN/DailyMail 3.0.0: summarisation instruction + article -> highlights.

Writes data/raw_data/cnn_dailymail_train.json (--size, 10000) and cnn_dailymail_test.json (--eval_size, 200).

    python data/clean_cnn_dailymail.py                           # from the hub: abisee/cnn_dailymail, config 3.0.0
    python data/clean_cnn_dailymail.py --raw_path ~/cnn_dailymail/3.0.0   # train-*.parquet, test-*.parquet (or .csv)
"""

from __future__ import annotations

from collector import DatasetSpec, Split, cli, conversation, run_main

INSTRUCTION = "Summarize the following news article in a few highlights:\n"

SPEC = DatasetSpec(
    name="cnn_dailymail",
    tag="cnn_dailymail",
    hub_name="abisee/cnn_dailymail",
    hub_config="3.0.0",
    splits=(Split("train", "train"), Split("test", "test", is_eval=True)),
    required=("article", "highlights"),
)


def transform(case: dict) -> dict:
    return {"conversation": conversation(INSTRUCTION + case["article"], case["highlights"])}


def main(argv: list[str] | None = None) -> None:
    cli(SPEC, transform, argv)


if __name__ == "__main__":
    raise SystemExit(run_main(main))
