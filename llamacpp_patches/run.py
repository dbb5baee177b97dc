r"""Serve conversation files with `llama-osd-stream` (target-only, speculative, draft-only) and report.

    python -m llamacpp_patches.run --target_gguf "$(python -c 'from osd.demo.target import gguf_path; print(gguf_path())')" \
        --draft_gguf llamacpp_patches/work/gguf/draft-f16.gguf --tokenizer_path osd/demo/models/target \
        --data_path data/local/sql_eval.json data/local/math_eval.json --limit 5 --label standard
    python -m llamacpp_patches.report runs/llamacpp/*.jsonl     # the table again, over several runs

Writes, under --out_dir: `{label}_queries.json` (the served records), `{label}.jsonl` (per query:
target-only, draft-only and speculative lines, from one `--osd-mode both` invocation) and `{label}_summary.json`,
each whole, and only over this tool's own earlier output (a file it did not write is refused before it starts).

Prompts: with `--prompt_source ids` (default) every served record carries `prompt_ids` from
`osd.prompting.encode_prompt`, so llama.cpp serves exactly the Python side's tokens. With `template`
llama.cpp tokenizes the rendered template itself and the ids are compared afterwards: they agree for
the vicuna_v1.1 template, but llama.cpp's SentencePiece tokenizer puts a space before text that
follows a special token (`<s>[INST]` -> `<s> ▁[INST]`), which a non-legacy HF tokenizer does not.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

# `python llamacpp_patches/run.py`: the repository, not this folder, is the import root
if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from transformers import AutoTokenizer, HfArgumentParser  # noqa: E402

from llamacpp_patches.gguf_vocab import check_gguf_vocab  # noqa: E402
from llamacpp_patches.prompts import osd_template, template_mismatches  # noqa: E402
from llamacpp_patches.report import format_table, load_lines, summarize  # noqa: E402
from osd.conversations import conversations_text, load_conversations, user_query  # noqa: E402
from osd.datafiles import refuse_foreign_file, refuse_overwrite, write_output  # noqa: E402
from osd.model_checks import load_pretrained  # noqa: E402
from osd.prompting import encode_prompt  # noqa: E402
from osd.spec import draft_vocab  # noqa: E402
from osd.spec.gamma import DEFAULT as GAMMA_DEFAULT  # noqa: E402
from osd.user_errors import run_main  # noqa: E402

# what a run writes under --out_dir (the draft vocabulary file only for a sub-vocabulary draft)
OUTPUTS = "{label}_queries.json {label}.jsonl {label}_summary.json {label}_draft_vocab.json"
TOOL = "llamacpp_patches.run"  # each output is written only over this tool's own (osd.datafiles.write_output)
DEFAULT_BINARY = str(Path(__file__).parent / "work" / "llama.cpp" / "build" / "bin" / "llama-osd-stream")


@dataclass
class StreamArgs:
    target_gguf: str = field(metadata={"help": "target (teacher) model, GGUF"})
    draft_gguf: str = field(metadata={"help": "draft (student) model, GGUF, same tokenizer as the target"})
    tokenizer_path: str = field(
        metadata={"help": "HF folder or hub name of the target's tokenizer (prompt template)"}
    )
    data_path: list[str] = field(
        metadata={"help": "conversation JSON files; a record without 'dataset' gets the file stem"}
    )
    label: str | None = field(
        default=None, metadata={"help": "prefix of the output files (default: the draft's file stem)"}
    )
    out_dir: str = field(default="runs/llamacpp", metadata={"help": "where the JSONL outputs go"})
    limit: int = field(default=20, metadata={"help": "records served per data file"})
    max_new_tokens: int = field(default=128, metadata={"help": "-n: new tokens per query"})
    gamma: int = field(
        default=GAMMA_DEFAULT,
        metadata={
            "help": "--spec-draft-n-max: draft tokens per verification step",
            "aliases": ["--max_propose_num"],
        },
    )
    threads: int = field(
        default=1,
        metadata={"help": "-t / -tb: CPU threads (1 on a shared 2-core box, where 2 threads spin-wait)"},
    )
    ctx_size: int | None = field(
        default=None,
        metadata={
            "help": "-c: context size of both models; default: what serving needs, the longest prompt "
            "+ --max_new_tokens + --gamma + 1"
        },
    )
    binary: str = field(
        default=DEFAULT_BINARY, metadata={"help": "the llama-osd-stream executable (build.sh)"}
    )
    extra_args: str = field(
        default="", metadata={"help": "more llama.cpp flags, e.g. '-ngl 99 -ngld 99' on a GPU"}
    )
    draft_vocab_from: str | None = field(
        default=None,
        metadata={
            "help": "HF folder of the draft: with a sub-vocabulary head (config.draft_vocab), the draft proposes "
            "over those tokens only, as osd.spec serves it (--osd-draft-vocab)"
        },
    )
    prompt_source: str = field(
        default="ids",
        metadata={
            "help": "ids: serve osd.prompting.encode_prompt's ids; template: let llama.cpp tokenize the template"
        },
    )

    def __post_init__(self) -> None:
        if self.prompt_source not in ("ids", "template"):
            raise ValueError(f"--prompt_source must be 'ids' or 'template', got {self.prompt_source!r}")
        for flag in ("limit", "max_new_tokens", "gamma", "threads"):
            if getattr(self, flag) < 1:
                raise ValueError(f"--{flag} must be >= 1, got {getattr(self, flag)}")
        if self.ctx_size is not None and self.ctx_size < 1:
            raise ValueError(
                f"--ctx_size must be >= 1 (or left out: what serving needs), got {self.ctx_size}"
            )
        if not Path(self.binary).exists():
            raise FileNotFoundError(
                f"--binary {self.binary}: not built; run `bash llamacpp_patches/build.sh`"
            )
        for flag in ("target_gguf", "draft_gguf"):
            if not Path(getattr(self, flag)).is_file():
                raise FileNotFoundError(
                    f"--{flag} {getattr(self, flag)}: no such file (convert.sh writes them)"
                )
        try:
            shlex.split(self.extra_args)
        except ValueError as e:
            raise ValueError(f"--extra_args {self.extra_args!r}: {e}") from None
        self.label = self.label or Path(self.draft_gguf).stem


def collect_queries(paths: list[str], limit: int) -> list[dict]:
    """The first `limit` records of each file, with `dataset` defaulting to the file stem."""
    records = []
    for path in paths:
        for rec in load_conversations(path)[:limit]:
            records.append({**rec, "dataset": rec.get("dataset") or Path(path).stem})
    return records


def needed_context(prompt_lengths: list[int], max_new_tokens: int, gamma: int) -> int:
    """Positions serving uses at most: the longest prompt, the new tokens, and a last verification
    pass of gamma draft tokens plus one."""
    return max(prompt_lengths) + max_new_tokens + gamma + 1


def check_prompt_ids(lines: list[dict], records: list[dict], tokenizer) -> list[str]:
    """Ids of the queries whose llama.cpp prompt ids differ from osd.prompting.encode_prompt."""
    return [
        x["id"]
        for x in lines
        if x.get("prompt_ids") is not None
        and x["prompt_ids"] != encode_prompt(tokenizer, user_query(records[x["index"]]))
    ]


def draft_vocab_file(args: StreamArgs, out_dir: Path) -> list[str]:
    """`--osd-draft-vocab FILE` for a draft saved with a sub-vocabulary head (its token ids written to
    FILE), else nothing."""
    if args.draft_vocab_from is None:
        return []
    config_file = Path(args.draft_vocab_from) / "config.json"
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(
            f"--draft_vocab_from {args.draft_vocab_from}: no readable config.json ({e})"
        ) from None
    ids = config.get(draft_vocab.CONFIG_KEY)
    if not ids:
        return []
    path = write_output(out_dir / f"{args.label}_draft_vocab.json", json.dumps(ids), "--out_dir", TOOL)
    return ["--osd-draft-vocab", str(path)]


def stream(args: StreamArgs, data: Path, out: Path, template: str) -> None:
    """Serve `data` with the llama.cpp binary; its per-query lines become `out` once it has finished."""
    partial = out.with_name(f".{out.name}.partial")  # the binary's own file, replaced whole into `out`
    try:
        run_binary(args, data, partial, template)
        write_output(out, partial.read_bytes(), "--out_dir", TOOL)
    finally:
        partial.unlink(missing_ok=True)


def run_binary(args: StreamArgs, data: Path, out: Path, template: str) -> None:
    cmd = [
        args.binary, "-m", args.target_gguf, "-md", args.draft_gguf, "-n", str(args.max_new_tokens), "-c", str(args.ctx_size),
        "-t", str(args.threads), "-tb", str(args.threads), "--spec-draft-n-max", str(args.gamma),
        "--osd-data", str(data), "--osd-out", str(out), "--osd-mode", "both",
        "--osd-template", template, "--osd-dump-ids", *draft_vocab_file(args, out.parent),
        *shlex.split(args.extra_args),
    ]  # fmt: skip
    print("+", shlex.join(cmd), flush=True)
    status = subprocess.run(cmd).returncode
    if status != 0:
        raise ValueError(
            f"--binary {args.binary} exited with status {status} serving {data} (its messages are above; "
            "check --target_gguf, --draft_gguf and --extra_args)"
        )


def main(argv: list[str] | None = None) -> None:
    (args,) = HfArgumentParser(StreamArgs).parse_args_into_dataclasses(args=argv)
    out_dir = Path(args.out_dir)
    outputs = {f"--out_dir file {name}": out_dir / name for name in OUTPUTS.format(label=args.label).split()}
    inputs = {f"--data_path {path}": path for path in args.data_path}
    for flag in ("target_gguf", "draft_gguf", "tokenizer_path", "draft_vocab_from", "binary"):
        inputs[f"--{flag}"] = getattr(args, flag)
    refuse_overwrite(outputs, inputs)
    tokenizer = load_pretrained(
        AutoTokenizer, args.tokenizer_path, "give the target's HF folder or hub name as --tokenizer_path"
    )
    check_gguf_vocab(
        tokenizer, args.tokenizer_path, {f"--{f}": getattr(args, f) for f in ("target_gguf", "draft_gguf")}
    )
    template = osd_template(tokenizer)
    records = collect_queries(args.data_path, args.limit)
    if args.prompt_source == "ids":
        records = [{**r, "prompt_ids": encode_prompt(tokenizer, user_query(r))} for r in records]
    elif bad := template_mismatches(tokenizer, template, records):
        raise ValueError(
            f"the chat template of {args.tokenizer_path} renders records {bad[:10]} differently from a plain "
            f"{{query}} slot; use --prompt_source ids"
        )

    if args.ctx_size is None:
        lengths = [len(encode_prompt(tokenizer, user_query(r))) for r in records]
        args.ctx_size = needed_context(lengths, args.max_new_tokens, args.gamma)
    for name in outputs.values():  # before anything is written: refused files stop the run here
        refuse_foreign_file(name, "--out_dir", TOOL)
    data = write_output(
        out_dir / f"{args.label}_queries.json", conversations_text(records), "--out_dir", TOOL
    )
    out = out_dir / f"{args.label}.jsonl"
    stream(args, data, out, template)
    lines = load_lines(out)
    mismatched = check_prompt_ids(lines, records, tokenizer)
    if mismatched:
        print(
            f"WARNING: llama.cpp served {len(set(mismatched))} prompts differently from osd.prompting: {sorted(set(mismatched))[:10]}"
        )
    rows = summarize(lines)
    print(format_table(rows))
    summary = json.dumps([r.__dict__ for r in rows], indent=1) + "\n"
    write_output(out_dir / f"{args.label}_summary.json", summary, "--out_dir", TOOL)


if __name__ == "__main__":
    raise SystemExit(run_main(main, "llamacpp_patches.run"))
