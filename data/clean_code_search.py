"""CodeSearchNet Python: the reference's instruction + docstring -> function code.

Reads the hub's fields (func_documentation_string, func_code_string) or the original release's
jsonl fields (docstring, code). Writes data/raw_data/code_search_net_train.json (--size, 10000)
and code_search_net_test.json (--eval_size, 200).

    python data/clean_code_search.py                             # from the hub: code-search-net/code_search_net, config python
    python data/clean_code_search.py --raw_path ~/CodeSearchNet/python/final/jsonl   # train/*.jsonl.gz unpacked to train.jsonl, test.jsonl
"""

from __future__ import annotations

from collector import DatasetSpec, Split, cli, conversation, first_present, run_main

INSTRUCTION = "Please generate code based on the following doc:\n"
DOC_FIELDS = ("func_documentation_string", "docstring")
CODE_FIELDS = ("func_code_string", "code")

SPEC = DatasetSpec(
    name="code_search_net",
    tag="code_search",
    hub_name="code-search-net/code_search_net",
    hub_config="python",
    splits=(Split("train", "train"), Split("test", "test", is_eval=True)),
    required=(DOC_FIELDS, CODE_FIELDS),
)


def transform(case: dict) -> dict | None:
    if case.get("language", "python") != "python":  # a multi-language raw dump
        return None
    return {
        "conversation": conversation(
            INSTRUCTION + first_present(case, DOC_FIELDS), first_present(case, CODE_FIELDS)
        )
    }


def main(argv: list[str] | None = None) -> None:
    cli(SPEC, transform, argv)


if __name__ == "__main__":
    raise SystemExit(run_main(main))
