r"""Write the teacher's greedy answer as the assistant turn of every record (offline distillation data).

Prompts use the tokenizer's chat template when it has one, else the Vicuna v1.1 template
(osd/prompting.py); an encoder-decoder teacher (e.g. google/flan-t5-xl) reads the bare query. A
prompt longer than the model's context minus --max_new_tokens keeps its first token and its end
(`osd.distill.data.truncate_prompt`, as in training); the number truncated is printed. Generation
is batched with left padding. Answers are appended to `{output stem}.partial.jsonl` as each batch
finishes, so an interrupted run loses at most the batch in flight; rerunning the same command
skips the records already answered (matched by id and the sha256 of the query, so records without
ids are matched by content; a line that matches no input record is refused: the file was written
from another input). The partial file's first line records the model, prompt template and
generation settings; a rerun with other ones is refused. The final file (default
`{input stem}_with_answer.json` next to the input) replaces any assistant turn the input had, and
the partial file is then removed.

    python data/generate_answer.py                                           # spider_train.json, vicuna-7b-v1.5
    python data/generate_answer.py --filename data/raw_data/gsm8k_train.json --model lmsys/vicuna-7b-v1.3 \
        --batch_size 16 --max_new_tokens 256 --dtype bfloat16
    python data/generate_answer.py --filename data/raw_data/spider_train.json --model meta-llama/Llama-2-70b-chat-hf \
        --device_map auto --dtype bfloat16                                   # a teacher spread over several GPUs
    python data/generate_answer.py --filename data/raw_data/gsm8k_train.json --model google/flan-t5-xl
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch
from collector import RAW_DATA_DIR
from tqdm import tqdm
from transformers import (
    AutoConfig,
    AutoTokenizer,
    GenerationConfig,
    HfArgumentParser,
    PretrainedConfig,
    PreTrainedTokenizerBase,
)

from osd.conversations import read_conversations, save_conversations, user_query
from osd.datafiles import read_text, refuse_overwrite
from osd.distill.data import truncate_prompt
from osd.model_checks import check_model_path, load_pretrained
from osd.models import load_model
from osd.prompting import encode_prompt, prompt_text
from osd.spec.decoder import context_limit
from osd.user_errors import run_main


@dataclass
class GenerateArgs:
    filename: str = field(
        default=str(RAW_DATA_DIR / "spider_train.json"),
        metadata={
            "help": "Conversations to answer: a conversation file, a folder or a hub dataset name (as "
            "osd.train's --data_path; split: --split)."
        },
    )
    split: str = field(default="train", metadata={"help": "Split of a --filename folder or hub dataset."})
    model: str = field(default="lmsys/vicuna-7b-v1.5", metadata={"help": "Teacher model name or path."})
    output: str | None = field(
        default=None, metadata={"help": "Default: {input stem}_with_answer.json next to the input."}
    )
    batch_size: int = field(default=8, metadata={"help": "Prompts per generate call."})
    max_new_tokens: int = field(default=128, metadata={"help": "Longest answer in tokens."})
    device_map: str | None = field(
        default=None, metadata={"help": "e.g. auto, to spread a big teacher over GPUs."}
    )
    dtype: str = field(
        default="auto",
        metadata={"help": "Weights dtype.", "choices": ["auto", "bfloat16", "float16", "float32"]},
    )

    def __post_init__(self):
        if self.batch_size < 1 or self.max_new_tokens < 1:
            raise ValueError(
                f"--batch_size {self.batch_size} / --max_new_tokens {self.max_new_tokens}: expected >= 1"
            )


def output_path(args: GenerateArgs) -> Path:
    src = Path(args.filename)
    if args.output:
        return Path(args.output)
    if not src.is_file():
        raise ValueError(f"--filename {args.filename} is not a file: name the answered file with --output")
    return src.with_name(f"{src.stem}_with_answer.json")


def partial_path(output: Path) -> Path:
    return output.with_name(f"{output.stem}.partial.jsonl")


def run_settings(args: GenerateArgs, tok: PreTrainedTokenizerBase, config: PretrainedConfig) -> dict:
    """What decides the answers: the model, the prompt template, the generation settings."""
    local = Path(args.model)
    return {
        "model": str(local.resolve()) if local.exists() else args.model,
        "template": "{query}" if config.is_encoder_decoder else prompt_text(tok, "{query}"),
        "max_new_tokens": args.max_new_tokens,
        "dtype": args.dtype,
        "max_prompt_tokens": max_prompt_tokens(config, args.max_new_tokens),
    }


def record_key(record: dict) -> dict:
    """What a partial-file line is matched by: the record's id (None without one) and the sha256 of
    its query, so records without ids are matched by content."""
    return {"id": record.get("id"), "query_sha256": hashlib.sha256(user_query(record).encode()).hexdigest()}


def load_done(partial: Path, records: list[dict], settings: dict) -> dict[str, str]:
    """Answers already in the partial file, by record key (`record_key`, as JSON).

    The first line holds the settings the file was written with; other settings are an error. A
    torn last line (the run died mid-write) is cut off the file; any other bad line, or a line
    whose id and query match no input record, is an error: the partial file belongs to another input.
    """
    if not partial.exists():
        return {}
    lines = read_text(partial).splitlines(keepends=True)
    keys = {json.dumps(record_key(r)) for r in records}
    done: dict[str, str] = {}
    for n, line in enumerate(lines, start=1):
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            if n == len(lines):
                partial.write_text("".join(lines[:-1]), encoding="utf-8")
                break
            raise ValueError(f"{partial}, line {n}: not valid JSON; delete the file to start over") from None
        if n == 1:
            check_settings(partial, entry.get("settings") if isinstance(entry, dict) else None, settings)
            continue
        key = json.dumps({"id": entry.get("id"), "query_sha256": entry.get("query_sha256")})
        if key not in keys:
            raise ValueError(
                f"{partial}, line {n}: record {entry.get('id')!r} (query sha256 {entry.get('query_sha256')}) "
                "does not match the input records; was it written for another --filename? Delete it to start over"
            )
        done[key] = entry["answer"]
    return done


def check_settings(partial: Path, recorded: dict | None, settings: dict) -> None:
    """Refuse to continue a partial file written with other settings (or with none recorded)."""
    if recorded is None:
        raise ValueError(
            f"{partial}: its first line records no settings (model, template, generation), so its answers "
            "cannot be trusted to come from this run; delete it to start over"
        )
    diff = [f"{k} {recorded.get(k)!r} (now {v!r})" for k, v in settings.items() if recorded.get(k) != v]
    if diff:
        raise ValueError(
            f"{partial} holds answers written with other settings: {'; '.join(diff)}. Rerun with those "
            "settings to continue it, or delete it (or pick another --output) to start over"
        )


def load_tokenizer(args: GenerateArgs) -> tuple[PreTrainedTokenizerBase, PretrainedConfig]:
    """The teacher's tokenizer (left padding) and config: cheap, read before the weights."""
    check_model_path(args.model)
    return load_pretrained(AutoTokenizer, args.model, padding_side="left"), load_pretrained(
        AutoConfig, args.model
    )


