r"""Record a target's greedy outputs (and optionally its top-k logits) over a conversation file.

    python -m osd.analysis.record --target osd/demo/models/tiny/teacher \
        --conversations data/local/sql_eval.json --limit 8 --max_new_tokens 64 --top_k 20 \
        --output outputs/analysis/tiny_sql

writes `outputs/analysis/tiny_sql.jsonl` (+ `.safetensors` with --top_k or --features); format in
`osd.analysis.recording`. --features also keeps the target's states that an EAGLE-3 head reads (the input states
of `osd.spec.eagle3.eagle3_layers`), so that `simulate` and `online_replay` evaluate heads too: K H values a token
(3 * 576 for the demo target), much more than the tokens. Prompts are the records' first user turns encoded with
`osd.prompting.encode_prompt`; outputs are plain cached greedy decoding
(`osd.spec.evaluate.target_only_greedy`), i.e. what greedy speculative decoding emits.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from osd.analysis.recording import (
    FORMAT,
    PromptRecord,
    Recording,
    paths,
    prompt_id,
    refuse_foreign_output,
    tokenizer_identity,
)
from osd.conversations import load_conversations, user_query
from osd.datafiles import refuse_overwrite
from osd.model_checks import load_pretrained
from osd.models import SERVING_DTYPES
from osd.online.head_loss import target_features
from osd.paths import repo_relative
from osd.prompting import PLAIN_TEMPLATE, encode_prompt
from osd.spec.cached_model import accepts_logits_to_keep
from osd.spec.decoder import context_limit
from osd.spec.eagle3 import eagle3_layers
from osd.spec.evaluate import target_only_greedy
from osd.user_errors import non_negative_int, positive_float, positive_int, run_main


@torch.inference_mode()
def output_topk(
    model: PreTrainedModel, prompt: list[int], output: list[int], k: int, temperature: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Top-k (ids [N, k], raw logits [N, k]) and the softmax log-normaliser at `temperature` [N]
    of the target's distributions at the N output positions, from one forward."""
    n = len(output)
    ids = torch.tensor([prompt + output[:-1]], device=model.device)  # [1, T + N - 1]
    keep = {"logits_to_keep": n} if accepts_logits_to_keep(model) else {}
    logits = model(ids, **keep).logits[0, -n:].float()  # [N, V]
    top = logits.topk(min(k, logits.shape[-1]), dim=-1)
    return top.indices.int().cpu(), top.values.cpu(), torch.logsumexp(logits / temperature, -1).cpu()


def record_prompts(
    target: PreTrainedModel,
    prompts: Sequence[tuple[str, list[int]]],
    header: dict,
    max_new_tokens: int,
    eos_token_id: int | None,
    top_k: int = 0,
    temperature: float = 1.0,
    feature_layers: Sequence[int] = (),
) -> Recording:
    """Record the target on (id, prompt ids) pairs; `header` names the model, tokenizer and template.
    feature_layers: also keep the target's input states at these decoder layers (a head's, `osd.spec.eagle3`)."""
    if target.config.is_encoder_decoder:
        raise ValueError("osd.analysis.record records decoder-only targets")
    if top_k < 0 or temperature <= 0:
        raise ValueError(f"need --top_k >= 0 and --temperature > 0, got {top_k}, {temperature}")
    limit = context_limit(target.config)
    records = []
    for pid, prompt in tqdm(prompts, desc="recording the target", unit="prompt"):
        budget = max_new_tokens if limit is None else min(max_new_tokens, limit - len(prompt))
        if budget < 1:
            raise ValueError(
                f"prompt {pid} of {len(prompt)} tokens leaves no room in the target's context of {limit}"
            )
        output = target_only_greedy(target, torch.tensor([prompt]), budget, eos_token_id)
        rec = PromptRecord(pid, prompt, output, "eos" if output[-1] == eos_token_id else "budget")
        if top_k:
            rec.topk_ids, rec.topk_logits, rec.logsumexp = output_topk(
                target, prompt, output, top_k, temperature
            )
        if feature_layers:
            rec.features = target_features(target, feature_layers, torch.tensor(prompt + output)).cpu()
        records.append(rec)
    return Recording(
        {
            "format": FORMAT,
            **header,
            "vocab_rows": target.get_output_embeddings().weight.shape[0],
            "context_limit": limit,
            "dtype": str(target.dtype).removeprefix("torch."),
            "max_new_tokens": max_new_tokens,
            "eos_token_id": eos_token_id,
            "top_k": top_k,
            "temperature": temperature,
            "feature_layers": list(feature_layers) or None,
        },
        records,
    )


