"""HellaSwag (commonsense continuation): context `ctx` -> the correct ending (`endings[label]`).

Also reads Decoding Speculative Decoding's `hellaswag.json` (JSON lines of `{"prompt": ...}`,
the contexts its LLaMA-65B outputs were recorded on): those records carry the query only.
The hub's test split hides its labels (""), so its records carry the query only too.
Writes data/raw_data/hellaswag_train.json (--size, 10000) and hellaswag_validation.json (--eval_size, 200).

    python data/clean_hellaswag.py                                          # from the hub: Rowan/hellaswag
    python data/clean_hellaswag.py --raw_path ~/hellaswag                   # train/validation as parquet or jsonl
    python data/clean_hellaswag.py --raw_path hellaswag.json --splits validation --eval_size 0   # DSD's prompts
"""

from __future__ import annotations

from collector import DatasetSpec, Split, cli, conversation, first_present, run_main

SPEC = DatasetSpec(
    name="hellaswag",
    tag="hellaswag",
    hub_name="Rowan/hellaswag",
    hub_config=None,
    splits=(Split("train", "train"), Split("validation", "validation", is_eval=True)),
    required=(("ctx", "prompt"),),  # the hub's context, or DSD's prompt
)


def transform(case: dict) -> dict:
    label = str(case.get("label", "")).strip()  # a string on the hub, "" where hidden
    endings = case.get("endings") or []
    answer = endings[int(label)] if label.isdigit() and int(label) < len(endings) else None
    record = {"conversation": conversation(first_present(case, ("ctx", "prompt")), answer)}
    if isinstance(case.get("activity_label"), str):
        record["topic"] = case["activity_label"]
    return record


def main(argv: list[str] | None = None) -> None:
    cli(SPEC, transform, argv)


if __name__ == "__main__":
    raise SystemExit(run_main(main))
