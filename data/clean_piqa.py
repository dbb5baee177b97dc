"""PIQA (physical commonsense): goal -> the correct solution (sol1 or sol2 by `label`).

The test split's labels are hidden (-1), so its records carry the query only.
Writes data/raw_data/piqa_train.json (--size, 10000) and piqa_test.json (--eval_size, 200).

    python data/clean_piqa.py                                    # from the hub: ybisk/piqa
    python data/clean_piqa.py --raw_path ~/piqa                  # train/validation/test as parquet, jsonl or csv with a label column
"""

from __future__ import annotations

from collector import DatasetSpec, Split, cli, conversation, run_main

SPEC = DatasetSpec(
    name="piqa",
    tag="piqa",
    hub_name="ybisk/piqa",
    hub_config=None,
    splits=(Split("train", "train"), Split("test", "test", is_eval=True)),
    required=("goal", "sol1", "sol2"),
)


def transform(case: dict) -> dict:
    label = str(case.get("label", "-1")).strip()  # an int from parquet/json, a string from csv
    answer = {"0": case["sol1"], "1": case["sol2"]}.get(label)
    return {"conversation": conversation(case["goal"], answer)}


def main(argv: list[str] | None = None) -> None:
    cli(SPEC, transform, argv)


if __name__ == "__main__":
    raise SystemExit(run_main(main))
