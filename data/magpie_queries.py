"""Let a chat model write user queries itself (Magpie, Xu et al. 2024): the prompt is its chat template
up to where a user turn begins, and whatever it samples until the end of that turn is a query.

The queries are general (the model's own idea of what users ask), not a workload's: with the
model's answers (`data/generate_answer.py`) they train a draft that knows how the target talks
without having seen the domains it will serve (the demo draft, `osd/demo/build_draft.py`).

Sampled in batches, each seeded by (--seed, batch index), and appended to `{output stem}.partial.jsonl`
as each batch finishes: a killed run continues where it stopped with the queries the uninterrupted run
would have drawn. Kept: queries that end their turn within --max_new_tokens, at least --min_chars
long, not seen before (exact, whitespace-normalised). Written as a conversation-JSON list with ids
`magpie-{n}` and `dataset` "magpie". A quota the filters do not fill stops after --tries_per_query
x --num_queries samples, with what each filter rejected; a rerun with a lower --min_chars or a higher
--tries_per_query continues from the batches sampled so far.

    python data/magpie_queries.py --model osd/demo/models/target --num_queries 2000 --output data/general/queries.json
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from collector import REPO_ROOT  # noqa: F401  (puts the repository on sys.path)
from tqdm import tqdm
from transformers import AutoModelForCausalLM, AutoTokenizer, HfArgumentParser, PreTrainedTokenizerBase

from osd.conversations import save_conversations
from osd.datafiles import read_text, refuse_overwrite
from osd.model_checks import check_model_path
from osd.models import SERVING_DTYPES
from osd.prompting import prompt_text
from osd.user_errors import run_main

MARK = "\x00QUERY\x00"
# flags that change no sampled batch, left out of a partial file's settings: a rerun may change them
UNSAMPLED = ("output", "num_queries", "num_threads", "tries_per_query", "min_chars")


@dataclass
class MagpieArgs:
    model: str = field(metadata={"help": "Chat model with a chat template (hub name or path)."})
    output: str = field(metadata={"help": "Conversation-JSON file to write (user turns only)."})
    num_queries: int = field(default=1000, metadata={"help": "Queries to keep."})
    batch_size: int = field(default=32, metadata={"help": "Queries sampled per generate call."})
    max_new_tokens: int = field(default=64, metadata={"help": "Longest query; longer ones are dropped."})
    min_chars: int = field(default=12, metadata={"help": "Shortest query kept."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling."})
    seed: int = field(default=0, metadata={"help": "Seed; batch b samples with seed (seed, b)."})
    dtype: str = field(
        default="bfloat16", metadata={"help": "Weights dtype.", "choices": list(SERVING_DTYPES)}
    )
    num_threads: int = field(default=0, metadata={"help": "torch threads (0 = torch's default)."})
    tries_per_query: int = field(
        default=10,
        metadata={
            "help": "Give up, saying what each filter rejected, once this many times --num_queries queries "
            "are sampled and the quota is not filled (filters no sample passes would sample forever)."
        },
    )
    openers: list[str] = field(
        default_factory=list,
        metadata={
            "help": "Generic task openers that start the user turn, e.g. 'Write a SQL query' 'Solve this math "
            "problem:'; batch b uses none when b %% (n + 1) == 0, else opener b %% (n + 1) - 1, and the query is the "
            "opener followed by what the model writes. (A topic system prompt does not steer a small model.)"
        },
    )

    def __post_init__(self) -> None:
        for flag in ("num_queries", "batch_size", "max_new_tokens", "min_chars", "tries_per_query"):
            if getattr(self, flag) < 1:
                raise ValueError(f"--{flag} must be >= 1, got {getattr(self, flag)}")
        if self.temperature <= 0:
            raise ValueError(f"--temperature must be > 0 (queries are sampled), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"--top_p must be in (0, 1], got {self.top_p}")
        if self.num_threads < 0:
            raise ValueError(f"--num_threads must be >= 0 (0 = torch's default), got {self.num_threads}")


def user_prefix(tok: PreTrainedTokenizerBase) -> str:
    """The chat template's text before a user turn's content (system prompt included)."""
    if not getattr(tok, "chat_template", None):
        raise ValueError(f"{tok.name_or_path}: no chat template, so no user prefix to start a query from")
    text = prompt_text(tok, MARK)
    return text[: text.index(MARK)]


def normalise(query: str) -> str:
    return " ".join(query.split()).lower()


@torch.no_grad()
def sample_batch(
    model, tok: PreTrainedTokenizerBase, prefix: str, args: MagpieArgs, batch: int
) -> list[str | None]:
    """One batch of sampled user turns (after the batch's opener, see MagpieArgs.openers); None where the
    turn did not end within max_new_tokens."""
    torch.manual_seed(args.seed * 1_000_003 + batch)
    opener = opener_of(args.openers, batch)
    ids = torch.tensor([tok(prefix + opener, add_special_tokens=False).input_ids] * args.batch_size)  # [B, P]
    end = tok.convert_tokens_to_ids("<|im_end|>") if "<|im_end|>" in tok.get_vocab() else tok.eos_token_id
    out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=args.temperature,
                         top_p=args.top_p, max_new_tokens=args.max_new_tokens, eos_token_id=end,
                         pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else end)  # fmt: skip
    queries: list[str | None] = []
    for row in out[:, ids.shape[1] :].tolist():
        stop = next((i for i, t in enumerate(row) if t == end), None)
        text = None if stop is None else (opener + tok.decode(row[:stop], skip_special_tokens=True)).strip()
        queries.append(text)
    return queries


def opener_of(openers: list[str], batch: int) -> str:
    """The opener of batch `batch`: none for one batch in len(openers) + 1, then each opener in turn."""
    turn = batch % (len(openers) + 1)
    return openers[turn - 1] if turn else ""


def main(argv: list[str] | None = None) -> Path:
    (args,) = HfArgumentParser(MagpieArgs).parse_args_into_dataclasses(argv)
    if args.num_threads:
        torch.set_num_threads(args.num_threads)
    out = Path(args.output)
    partial = out.with_name(out.stem + ".partial.jsonl")
    refuse_overwrite({"--output": out, "its partial file": partial}, {"--model": args.model})
    out.parent.mkdir(parents=True, exist_ok=True)
    check_model_path(args.model)
    settings = {k: v for k, v in asdict(args).items() if k not in UNSAMPLED}
    if not args.openers:
        del settings["openers"]  # partial files written before openers existed continue
    batches: list[list[str | None]] = []
    if partial.exists():
        lines = read_text(partial).splitlines()
        saved = json.loads(lines[0]).get("settings") if lines else None
        # files written before --min_chars was left out of the settings hold it: a rerun may change it
        if not isinstance(saved, dict) or {k: v for k, v in saved.items() if k != "min_chars"} != settings:
            raise ValueError(f"{partial} was written with other settings; rerun with them or delete it")
        for n, line in enumerate(lines[1:], start=2):
            try:
                batches.append(json.loads(line)["queries"])
            except (json.JSONDecodeError, KeyError):
                if n != len(lines):
                    raise ValueError(
                        f"{partial}, line {n}: not a batch of queries; delete the file to start over"
                    ) from None
        partial.write_text("\n".join(lines[: len(batches) + 1]) + "\n", encoding="utf-8")  # drop a torn line
    else:
        partial.write_text(json.dumps({"settings": settings}) + "\n", encoding="utf-8")
    tok = AutoTokenizer.from_pretrained(args.model)
    prefix = user_prefix(tok)
    kept = _keep([q for b in batches for q in b], args.min_chars)
    model = None
    with (
        partial.open("a", encoding="utf-8") as f,
        tqdm(total=args.num_queries, initial=min(len(kept), args.num_queries), unit="query") as bar,
    ):
        while len(kept) < args.num_queries:
            if sum(len(b) for b in batches) >= args.tries_per_query * args.num_queries:
                raise ValueError(rejections(batches, kept, args, partial))
            model = (
                model
                or AutoModelForCausalLM.from_pretrained(args.model, dtype=getattr(torch, args.dtype)).eval()
            )
            queries = sample_batch(model, tok, prefix, args, len(batches))
            batches.append(queries)
            f.write(json.dumps({"batch": len(batches) - 1, "queries": queries}, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
            before = len(kept)
            kept = _keep([q for b in batches for q in b], args.min_chars)
            bar.update(min(len(kept), args.num_queries) - min(before, args.num_queries))
    records = [{"id": f"magpie-{i}", "dataset": "magpie", "conversation": [{"role": "user", "content": q}]}
               for i, q in enumerate(kept[: args.num_queries])]  # fmt: skip
    save_conversations(records, out)
    drawn = sum(len(b) for b in batches)
    print(f"{out}: {len(records)} queries kept of {drawn} sampled ({len(batches)} batches)")
    return out


def rejections(batches: list[list[str | None]], kept: list[str], args: MagpieArgs, partial: Path) -> str:
    """Why the quota is not filled: what each filter rejected of the queries sampled."""
    queries = [q for b in batches for q in b]
    unfinished = sum(q is None for q in queries)
    short = sum(q is not None and len(q) < args.min_chars for q in queries)
    repeated = len(queries) - unfinished - short - len(kept)
    return (
        f"{len(kept)} of --num_queries {args.num_queries} kept after {len(queries)} sampled "
        f"(--tries_per_query {args.tries_per_query}): {unfinished} did not end within --max_new_tokens "
        f"{args.max_new_tokens}, {short} were shorter than --min_chars {args.min_chars}, {repeated} repeated an "
        f"earlier one; loosen the filters or raise --tries_per_query (a rerun continues from {partial})"
    )


def _keep(queries: list[str | None], min_chars: int) -> list[str]:
    """Finished, long enough, first occurrence (normalised) only; in sampling order."""
    seen: set[str] = set()
    kept = []
    for q in queries:
        if q is None or len(q) < min_chars or normalise(q) in seen:
            continue
        seen.add(normalise(q))
        kept.append(q)
    return kept


if __name__ == "__main__":
    raise SystemExit(run_main(main))
