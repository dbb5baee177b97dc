"""Online distillation: buffer contents, logits reuse, update cadence, per-group alpha, resume.

Tiny random Llama pair (the draft is the target plus noise, so it is wrong sometimes) and a
word-level tokenizer from online_fixtures.py; every stream has a handful of queries.
"""

from __future__ import annotations

import copy
import json
import os
import threading

import pytest
import torch
from online_fixtures import VOCAB, make_pair, make_tokenizer, make_trainer, tied_subvocab_pair, write_stream
from transformers import LlamaForCausalLM, T5ForConditionalGeneration, TrainerCallback

from osd.distill.losses import forward_kl
from osd.online.buffer import buffer_query, distillation_loss, logits_at
from osd.online.engine_server import EngineServer
from osd.spec import SpeculativeDecoder
from tests.devices import DEVICES
from tests.tiny_models import tiny_t5_config

pytestmark = pytest.mark.usefixtures("one_thread")


def online_entries(output_dir) -> list[dict]:
    lines = (output_dir / "metrics.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if "alpha_window" in e]


def serve(draft, target, prompt: list[int]):
    return SpeculativeDecoder(draft, target, gamma=3).generate(
        torch.tensor([prompt]), max_new_tokens=16, return_target_logits=True
    )


# ---- buffer contents and logits reuse ---------------------------------------------------------


def test_buffer_keeps_engine_wrong_positions_and_target_logits_of_shifted_positions():
    draft, target = make_pair()
    prompt = [1, 5, 9, 13, 17, 21]
    out = serve(draft, target, prompt)
    q = buffer_query(torch.tensor([prompt]), out, "wrong", dtype=torch.float32)
    assert q.positions.tolist() == out.wrong_positions
    assert len(q.positions) > 0, "the noisy draft must be wrong somewhere, or this test checks nothing"
    # independent reference: one fresh teacher forward over prompt + generated; the logits that
    # produced generated token i sit at position T + i - 1
    seq = torch.tensor([prompt + out.generated_ids[0].tolist()])
    with torch.no_grad():
        fresh = target(seq).logits[0]
    torch.testing.assert_close(q.target_logits, fresh[len(prompt) - 1 + q.positions], atol=1e-4, rtol=1e-4)
    # at each wrong position the draft's greedy choice was not the committed (target's) token
    with torch.no_grad():
        draft_choice = draft(seq).logits[0].argmax(-1)[len(prompt) - 1 + q.positions]
    assert (draft_choice != out.generated_ids[0, q.positions]).all()


def test_student_rows_are_the_shifted_positions():
    """With the target itself as the student, its rows equal the buffered target rows exactly;
    reading position T + i instead of T + i - 1 (the reference's off-by-one) would not."""
    draft, target = make_pair()
    prompt = [1, 4, 8, 15, 16, 23, 42]
    out = serve(draft, target, prompt)
    q = buffer_query(torch.tensor([prompt]), out, "all", dtype=torch.float32)
    assert q.positions.tolist() == list(range(out.generated_ids.shape[1]))
    with torch.no_grad():
        rows = logits_at(target, q)
    torch.testing.assert_close(rows, q.target_logits, atol=1e-4, rtol=1e-4)
    with torch.no_grad():
        loss = distillation_loss(target, [q], forward_kl)
    assert loss.item() == pytest.approx(0.0, abs=1e-5)


def test_encoder_decoder_rows_follow_the_decoder_input():
    torch.manual_seed(0)
    target = T5ForConditionalGeneration(tiny_t5_config(len(VOCAB))).eval()
    draft = copy.deepcopy(target)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(0.5 * p.std().nan_to_num(0.0) * torch.randn(p.shape))
    encoder_in = [7, 8, 9, 10, 2]
    out = serve(draft, target, encoder_in)
    q = buffer_query(torch.tensor([encoder_in]), out, "all", dtype=torch.float32)
    with torch.no_grad():
        rows = logits_at(target, q)
    torch.testing.assert_close(rows, q.target_logits, atol=1e-4, rtol=1e-4)


def test_float16_buffer_is_close_and_bounded():
    draft, target = make_pair()
    prompt = [1, 5, 9, 13]
    out = serve(draft, target, prompt)
    q32 = buffer_query(torch.tensor([prompt]), out, "wrong", dtype=torch.float32)
    q16 = buffer_query(torch.tensor([prompt]), out, "wrong")
    assert q16.target_logits.dtype == torch.float16
    torch.testing.assert_close(q16.target_logits.float(), q32.target_logits, atol=0.05, rtol=1e-3)
    assert q16.nbytes < q32.nbytes


# ---- the loop in the Trainer --------------------------------------------------------------------


class ParamsPerStep(TrainerCallback):
    def __init__(self, model):
        self.model, self.snapshots = model, [copy.deepcopy(model.state_dict())]

    def on_step_end(self, args, state, control, **kwargs):
        self.snapshots.append(copy.deepcopy(self.model.state_dict()))


def test_student_changes_only_at_update_steps(tmp_path):
    draft, target = make_pair()
    stream = write_stream(tmp_path / "stream.json", 6)
    # weight decay > 0: a non-update optimizer step would still shrink the weights if it ran
    trainer = make_trainer(
        tmp_path, stream, draft, target, online_update_interval=3, weight_decay=0.1, logging_steps=2
    )
    spy = ParamsPerStep(draft)
    trainer.add_callback(spy)
    trainer.train()
    changed = [
        any(not torch.equal(before[k], after[k]) for k in before)
        for before, after in zip(spy.snapshots, spy.snapshots[1:], strict=False)
    ]
    assert changed == [False, False, True, False, False, True]
    assert trainer.loop.state.updates == 2 and not any(trainer.loop.updater.buffers.queries.values())
    # Trainer's own loss entries (logging_steps) survive the online entries logged at the same steps
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [e["step"] for e in lines if "learning_rate" in e] == [2, 4, 6]


@pytest.mark.parametrize("background", [False, True])
def test_replay_keeps_the_last_queries_for_the_next_update(tmp_path, background):
    """--online_replay_queries 1, an update every 2 queries: updates train on q0 q1, then q1 q2 q3, then
    q3 q4 q5 (the kept query does not count towards the interval), and the buffer ends holding q5."""
    draft, target = make_pair()
    stream = write_stream(tmp_path / "stream.json", 6)
    trainer = make_trainer(tmp_path, stream, draft, target, online_update_interval=2, online_replay_queries=1,
                           online_background_update=background)  # fmt: skip
    trained, loss = [], trainer._loss
    trainer._loss = lambda d, buffer, bw: (
        trained.append([q.input_ids.tolist() for q in buffer]) or loss(d, buffer, bw)
    )
    trainer.train()
    prompts = [list(trainer.train_dataset[i]["prompt_ids"]) for i in range(6)]
    assert len({tuple(p) for p in prompts}) == 6
    assert trained == [prompts[0:2], prompts[1:4], prompts[3:6]]
    assert trainer.loop.state.updates == 3
    assert [q.replayed for q in trainer.loop.updater.buffers.queries["shared"]] == [True]


def test_logs_alpha_per_group_as_the_engine_measures_it(tmp_path):
    draft, target = make_pair()
    stream = write_stream(tmp_path / "stream.json", 6, datasets=("a", "a", "b"))
    # lr 0: the draft never changes, so an independent engine run gives each query's alpha
    trainer = make_trainer(
        tmp_path, stream, copy.deepcopy(draft), target, learning_rate=0.0, online_eval_interval=3
    )
    trainer.train()
    dataset = trainer.train_dataset
    outs = [
        SpeculativeDecoder(draft, target, gamma=3).generate(
            torch.tensor([dataset[i]["prompt_ids"]]), max_new_tokens=12
        )
        for i in range(6)
    ]
    entries = online_entries(tmp_path / "run")
    assert [e["queries_served"] for e in entries] == [3, 6]

    def alpha(idx):
        return sum(outs[i].alpha_sum for i in idx) / sum(outs[i].num_proposed for i in idx)

    for entry, first in zip(entries, (0, 3), strict=True):
        assert entry["alpha"] == pytest.approx(alpha(range(first, first + 3)))
        assert entry["alpha/dataset/a"] == pytest.approx(alpha([first, first + 1]))
        assert entry["alpha/dataset/b"] == pytest.approx(alpha([first + 2]))
    assert entries[-1]["alpha_cumulative"] == pytest.approx(alpha(range(6)))


class StopAt(TrainerCallback):
    """Interrupts training after `step` (like Ctrl-C): nothing past it is saved."""

    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise KeyboardInterrupt


@pytest.mark.slow
@pytest.mark.parametrize(
    "background, save_steps, stop, replay, rows_only",
    # checkpoint-3: one buffered query (with replay: a kept one and a new one); checkpoint-2: a background update due;
    # rows_only: --draft_vocab_rows_only, whose trained rows a checkpoint rebuilds from the shared weight
    [(False, 3, 5, 0, False), (True, 2, 3, 0, False), (False, 3, 5, 1, False), (True, 2, 3, 0, True)],
)
def test_resume_continues_exactly_without_lost_or_duplicated_metrics(
    tmp_path, background, save_steps, stop, replay, rows_only
):
    draft, target = tied_subvocab_pair(range(0, len(VOCAB), 2)) if rows_only else make_pair()
    stream = write_stream(tmp_path / "stream.json", 8)
    save = dict(save_strategy="steps", save_steps=save_steps, online_update_interval=2,
                online_background_update=background, online_replay_queries=replay,
                draft_vocab_rows_only=rows_only)  # fmt: skip

    reference = make_trainer(tmp_path / "uninterrupted", stream, copy.deepcopy(draft), target, **save)
    reference.train()
    expected = online_entries(tmp_path / "uninterrupted" / "run")

    interrupted = make_trainer(tmp_path, stream, copy.deepcopy(draft), target, **save)
    interrupted.add_callback(StopAt(stop))
    with pytest.raises(KeyboardInterrupt):
        interrupted.train()
    # steps after the checkpoint were logged (the stopped one too: its entry is made at the step's end, before
    # this callback interrupts it): lost with the run
    assert [e["step"] for e in online_entries(tmp_path / "run")] == list(range(1, stop + 1))

    resumed = make_trainer(tmp_path, stream, copy.deepcopy(draft), target, **save)
    resumed.train(resume_from_checkpoint=True)
    got = online_entries(tmp_path / "run")
    assert [e["step"] for e in got] == list(range(1, 9))
    for e, x in zip(got, expected, strict=True):
        for key in ("alpha", "alpha_window", "alpha_cumulative", "queries_served", "online_updates"):
            assert e[key] == pytest.approx(x[key], rel=1e-6), (e["step"], key)
    for k, v in reference.model.state_dict().items():
        torch.testing.assert_close(resumed.model.state_dict()[k], v, atol=1e-6, rtol=1e-5)


# ---- routed drafts ------------------------------------------------------------------------------


def make_routed_trainer(tmp_path, stream: str, draft, target, **overrides):
    from osd.distill.routing import RoutedDrafts, RoutedOnlineDistillTrainer, field_router

    trainer = make_trainer(
        tmp_path, stream, draft, target, **overrides
    )  # the arguments, dataset and collator
    return RoutedOnlineDistillTrainer(
        model=RoutedDrafts.copies(draft, ["a", "b"]),
        router=field_router("dataset"),
        teacher_model=target,
        args=trainer.args,
        train_dataset=trainer.train_dataset,
        data_collator=trainer.data_collator,
        processing_class=trainer.processing_class,
    )


def test_routed_drafts_update_only_on_their_own_queries_and_resume(tmp_path):
    draft, target = make_pair()
    stream = write_stream(tmp_path / "stream.json", 6, datasets=("a", "a", "b"))
    save = dict(online_update_interval=1, save_strategy="steps", save_steps=3, weight_decay=0.1)
    trainer = make_routed_trainer(tmp_path, stream, draft, target, **save)
    spies = {route: ParamsPerStep(d) for route, d in trainer.model.drafts.items()}
    for spy in spies.values():
        trainer.add_callback(spy)
    trainer.train()
    for route, spy in spies.items():
        changed = [
            any(not torch.equal(b[k], a[k]) for k in b)
            for b, a in zip(spy.snapshots, spy.snapshots[1:], strict=False)
        ]
        assert changed == [q == route for q in ("a", "a", "b") * 2], route

    # checkpoint-3 holds one loadable model folder per draft; resuming from it ends where the run ended
    resumed = make_routed_trainer(tmp_path / "again", stream, draft, target, **save)
    resumed.train(resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-3"))
    for route, d in trainer.model.drafts.items():
        for k, v in d.state_dict().items():
            torch.testing.assert_close(resumed.model.drafts[route].state_dict()[k], v, atol=1e-6, rtol=1e-5)
    assert LlamaForCausalLM.from_pretrained(tmp_path / "run" / "checkpoint-3" / "b").config.vocab_size == len(
        VOCAB
    )


@pytest.mark.parametrize("interval", [0, 10**5])
def test_static_run_serves_without_buffering(tmp_path, interval):
    """--online_update_interval 0 (static: the Standard baseline), or one beyond the stream as the
    reference's baselines give, keeps no buffer and never updates."""
    draft, target = make_pair()
    stream = write_stream(tmp_path / "stream.json", 3)
    before = copy.deepcopy(draft.state_dict())
    trainer = make_trainer(tmp_path, stream, draft, target, online_update_interval=interval)
    trainer.train()
    assert trainer.loop.state.max_buffer_bytes == 0 and not any(trainer.loop.updater.buffers.queries.values())
    assert [e["queries_served"] for e in online_entries(tmp_path / "run")] == [1, 2, 3]
    assert all(torch.equal(v, draft.state_dict()[k]) for k, v in before.items())


def test_routing_cli_runs_one_draft_per_field_value(tmp_path):
    from osd.distill.routing import main

    draft, target = make_pair()
    tokenizer = make_tokenizer()
    for name, model in (("draft", draft), ("teacher", target)):
        model.save_pretrained(tmp_path / name)
        tokenizer.save_pretrained(tmp_path / name)
    stream = write_stream(tmp_path / "stream.json", 4, datasets=("a", "b"))
    argv = ["--student_model_path", str(tmp_path / "draft"), "--teacher_model_path", str(tmp_path / "teacher"),
            "--data_path", stream, "--output_dir", str(tmp_path / "run"), "--route_by", "dataset",
            "--per_device_train_batch_size", "1", "--num_train_epochs", "1", "--max_new_tokens", "8", "--max_propose_num", "3",
            "--online_eval_interval", "1", "--report_to", "none", "--use_cpu", "True", "--save_strategy", "no"]  # fmt: skip
    main(argv)
    assert {p.name for p in (tmp_path / "run").iterdir() if (p / "config.json").exists()} == {"a", "b"}
    assert [e["queries_served"] for e in online_entries(tmp_path / "run")] == [1, 2, 3, 4]
    # the same --output_dir policy as osd.train: refused as it is, a no-op once finished
    metrics = (tmp_path / "run" / "metrics.jsonl").read_bytes()
    with pytest.raises(ValueError, match="already holds a run"):
        main(argv)
    main([*argv, "--resume_from_checkpoint", "last"])
    assert (tmp_path / "run" / "metrics.jsonl").read_bytes() == metrics


def test_bf16_serving_copy_follows_the_float32_student(tmp_path, monkeypatch):
    """--draft_serving_dtype: the engine serves a bf16 copy that equals the fp32 student after each update."""
    draft, target = make_pair()
    stream = write_stream(tmp_path / "stream.json", 4)
    trainer = make_trainer(tmp_path, stream, draft, target, draft_serving_dtype="bfloat16")
    served = []
    original = EngineServer._generate
    monkeypatch.setattr(EngineServer, "_generate", lambda server, model, prompts, first: (
        served.append({k: v.clone() for k, v in model.state_dict().items()} | {"dtype": model.dtype})
        or original(server, model, prompts, first)
    ))  # fmt: skip
    trainer.train()
    assert draft.dtype == torch.float32 and trainer.loop.state.updates == 2
    assert all(s["dtype"] == torch.bfloat16 for s in served)
    # queries 1-2 see the initial weights; query 3 is served after the first update's optimizer step
    name = "model.layers.0.mlp.up_proj.weight"
    assert torch.equal(served[0][name], served[1][name])
    assert not torch.equal(served[1][name], served[2][name])
    assert torch.equal(served[3][name], served[2][name])
    final = trainer.loop.updater.serving("shared").state_dict()[name]
    torch.testing.assert_close(final, draft.state_dict()[name].to(torch.bfloat16), rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_steps_per_update_takes_that_many_adamw_steps_on_the_buffer(tmp_path, device):
    """--online_steps_per_update 3: each update is three AdamW steps on its buffer's loss (the last one
    Trainer's), at the lr the step starts with; replayed here with a plain torch AdamW."""
    draft, target = make_pair()
    reference = copy.deepcopy(draft).to(device)
    stream = write_stream(tmp_path / "stream.json", 4)
    trainer = make_trainer(tmp_path, stream, draft, target, online_steps_per_update=3, max_grad_norm=0.0,
                           use_cpu=device == "cpu")  # fmt: skip
    buffers, loss = [], trainer._loss
    trainer._loss = lambda d, buffer, bw: buffers.append(buffer) or loss(d, buffer, bw)
    trainer.train()
    assert draft.device.type == device and trainer.teacher_model.device.type == device
    assert trainer.loop.state.updates == 2 and len(buffers) == 6
    assert buffers[0] is buffers[2] and buffers[3] is buffers[5] and buffers[2] is not buffers[3]
    opt = torch.optim.AdamW(reference.parameters(), lr=1e-2, weight_decay=0.0)
    for buffer in buffers:
        distillation_loss(reference, buffer, forward_kl, backward=torch.Tensor.backward)
        opt.step()
        opt.zero_grad()
    torch.testing.assert_close(draft.state_dict(), reference.state_dict())


@pytest.mark.parametrize("background", [False, True])
@pytest.mark.parametrize("device", DEVICES)
def test_freeze_embeddings_trains_every_weight_but_the_input_embedding(tmp_path, background, device):
    """--freeze_embeddings: AdamW steps every other weight as it would without the flag (replayed with a plain
    torch AdamW over them); the input embedding stays as it was and the optimizer holds nothing of it."""
    draft, target = make_pair()  # untied: the head learns
    reference = copy.deepcopy(draft).to(device)
    embedding, head = draft.get_input_embeddings().weight, draft.get_output_embeddings().weight
    embedding_before, head_before = embedding.detach().clone(), head.detach().clone()
    stream = write_stream(tmp_path / "stream.json", 4)
    trainer = make_trainer(tmp_path, stream, draft, target, freeze_embeddings=True, online_loss_positions="all",
                           online_background_update=background, use_cpu=device == "cpu")  # fmt: skip
    buffers, loss = [], trainer._loss
    trainer._loss = lambda d, buffer, bw: buffers.append(buffer) or loss(d, buffer, bw)
    trainer.train()
    assert trainer.loop.state.updates == 2 and len(buffers) == 2 and embedding.device.type == device
    assert torch.equal(embedding.cpu(), embedding_before) and not embedding.requires_grad
    assert not torch.equal(head.cpu(), head_before)
    assert all(p is not embedding for group in trainer.optimizer.param_groups for p in group["params"])
    reference.get_input_embeddings().requires_grad_(False)
    opt = torch.optim.AdamW([p for p in reference.parameters() if p.requires_grad], lr=1e-2, weight_decay=0.0)
    for buffer in buffers:
        distillation_loss(reference, buffer, forward_kl, backward=torch.Tensor.backward)
        opt.step()
        opt.zero_grad()
    torch.testing.assert_close(draft.state_dict(), reference.state_dict())


@pytest.mark.parametrize("steps", [1, 3])
@pytest.mark.parametrize("device", DEVICES)
def test_background_update_takes_the_same_steps_one_query_later(tmp_path, monkeypatch, steps, device):
    """--online_background_update: each update computes the grads it would without the flag (same weights, same
    buffer) in a worker thread, and the updated draft serves one query later. With the loss on every generated
    token and greedy serving, the buffers do not depend on the draft, so the final weights must agree; with
    --online_steps_per_update 3 the worker takes the update's three optimizer steps."""
    stream = write_stream(tmp_path / "stream.json", 8)
    runs = {}
    for background in (False, True):
        draft, target = make_pair()
        trainer = make_trainer(tmp_path / f"background_{background}", stream, draft, target, online_loss_positions="all",
                               online_background_update=background, online_steps_per_update=steps,
                               use_cpu=device == "cpu")  # fmt: skip
        served, threads = [], set()
        serve_, loss_ = EngineServer._generate, trainer._loss
        monkeypatch.setattr(EngineServer, "_generate", lambda server, model, prompts, first, served=served, serve_=serve_: (
            served.append({k: v.clone() for k, v in model.state_dict().items()}) or serve_(server, model, prompts, first)
        ))  # fmt: skip
        trainer._loss = lambda *a, threads=threads, loss_=loss_: (
            threads.add(threading.get_ident()) or loss_(*a)
        )
        trainer.train()
        assert trainer.loop.state.updates == 4
        runs[background] = draft, trainer, served, threads
    (draft_sync, _, served_sync, _), (draft_bg, trainer_bg, served_bg, threads_bg) = runs[False], runs[True]
    name = "model.layers.0.mlp.up_proj.weight"
    assert not torch.allclose(served_sync[0][name], draft_sync.state_dict()[name], atol=1e-3)  # it did learn
    # The target's logits at a position round a little differently with the number of tokens verified with it
    # (1e-6 of GEMM noise), and the two runs'
    # drafts propose differently, so AdamW can step a near-zero gradient apart: up to 2.4e-4 seen, where an
    # update moves a weight by 0.01 (lr). 1e-3 still tells a draft from the one an update before or after it.
    same = {"rtol": 0.0, "atol": 1e-3}
    for i in range(1, 8):  # query i is served by the draft that served query i - 1 without the flag
        torch.testing.assert_close(served_bg[i][name], served_sync[i - 1][name], **same)
    torch.testing.assert_close(draft_bg.state_dict(), draft_sync.state_dict(), **same)
    assert threading.get_ident() in threads_bg and len(threads_bg) == 2  # 3 in the worker, the last one here
    assert (
        trainer_bg.loop.updater.serving("shared") is not draft_bg
    )  # the worker trains the student, a copy serves
    assert trainer_bg.loop.state.background_update_time_s > 0


@pytest.mark.parametrize("background", [False, True])
def test_batched_serving_matches_one_query_per_step(tmp_path, background):
    """--per_device_train_batch_size 2 with an update every 2 queries: each query is served by the same
    draft as in a batch-1 run (updates land at the same queries), so per-query alpha and the final
    weights agree; the batch-1 run is the reference."""
    stream = write_stream(tmp_path / "stream.json", 8)
    runs = {}
    for batch in (1, 2):
        draft, target = make_pair()
        trainer = make_trainer(tmp_path / f"batch{batch}", stream, draft, target, per_device_train_batch_size=batch,
                               online_update_interval=2, online_background_update=background and batch == 2)  # fmt: skip
        trainer.train()
        runs[batch] = draft, trainer
    (draft_1, t1), (draft_2, t2) = runs[1], runs[2]
    assert len(t2.loop.state.queries) == 8 and t2.state.global_step == 4
    if background:  # the update due after a step lands one step later: queries 3-4 see the older draft
        assert t2.loop.state.updates == t1.loop.state.updates
        return
    for q1, q2 in zip(t1.loop.state.queries, t2.loop.state.queries, strict=True):
        assert q2.groups == q1.groups
        assert q2.alpha_sum == pytest.approx(q1.alpha_sum, abs=1e-5) and q2.num_proposed == q1.num_proposed
    torch.testing.assert_close(draft_2.state_dict(), draft_1.state_dict())
    assert t2.loop.state.updates == 4


def test_update_process_takes_the_steps_the_worker_thread_takes(tmp_path):
    """--online_update_process: the update's steps run in a forked process on the same buffers from the same
    weights and optimizer state, so the drafts served and the final weights equal those of the worker thread's
    run; the steps ran in another process, and the parent's draft holds their result."""
    stream = write_stream(tmp_path / "stream.json", 8)
    runs = {}
    for process in (False, True):
        draft, target = make_pair()
        start = {k: v.clone() for k, v in draft.state_dict().items()}
        trainer = make_trainer(tmp_path / f"process_{process}", stream, draft, target, online_loss_positions="all",
                               online_background_update=True, online_update_process=process,
                               online_steps_per_update=2)  # fmt: skip
        pids = []
        loss_ = trainer._loss
        trainer._loss = lambda *a, pids=pids, loss_=loss_: pids.append(os.getpid()) or loss_(*a)
        trainer.train()
        assert trainer.loop.state.updates == 4 and trainer.loop.updater._process is None  # closed at the end
        runs[process] = draft, start, trainer, pids
    draft_thread, _, trainer_thread, pids_thread = runs[False]
    draft_process, start, trainer_process, pids_process = runs[True]
    assert not pids_process and set(pids_thread) == {os.getpid()}  # the process's pid is not recorded here
    name = "model.layers.0.mlp.up_proj.weight"
    assert not torch.allclose(start[name], draft_process.state_dict()[name], atol=1e-3)  # it did learn, here
    torch.testing.assert_close(draft_process.state_dict(), draft_thread.state_dict(), rtol=0.0, atol=1e-6)
    assert trainer_process.loop.state.losses == pytest.approx(trainer_thread.loop.state.losses, abs=1e-6)
    served = [q.alpha_sum for q in trainer_process.loop.state.queries]
    assert served == pytest.approx([q.alpha_sum for q in trainer_thread.loop.state.queries], abs=1e-6)


def test_update_process_runs_after_the_parent_used_more_threads(tmp_path):
    """A process forked from one whose OpenMP pool ran with two threads hangs in its first parallel region unless it
    keeps to one thread: the run must finish and learn."""
    stream = write_stream(tmp_path / "stream.json", 4)
    draft, target = make_pair()
    start = draft.model.layers[0].mlp.up_proj.weight.detach().clone()
    torch.set_num_threads(2)  # the fixture `one_thread` restores the count
    a = torch.randn(256, 256)
    assert torch.isfinite(a @ a).all()  # the parent's pool in use
    trainer = make_trainer(tmp_path, stream, draft, target, online_background_update=True,
                           online_update_process=True, online_update_interval=1)  # fmt: skip
    trainer.train()
    assert trainer.loop.state.updates == 4
    assert not torch.allclose(start, draft.model.layers[0].mlp.up_proj.weight, atol=1e-3)


def test_update_process_reports_its_error_here(tmp_path):
    """An update that fails in the process fails the run here, with the process's traceback."""
    stream = write_stream(tmp_path / "stream.json", 4)
    draft, target = make_pair()
    trainer = make_trainer(tmp_path, stream, draft, target, online_background_update=True,
                           online_update_process=True)  # fmt: skip

    def broken(*args):
        raise ArithmeticError("a loss that cannot be computed")

    trainer._loss = broken
    with pytest.raises(RuntimeError, match="(?s)failed in its process.*ArithmeticError: a loss that cannot"):
        trainer.train()
