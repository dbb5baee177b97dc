"""Finance-Alpaca: instruction (+ input when not empty) -> output.

The dataset ships one split; as in the reference, --eval_size (200) sampled records go to
data/raw_data/gbharti_finance-alpaca_eval.json and up to --size (10000) others to
gbharti_finance-alpaca_train.json.

    python data/clean_finance.py                                 # from the hub: gbharti/finance-alpaca
    python data/clean_finance.py --raw_path ~/finance-alpaca/Cleaned_date.json
"""

from __future__ import annotations

from collector import DatasetSpec, Split, cli, conversation, run_main

SPEC = DatasetSpec(
    name="gbharti_finance-alpaca",
    tag="finance",
    hub_name="gbharti/finance-alpaca",
    hub_config=None,
    splits=(Split("train", "train"),),
    required=("instruction", "output"),
    carve_eval="eval",
)


def transform(case: dict) -> dict:
    extra = (case.get("input") or "").strip()
    query = f"{case['instruction']}\n{extra}" if extra else case["instruction"]
    return {"conversation": conversation(query, case["output"])}


def main(argv: list[str] | None = None) -> None:
    cli(SPEC, transform, argv)


if __name__ == "__main__":
    raise SystemExit(run_main(main))
