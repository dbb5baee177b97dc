"""DistillTrainer on tiny models: gradient accumulation, loss going down, T5, alpha evaluation."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from distill_fixtures import write_conversations

from osd.distill.callbacks import read_metrics
from osd.distill.config import DistillTrainingArguments
from osd.distill.data import ConversationDataset, DistillCollator
from osd.distill.losses import forward_kl
from osd.distill.trainer import DistillTrainer
from osd.spec import measure_acceptance
from tests.devices import DEVICES


def make_trainer(
    student, teacher, tokenizer, train_path, out_dir, eval_path=None, **overrides
) -> DistillTrainer:
    enc_dec = bool(student.config.is_encoder_decoder)
    args = (
        {
            "output_dir": str(out_dir),
            "report_to": "none",
            "save_strategy": "no",
            "logging_steps": 1,
            "max_new_tokens": 8,
            "eval_on_start": eval_path is not None,
            "seed": 0,
            "disable_tqdm": True,
            "sample_source": "teacher",  # the data set's answers (or the teacher's generation) unless a test says otherwise
        }
        | overrides
    )
    return DistillTrainer(
        model=student,
        teacher_model=teacher,
        args=DistillTrainingArguments(**args),
        train_dataset=ConversationDataset(train_path, tokenizer, 64, enc_dec),
        eval_dataset=ConversationDataset(eval_path, tokenizer, 64, enc_dec) if eval_path else None,
        data_collator=DistillCollator(
            tokenizer.pad_token_id, enc_dec, getattr(student.config, "decoder_start_token_id", None), 64
        ),
        processing_class=tokenizer,
    )


def two_records(tmp_path) -> str:
    """Two answers of very different lengths: per-micro-batch means would weight their tokens unequally."""
    records = [
        {
            "conversation": [
                {"role": "user", "content": "what is one"},
                {"role": "assistant", "content": "one"},
            ]
        },
        {
            "conversation": [
                {"role": "user", "content": "select it"},
                {"role": "assistant", "content": "select sum of it from table where it equals one plus two"},
            ]
        },
    ]
    path = tmp_path / "two.json"
    path.write_text(json.dumps(records))
    return str(path)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("source", ["teacher", "student"])
def test_gradient_accumulation_matches_one_big_batch(source, device, llama_pair, tokenizer, tmp_path):
    """TRL #4719: two micro-batches of 1 must give the same update as one batch of 2 (an offline step, on
    each device: the Trainer moves student and teacher there)."""
    student, teacher = llama_pair
    path = two_records(tmp_path)
    common = {
        "max_steps": 1,
        "optim": "sgd",
        "learning_rate": 1.0,
        "max_grad_norm": 1e9,
        "sample_source": source,
        "use_cpu": device == "cpu",
    }
    updated = []
    for bs, ga in ((2, 1), (1, 2)):
        model = copy.deepcopy(student)
        make_trainer(
            model,
            teacher,
            tokenizer,
            path,
            tmp_path / f"bs{bs}",
            per_device_train_batch_size=bs,
            gradient_accumulation_steps=ga,
            **common,
        ).train()
        assert model.device.type == device
        updated.append({name: w.cpu() for name, w in model.state_dict().items()})
    moved = False
    for name, before in student.state_dict().items():
        torch.testing.assert_close(updated[1][name], updated[0][name], rtol=1e-4, atol=1e-6, msg=name)
        moved |= not torch.allclose(updated[0][name], before)
    assert moved  # the step really changed the weights


def _dataset_loss(student, teacher, tokenizer, path) -> float:
    """forward KL on the data set's answers (teacher forcing), a fixed yardstick."""
    batch = DistillCollator(tokenizer.pad_token_id)([*ConversationDataset(path, tokenizer, 64)])
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    with torch.no_grad():
        return float(forward_kl(student(**inputs).logits, teacher(**inputs).logits, batch["loss_mask"]))


def test_a_few_steps_lower_the_loss(llama_pair, tokenizer, conversation_file, tmp_path):
    student, teacher = llama_pair
    before = _dataset_loss(student, teacher, tokenizer, conversation_file)
    trainer = make_trainer(
        student,
        teacher,
        tokenizer,
        conversation_file,
        tmp_path,
        max_steps=8,
        learning_rate=1e-2,
        per_device_train_batch_size=3,
    )
    trainer.train()
    student.eval()
    after = _dataset_loss(student, teacher, tokenizer, conversation_file)
    assert after < 0.7 * before, (before, after)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 8 and losses[-1] < losses[0]