def load_teacher(
    args: GenerateArgs, tok: PreTrainedTokenizerBase, config: PretrainedConfig
) -> torch.nn.Module:
    """The teacher's weights; gives `tok` a pad token when it has none."""
    dtype = None if args.dtype == "auto" else getattr(torch, args.dtype)  # auto: as the folder stores it
    model = load_model(args.model, dtype, device_map=args.device_map)
    if args.device_map is None:
        model.to("cuda" if torch.cuda.is_available() else "cpu")
    if tok.pad_token is None:
        # Padded positions are masked out, so any existing token can serve; add one only when none exists.
        if tok.unk_token is not None or tok.eos_token is not None:
            tok.pad_token = tok.unk_token if tok.unk_token is not None else tok.eos_token
        else:
            tok.add_special_tokens({"pad_token": "<pad>"})
            model.resize_token_embeddings(len(tok))
    return model.eval()


def eos_ids(model: torch.nn.Module, tok: AutoTokenizer) -> set[int]:
    eos = model.generation_config.eos_token_id
    eos = tok.eos_token_id if eos is None else eos
    return set(eos) if isinstance(eos, list) else ({eos} if eos is not None else set())


def max_prompt_tokens(config: PretrainedConfig, max_new_tokens: int) -> int | None:
    """Longest prompt that leaves room for the answer in the model's context (None: no limit, e.g. T5)."""
    context = context_limit(config)
    if context is None:
        return None
    if max_new_tokens >= context - 1:
        raise ValueError(
            f"--max_new_tokens {max_new_tokens} leaves no room for a prompt in the model's context of "
            f"{context} tokens; lower it"
        )
    return context - max_new_tokens


