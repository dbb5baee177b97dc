"""Online speculative decoding on the embedded demo pair: the draft learns the stream it serves.

    python -m osd.demo.online_demo                      # about 5 minutes on a 2-core CPU
    python -m osd.demo.online_demo --per_domain 150 --update_interval 8 --output_dir outputs/online_demo_long

A stream of queries from the local workload shifts abruptly from one domain to the next
(--per_domain queries each, in --domains order). Each query is served by speculative decoding
with the demo draft and teacher (gamma = --gamma, greedy); every --update_interval queries the
draft takes one distillation step on the tokens it got wrong (osd.distill.online, the same
trainer as `python -m osd.train --mode online`). A progress bar shows alpha as it rises; at the
end a table compares, per domain and on the same last --tail queries of its segment, Standard
speculative decoding (the untouched draft) with the online draft, and a PNG plots alpha over the
stream. Outputs: {output_dir}/alpha.png, summary.json, metrics.jsonl, the final draft.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import PrinterCallback, TrainerCallback

from osd.conversations import save_conversations
from osd.demo import DOMAINS, DRAFT_PATH, TEACHER_PATH, WORKLOAD_DIR
from osd.distill.config import DistillTrainingArguments
from osd.distill.data import ConversationDataset, DistillCollator
from osd.distill.online import OnlineDistillTrainer
from osd.plots import alpha_series, dataset_bands, plot_alpha
from osd.spec import SpeculativeDecoder
from osd.streams import abrupt_stream
from osd.train import load_model, load_tokenizer


class AlphaProgress(TrainerCallback):
    """A progress bar over the stream whose postfix shows the current domain and the windowed alpha."""

    def __init__(self, stream: list[dict]) -> None:
        self.stream, self.bar = stream, None

    def on_train_begin(self, args, state, control, **kwargs):
        self.bar = tqdm(total=len(self.stream), desc="serving + distilling", unit="query")

    def on_step_end(self, args, state, control, **kwargs):
        self.bar.update(1)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "alpha_window" in logs:
            domain = self.stream[min(state.global_step, len(self.stream)) - 1]["dataset"]
            self.bar.set_postfix(domain=domain, alpha=f"{logs['alpha_window']:.3f}")

    def on_train_end(self, args, state, control, **kwargs):
        self.bar.close()


def standard_alpha(
    draft, teacher, prompts: list[list[int]], gamma: int, max_new_tokens: int, eos: int
) -> float:
    """Token-weighted alpha of `draft` on `prompts` (greedy)."""
    decoder = SpeculativeDecoder(draft, teacher, gamma=gamma)
    outs = [
        decoder.generate(torch.tensor([p]), max_new_tokens=max_new_tokens, eos_token_id=eos) for p in prompts
    ]
    return sum(o.alpha_sum for o in outs) / max(sum(o.num_proposed for o in outs), 1)


def segment_alpha(entries: list[dict], start: int, end: int) -> float:
    """Token-weighted alpha over queries start+1..end from the online log entries."""
    picked = [e for e in entries if start < e["queries"] <= end and e["proposed"]]
    return sum(e["alpha"] * e["proposed"] for e in picked) / max(sum(e["proposed"] for e in picked), 1)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--domains", nargs="+", default=list(DOMAINS), help="stream order of the domains")
    parser.add_argument("--per_domain", type=int, default=80, help="queries per domain segment")
    parser.add_argument(
        "--tail", type=int, default=20, help="queries at the end of each segment compared in the table"
    )
    parser.add_argument("--update_interval", type=int, default=1, help="--online_update_interval")
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--kl_method", default="forward")
    parser.add_argument("--gamma", type=int, default=5)
    parser.add_argument("--max_new_tokens", type=int, default=64)
    parser.add_argument("--output_dir", default="outputs/online_demo")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads (the demo models are too small to gain from more)",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    out = Path(args.output_dir)
    shutil.rmtree(out, ignore_errors=True)  # a fresh run, not a resume of an older one
    out.mkdir(parents=True)

    sources = {d: json.loads((Path(WORKLOAD_DIR) / f"{d}_train.json").read_text()) for d in args.domains}
    stream = abrupt_stream(sources, [args.per_domain] * len(sources))
    save_conversations(stream, out / "stream.json")

    tokenizer = load_tokenizer(str(TEACHER_PATH), None)
    teacher = load_model(str(TEACHER_PATH), "float32", None)
    draft = load_model(str(DRAFT_PATH), "float32", None)
    standard = load_model(str(DRAFT_PATH), "float32", None).eval()  # untouched copy: the Standard baseline
    dataset = ConversationDataset(out / "stream.json", tokenizer, model_max_length=512)
    training_args = DistillTrainingArguments(
        output_dir=str(out), mode="online", per_device_train_batch_size=1, num_train_epochs=1,
        learning_rate=args.learning_rate, lr_scheduler_type="constant", weight_decay=0.0, max_grad_norm=0.0,
        kl_method=args.kl_method, max_propose_num=args.gamma, max_new_tokens=args.max_new_tokens,
        online_update_interval=args.update_interval, online_eval_interval=1, online_alpha_window=args.tail,
        eval_on_start=False, save_strategy="no", logging_steps=10**9, report_to="none", use_cpu=True,
        disable_tqdm=True, seed=0,
    )  # fmt: skip
    trainer = OnlineDistillTrainer(
        model=draft,
        teacher_model=teacher,
        args=training_args,
        train_dataset=dataset,
        data_collator=DistillCollator(tokenizer.pad_token_id),
        processing_class=tokenizer,
        callbacks=[AlphaProgress(stream)],
    )
    trainer.remove_callback(PrinterCallback)  # the progress bar shows alpha; no dict per query
    trainer.train()
    trainer.save_model(str(out / "draft"))

    entries = [
        e for e in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "alpha_window" in e
    ]
    rows, bands = [], dataset_bands([r["dataset"] for r in stream])
    for start, end, domain in tqdm(bands, desc="Standard SD on the same queries"):
        tail_start = max(start, end - args.tail)
        prompts = [dataset[i]["prompt_ids"] for i in range(tail_start, end)]
        rows.append(
            {
                "domain": domain,
                "standard_alpha": standard_alpha(
                    standard, teacher, prompts, args.gamma, args.max_new_tokens, tokenizer.eos_token_id
                ),
                "online_alpha": segment_alpha(entries, tail_start, end),
                "queries": (tail_start, end),
            }
        )
    png = plot_alpha(
        {"online": alpha_series(entries)},
        out / "alpha.png",
        window=args.tail,
        bands=bands,
        segment_references={"Standard (same queries)": [(*r["queries"], r["standard_alpha"]) for r in rows]},
        title=f"Online SD on the demo pair: {args.per_domain} queries per domain, update every {args.update_interval}",
    )
    summary = {"args": vars(args), "domains": rows, "plot": str(png), "updates": trainer.online.updates}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"\nlast {args.tail} queries of each domain segment (greedy, gamma {args.gamma}):")
    print(f"{'domain':<12} {'Standard alpha':>15} {'online alpha':>13}")
    for r in rows:
        print(f"{r['domain']:<12} {r['standard_alpha']:>15.3f} {r['online_alpha']:>13.3f}")
    print(f"plot: {png}")
    return summary


if __name__ == "__main__":
    main()
