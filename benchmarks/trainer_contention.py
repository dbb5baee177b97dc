r"""Does a trainer beside the engine slow serving, and through what: the GIL (a thread) or the machine?

    python -m benchmarks.trainer_contention --rounds 4 --trainers thread thread_fused process_fused \
        --out benchmarks/results/trainer_contention/v2
    python -m benchmarks.trainer_contention --rounds 3 --trainers thread_fused process_fused --layout bf16_rows \
        --out outputs/trainer_contention_rows

`osd.spec` serves --queries eval prompts of --domain with the demo pair (greedy, --max_propose_num, bf16, one
torch thread; --layout: the target's and the draft's linears as `osd.spec.serving_choice` lays them out, as
the main job's start-up may choose) alone and beside each of --trainers, --rounds times in turn. A trainer
loops the online update (what --online_background_update runs: the forward KL of one buffered query on every
served token, on the draft's own head, backward, AdamW step, the draft in float32) in a thread or a process,
with torch's AdamW (`adamw_torch`, as Trainer's optim) or its fused kernel (`adamw_torch_fused`). Serving
speed is generated tokens over the engine's own time (SpecOutput.wall_time_s); the trainer's steps taken
meanwhile show it really ran, and their rate what one step costs. Writes {out}/results.json and table.md.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from pathlib import Path

import torch

from osd.conversations import user_query
from osd.distill.losses import get_divergence
from osd.drivers import make_parser, parse
from osd.models import load_model, load_tokenizer
from osd.online.buffer import BufferedQuery, buffer_query, distillation_loss
from osd.paths import DRAFT_PATH, TARGET_PATH
from osd.prompting import encode_prompt
from osd.results import markdown_table, save_results
from osd.spec.decoder import SpeculativeDecoder
from osd.spec.draft_vocab import apply_draft_vocab, draft_vocab_ids, restrict_divergence
from osd.spec.gamma import DEMO, add_gamma_flag
from osd.spec.serving_choice import LAYOUTS, retype_draft, serving_copy
from osd.streams import load_sources
from osd.user_errors import run_main

TRAINERS = {  # name: (a thread or a process, fused AdamW)
    "thread": ("thread", False),
    "process": ("process", False),
    "thread_fused": ("thread", True),
    "process_fused": ("process", True),
}


def train_forever(
    stop, steps, query: BufferedQuery, draft_path: str = str(DRAFT_PATH), fused: bool = False
) -> None:
    """The online update on one buffered query, again and again, until `stop` is set (thread or process);
    `steps` (a shared int) counts the optimizer steps."""
    torch.set_num_threads(1)
    draft = apply_draft_vocab(load_model(draft_path, "float32", None))  # its sub-vocabulary head, as trained
    optimizer = torch.optim.AdamW(draft.parameters(), lr=1e-4, fused=fused)
    divergence = restrict_divergence(get_divergence("forward"), draft_vocab_ids(draft))
    while not stop.is_set():
        distillation_loss(draft, [query], divergence, backward=lambda loss: loss.backward())
        optimizer.step()
        optimizer.zero_grad()
        with steps.get_lock():
            steps.value += 1


def serve(decoder: SpeculativeDecoder, prompts: list[torch.Tensor], max_new_tokens: int, eos: int) -> float:
    """Generated tokens per second of the engine's own time over the prompts ([1, T] each)."""
    outs = [decoder.generate(p, max_new_tokens=max_new_tokens, eos_token_id=eos) for p in prompts]
    return sum(o.generated_ids.shape[1] for o in outs) / sum(o.wall_time_s for o in outs)


def main(argv: list[str] | None = None) -> dict:
    parser = make_parser(__doc__)
    parser.add_argument("--domain", default="code")
    parser.add_argument("--queries", type=int, default=10, help="eval prompts served per measurement")
    parser.add_argument("--max_new_tokens", type=int, default=48)
    add_gamma_flag(parser, DEMO)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--trainers", nargs="+", choices=list(TRAINERS), default=["thread", "thread_fused"],
        help="what runs beside serving, each in turn after serving alone: a thread or a process, with "
        "torch's AdamW or the fused one",
    )  # fmt: skip
    parser.add_argument(
        "--warm_s", type=float, default=8.0, help="seconds the trainer runs before serving starts"
    )
    parser.add_argument("--layout", choices=list(LAYOUTS), default="plain", help="the linears' layout")
    parser.add_argument("--out", default="outputs/trainer_contention")
    args = parse(parser, argv)
    tokenizer = load_tokenizer(str(TARGET_PATH), None)
    records = load_sources([args.domain], "eval")[args.domain][: args.queries]
    prompts = [torch.tensor([encode_prompt(tokenizer, user_query(r))]) for r in records]
    layout = LAYOUTS[args.layout]
    if not layout.available():
        raise ValueError(f"--layout {args.layout} is not available on this machine")
    target = serving_copy(load_model(str(TARGET_PATH), "bfloat16", None).eval(), args.layout)
    # the draft as the main job serves it: a bf16 copy with its sub-vocabulary head, in the layout
    draft = apply_draft_vocab(load_model(str(DRAFT_PATH), "bfloat16", None).eval())
    retype_draft(draft, args.layout)
    decoder = SpeculativeDecoder(draft, target, gamma=args.gamma)
    first = decoder.generate(prompts[0], max_new_tokens=args.max_new_tokens, eos_token_id=tokenizer.eos_token_id,
                             return_target_logits=True)  # fmt: skip
    query = buffer_query(prompts[0], first, "all")
    serve(decoder, prompts, args.max_new_tokens, tokenizer.eos_token_id)  # warm-up
    spawn = mp.get_context("spawn")
    rows = []
    for round_ in range(1, args.rounds + 1):
        for trainer in ["alone", *args.trainers]:
            stop, steps = spawn.Event(), spawn.Value("i", 0)  # both shared by a thread or a process alike
            worker = None
            if trainer != "alone":
                kind, fused = TRAINERS[trainer]
                make = threading.Thread if kind == "thread" else spawn.Process
                worker = make(target=train_forever, args=(stop, steps, query, str(DRAFT_PATH), fused))
                worker.start()
                time.sleep(args.warm_s)  # loaded and looping
            before, start = steps.value, time.perf_counter()
            tokens_per_s = serve(decoder, prompts, args.max_new_tokens, tokenizer.eos_token_id)
            taken = steps.value - before
            rows.append({"round": round_, "trainer": trainer, "tokens_per_s": tokens_per_s,
                         "trainer_steps_meanwhile": taken,
                         "trainer_step_ms": 1e3 * (time.perf_counter() - start) / taken if taken else None})  # fmt: skip
            stop.set()
            if worker is not None:
                worker.join()
    for r in rows:
        alone = next(a for a in rows if a["round"] == r["round"] and a["trainer"] == "alone")
        r["vs_alone"] = r["tokens_per_s"] / alone["tokens_per_s"]
    results = {"args": vars(args), "rows": rows}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    save_results(out, results, markdown_table(rows, list(rows[0])), "benchmarks.trainer_contention", argv)
    return results


if __name__ == "__main__":
    raise SystemExit(run_main(main, "benchmarks.trainer_contention"))