def encode_query(tok: PreTrainedTokenizerBase, config: PretrainedConfig, query: str) -> list[int]:
    """The chat prompt of a decoder-only teacher; an encoder-decoder (T5) reads the bare query."""
    return tok(query).input_ids if config.is_encoder_decoder else encode_prompt(tok, query)


@torch.no_grad()
def generate_batch(
    model: torch.nn.Module, tok: AutoTokenizer, prompts: list[list[int]], max_new_tokens: int
) -> list[str]:
    """Greedy answers for a batch of prompt ids, each cut at its first EOS (kept tokens all decoded)."""
    batch = tok.pad({"input_ids": prompts}, return_tensors="pt").to(model.device)  # left padded, [B, T]
    stop = eos_ids(model, tok)
    config = GenerationConfig(
        max_new_tokens=max_new_tokens,
        do_sample=False,
        pad_token_id=tok.pad_token_id,
        eos_token_id=sorted(stop) or None,
    )
    out = model.generate(
        **batch, generation_config=config
    )  # [B, T + N], or [B, 1 + N] after the decoder start
    start = 1 if model.config.is_encoder_decoder else batch["input_ids"].shape[1]
    answers = []
    for row in out[:, start:].tolist():
        end = next((j for j, t in enumerate(row) if t in stop), len(row))
        answers.append(tok.decode(row[:end], skip_special_tokens=True).strip())
    return answers


def with_answer(record: dict, answer: str) -> dict:
    """The record with its conversation cut after the first user turn, then the teacher's answer."""
    turns = record["conversation"]
    first_user = next(i for i, t in enumerate(turns) if t["role"] == "user")
    return {**record, "conversation": [*turns[: first_user + 1], {"role": "assistant", "content": answer}]}


def main(argv: list[str] | None = None) -> Path:
    (args,) = HfArgumentParser(GenerateArgs).parse_args_into_dataclasses(args=argv)
    out = output_path(args)
    partial = partial_path(out)
    refuse_overwrite(
        {"--output": out, "its partial file": partial}, {"--filename": args.filename, "--model": args.model}
    )
    out.parent.mkdir(parents=True, exist_ok=True)  # before any model loads
    records = read_conversations(args.filename, args.split, "--filename")
    tok, config = load_tokenizer(args)
    settings = run_settings(args, tok, config)
    done = load_done(partial, records, settings)
    keys = [json.dumps(record_key(r)) for r in records]
    pending = [i for i, key in enumerate(keys) if key not in done]
    print(
        f"{args.filename}: {len(records)} records, {len(records) - len(pending)} already answered in {partial}"
    )
    if pending:
        limit = settings["max_prompt_tokens"]
        prompts = {i: encode_query(tok, config, user_query(records[i])) for i in pending}
        long = [i for i in pending if limit is not None and len(prompts[i]) > limit]
        for i in long:
            prompts[i] = truncate_prompt(prompts[i], limit)
        if long:
            print(
                f"{len(long)} of {len(pending)} prompts are longer than {limit} tokens (the context minus "
                f"--max_new_tokens): truncated to their first token and last {limit - 1}"
            )
        pending.sort(key=lambda i: len(prompts[i]))  # similar lengths per batch: less padding
        model = load_teacher(args, tok, config)
        if not partial.exists() or partial.stat().st_size == 0:
            partial.write_text(
                json.dumps({"settings": settings}, ensure_ascii=False) + "\n", encoding="utf-8"
            )
        with (
            partial.open("a", encoding="utf-8") as f,
            tqdm(total=len(records), initial=len(records) - len(pending), unit="rec") as bar,
        ):
            for start in range(0, len(pending), args.batch_size):
                chunk = pending[start : start + args.batch_size]
                answers = generate_batch(model, tok, [prompts[i] for i in chunk], args.max_new_tokens)
                for i, answer in zip(chunk, answers, strict=True):
                    f.write(
                        json.dumps(record_key(records[i]) | {"answer": answer}, ensure_ascii=False) + "\n"
                    )
                    done[keys[i]] = answer
                f.flush()
                os.fsync(f.fileno())
                bar.update(len(chunk))
    save_conversations([with_answer(r, done[key]) for r, key in zip(records, keys, strict=True)], out)
    partial.unlink(missing_ok=True)
    print(f"{out}: {len(records)} records with the teacher's answer ({len(pending)} generated now)")
    return out


if __name__ == "__main__":
    raise SystemExit(run_main(main))