def record_conversations(
    target_path: str | Path,
    conversations: str | Path,
    limit: int | None = None,
    dtype: str = "auto",
    features: bool = False,
    **kwargs,
) -> Recording:
    """Load the target and its tokenizer and record the first `limit` records of a conversation file; with
    `features`, the states an EAGLE-3 head built for the target reads (`eagle3_layers`)."""
    tokenizer: PreTrainedTokenizerBase = load_pretrained(AutoTokenizer, target_path)
    target = load_pretrained(AutoModelForCausalLM, target_path, dtype=dtype).eval()
    records = load_conversations(conversations)[:limit]
    prompts = [(prompt_id(r, i), encode_prompt(tokenizer, user_query(r))) for i, r in enumerate(records)]
    header = recording_header(target_path, tokenizer, os.path.abspath(conversations))
    layers = eagle3_layers(target.config.num_hidden_layers) if features else ()
    return record_prompts(
        target, prompts, header, eos_token_id=tokenizer.eos_token_id, feature_layers=layers, **kwargs
    )


def recording_header(target_path: str | Path, tokenizer: PreTrainedTokenizerBase, source: str | list) -> dict:
    """The header fields naming the target, its tokenizer, the prompt template and the prompts' source."""
    header = repo_relative(
        {
            "model": os.path.abspath(target_path) if Path(target_path).exists() else str(target_path),
            "tokenizer": tokenizer_identity(tokenizer),
            "prompt_template": getattr(tokenizer, "chat_template", None) or PLAIN_TEMPLATE,
            "conversations": source,
        }
    )
    header["tokenizer"]["name"] = header["model"]
    return header


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--target", required=True, help="target model folder or hub id (its tokenizer too)")
    parser.add_argument(
        "--conversations", required=True, help="conversation-JSON file (osd/conversations.py)"
    )
    parser.add_argument("--output", required=True, help="output stem: writes STEM.jsonl (+ STEM.safetensors)")
    parser.add_argument("--limit", type=positive_int, default=None, help="record the first N records only")
    parser.add_argument("--max_new_tokens", type=positive_int, default=128)
    parser.add_argument(
        "--top_k", type=int, default=0, help="also record the top-k logits per position (0: no)"
    )
    parser.add_argument(
        "--temperature", type=positive_float, default=1.0, help="softmax temperature of the top-k alpha"
    )
    parser.add_argument(
        "--features", action="store_true",
        help="also keep the target's states an EAGLE-3 head reads, to simulate heads (large: see above)",
    )  # fmt: skip
    parser.add_argument(
        "--dtype",
        default="auto",
        choices=("auto", *SERVING_DTYPES),
        help="the target's weights (auto: the folder's)",
    )
    parser.add_argument(
        "--threads", type=non_negative_int, default=0, help="torch CPU threads (0: torch's default)"
    )
    args = parser.parse_args(argv)
    refuse_overwrite(
        dict(zip(("--output", "--output (tensors)"), paths(args.output), strict=True)),
        {"--conversations": args.conversations, "--target": args.target},
    )
    refuse_foreign_output(args.output, "--output")
    if args.threads:
        torch.set_num_threads(args.threads)
    recording = record_conversations(
        args.target, args.conversations, args.limit, args.dtype,
        features=args.features, max_new_tokens=args.max_new_tokens, top_k=args.top_k, temperature=args.temperature,
    )  # fmt: skip
    written = recording.save(args.output)
    tokens = sum(len(p.output_ids) for p in recording.prompts)
    print(
        f"recorded {len(recording.prompts)} prompts, {tokens} target tokens -> {', '.join(map(str, written))}"
    )


if __name__ == "__main__":
    raise SystemExit(run_main(main, "osd.analysis.record"))