def test_t5_trains_through_the_same_trainer(t5_pair, tokenizer, conversation_file, tmp_path):
    student, teacher = t5_pair
    trainer = make_trainer(
        student,
        teacher,
        tokenizer,
        conversation_file,
        tmp_path,
        max_steps=6,
        learning_rate=1e-2,
        per_device_train_batch_size=3,
        sample_source="student",
        kl_method="reverse",
    )
    # student sampling: the decoder tokens trained on are the student's own greedy generation
    items = [trainer.train_dataset[i] for i in range(3)]
    batch = trainer.make_training_batch(trainer.data_collator(items))
    for row, item in enumerate(items):
        expected = student.generate(
            torch.tensor([item["prompt_ids"]]),
            max_new_tokens=8,
            do_sample=False,
            eos_token_id=2,
            pad_token_id=0,
        )[0, 1:].tolist()
        expected = expected[: expected.index(2) + 1] if 2 in expected else expected
        assert batch["labels"][row][batch["loss_mask"][row]].tolist() == expected
        assert batch["decoder_input_ids"][row, 0] == student.config.decoder_start_token_id
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 6 and all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < losses[0]


def test_alpha_is_measured_before_the_first_step_and_after(
    llama_pair, tokenizer, conversation_file, tmp_path
):
    student, teacher = llama_pair
    prompts = [item["prompt_ids"] for item in ConversationDataset(conversation_file, tokenizer, 64)]
    standard = measure_acceptance(
        copy.deepcopy(student), teacher, prompts, gamma=3, max_new_tokens=8, eos_token_id=2
    )
    trainer = make_trainer(
        student,
        teacher,
        tokenizer,
        conversation_file,
        tmp_path,
        eval_path=conversation_file,
        max_steps=2,
        per_device_train_batch_size=2,
        eval_strategy="steps",
        eval_steps=2,
        max_propose_num=3,
        learning_rate=1e-2,
    )
    trainer.train()
    evals = [h for h in trainer.state.log_history if "eval_alpha" in h]
    assert [h["step"] for h in evals] == [0, 2]
    assert evals[0]["eval_alpha"] == pytest.approx(standard.alpha)
    assert evals[0]["eval_accepted_length"] == pytest.approx(standard.mean_accepted_length)
    groups = [evals[0]["eval_alpha/dataset/math"], evals[0]["eval_alpha/dataset/sql"]]
    assert min(groups) <= evals[0]["eval_alpha"] <= max(groups)  # token-weighted mean of the groups
    # every log line is in metrics.jsonl, with its step
    lines = read_metrics(tmp_path)
    assert [line["step"] for line in lines if "eval_alpha" in line] == [0, 2]
    assert [line["loss"] for line in lines if "loss" in line] == [
        h["loss"] for h in trainer.state.log_history if "loss" in h
    ]


def test_distillation_raises_alpha(llama_pair, tokenizer, tmp_path):
    """Teacher answers generated on the fly (the records have none), forward KL: alpha must go up."""
    student, teacher = llama_pair
    path = write_conversations(tmp_path / "queries.json", with_answers=False)
    trainer = make_trainer(
        student,
        teacher,
        tokenizer,
        path,
        tmp_path / "out",
        eval_path=path,
        max_steps=10,
        learning_rate=3e-2,
        per_device_train_batch_size=6,
        eval_strategy="no",
        max_propose_num=3,
    )
    trainer.train()
    after = trainer.evaluate()["eval_alpha"]
    before = next(h["eval_alpha"] for h in trainer.state.log_history if "eval_alpha" in h)
    assert after > before + 0.1, (before, after)


def test_sampled_alpha_draws_on_the_students_device(
    llama_pair, tokenizer, conversation_file, tmp_path, monkeypatch
):
    """--eval_temperature > 0: the evaluation generator is made for the student's device, where the
    draft's probabilities are. The student reports the CPU as `cpu:0`, a device that neither a default
    `torch.Generator()` nor one made for the teacher (plain `cpu`) names."""
    from osd.spec import SpeculativeDecoder

    student, teacher = llama_pair
    student_device = torch.device("cpu", 0)
    model_device = type(student).device
    monkeypatch.setattr(
        type(student), "device", property(lambda m: student_device if m is student else model_device.fget(m))
    )

    class RecordingGenerator(torch.Generator):
        """A CPU generator that remembers the device it was made for."""

        def __init__(self, device: str | torch.device = "cpu"):
            super().__init__()
            self.made_for = torch.device(device)

    monkeypatch.setattr(torch, "Generator", RecordingGenerator)
    devices = []
    generate = SpeculativeDecoder.generate

    def recording_generate(self, *args, generator=None, **kwargs):
        devices.append(generator.made_for)
        return generate(self, *args, generator=generator, **kwargs)

    monkeypatch.setattr(SpeculativeDecoder, "generate", recording_generate)
    trainer = make_trainer(
        student,
        teacher,
        tokenizer,
        conversation_file,
        tmp_path,
        eval_path=conversation_file,
        eval_temperature=0.7,
    )
    trainer.evaluate()
    assert teacher.device == torch.device("cpu") != student.device
    assert devices and set(devices) == {student_device}
