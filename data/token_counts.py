r"""Count the tokens of the assistant answers in conversation files: the frequency file from which a
sub-vocabulary draft head picks its tokens (`--draft_vocab_size N --draft_vocab_counts FILE` in
osd.train, `osd.spec.draft_vocab`).

Count the target's own answers (e.g. `data/generate_answer.py` output, or the demo draft's general
corpus), not reference answers: the draft must cover what the target writes. Each answer is
tokenized as the engine sees it, followed by the tokenizer's EOS (the end of every answer).

    python data/token_counts.py --data data/raw_data/gsm8k_train_with_answer.json \
        --tokenizer lmsys/vicuna-7b-v1.3 --output data/raw_data/gsm8k_token_counts.json

Writes JSON: {"tokenizer", "sources", "num_answers", "num_tokens", "counts": [[id, count], ...]}
with the counts sorted from the most frequent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from collector import REPO_ROOT  # noqa: F401  (puts the repository on sys.path)
from transformers import AutoTokenizer, HfArgumentParser

from osd.conversations import assistant_answer, read_conversations
from osd.datafiles import refuse_foreign_file, refuse_overwrite, write_output
from osd.spec.draft_vocab import count_tokens
from osd.user_errors import run_main

TOOL = "data/token_counts.py"  # the writer named beside its output


@dataclass
class CountArgs:
    data: list[str] = field(
        metadata={"help": "Conversation files, folders or hub datasets with assistant answers."}
    )
    tokenizer: str = field(metadata={"help": "The target's tokenizer (hub name or path)."})
    output: str = field(metadata={"help": "The frequency file to write (JSON)."})
    split: str = field(default="train", metadata={"help": "Split of a folder or hub dataset."})


def main(argv: list[str] | None = None) -> None:
    (args,) = HfArgumentParser(CountArgs).parse_args_into_dataclasses(argv)
    refuse_overwrite(
        {"--output": args.output}, {f"--data {d}": d for d in args.data} | {"--tokenizer": args.tokenizer}
    )
    refuse_foreign_file(args.output, "--output", TOOL)
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    answers = [a for source in args.data for r in read_conversations(source, args.split, "--data")
               if (a := assistant_answer(r))]  # fmt: skip
    if not answers:
        raise ValueError(
            f"--data {' '.join(args.data)}: no assistant answers to count (answer them first: data/generate_answer.py)"
        )
    counts, n = count_tokens(answers, tokenizer)
    result = {"tokenizer": args.tokenizer, "sources": args.data, "num_answers": n, "num_tokens": sum(counts.values()),
              "counts": [[t, c] for t, c in counts.most_common()]}  # fmt: skip
    write_output(args.output, json.dumps(result), "--output", TOOL)
    print(f"{result['num_tokens']} tokens of {n} answers, {len(counts)} distinct ids -> {args.output}")


if __name__ == "__main__":
    raise SystemExit(run_main(main))
