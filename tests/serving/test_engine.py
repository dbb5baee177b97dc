"""A real vLLM engine on the committed tiny pair: the draft swapped while requests are in flight.

Runs in the vLLM environment (`bash bash_scripts/setup_vllm.sh`, then
`.venv-vllm/bin/python -m pytest tests/serving`); skipped where vLLM is not installed. Each engine
starts in ~25 s on a CPU; set OMP_NUM_THREADS=1 VLLM_CPU_OMP_THREADS_BIND=nobind
VLLM_CPU_KVCACHE_SPACE=1 on a shared machine.
"""

from __future__ import annotations

import copy
import json
import time

import pytest
import torch
from safetensors.torch import load_file

pytest.importorskip(
    "vllm", reason="vLLM is not installed here: bash bash_scripts/setup_vllm.sh makes .venv-vllm"
)

from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from vllm import LLM  # noqa: E402

from osd.paths import TINY_TEACHER_PATH, workload_path  # noqa: E402
from osd.serving.acceptance import vllm_acceptance, wrong_positions  # noqa: E402
from osd.serving.config import ServingArguments  # noqa: E402
from osd.serving.distiller import DraftDistiller, export_draft  # noqa: E402
from osd.serving.engine import (  # noqa: E402
    RequestPool,
    build_engine,
    sampling_params,
    serve_all,
    shutdown_engine,
    spec_counters,
    swap_draft,
)
from osd.serving.online import load_queries, serve_stream  # noqa: E402
from osd.serving.subvocab import served_draft_folder  # noqa: E402
from osd.spec.draft_vocab import draft_vocab_ids, set_draft_vocab  # noqa: E402
from tests.serving.conftest import GAMMA, MAX_NEW, SWAP_LIMIT_S  # noqa: E402

GREEDY = sampling_params(MAX_NEW, 0.0)


@pytest.fixture(scope="module")
def draft_path(tmp_path_factory) -> str:
    """The draft vLLM serves here: the tiny teacher cut to its first layer (embeddings, layer 0, norm, head). The
    tiny pair's own draft has attention heads of 16 dimensions, for which vLLM's CPU attention has no kernel."""
    teacher = AutoModelForCausalLM.from_pretrained(TINY_TEACHER_PATH)
    config = copy.deepcopy(teacher.config)
    config.num_hidden_layers = 1
    draft = AutoModelForCausalLM.from_config(config)
    missing, _ = draft.load_state_dict(
        teacher.state_dict(), strict=False
    )  # layers 1.. are the teacher's alone
    assert not missing, missing
    folder = tmp_path_factory.mktemp("draft")
    draft.save_pretrained(folder)
    AutoTokenizer.from_pretrained(TINY_TEACHER_PATH).save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def llm(target_only, draft_path):
    """Built after `target_only` (conftest.py)."""
    llm = build_engine(str(TINY_TEACHER_PATH), draft_path, GAMMA, "float32", 512)
    yield llm
    shutdown_engine(llm)


@pytest.fixture(scope="module")
def draft_files(tmp_path_factory, draft_path) -> dict[str, str]:
    """The draft as served, and a random draft of its shape (proposes nothing the target accepts)."""
    folder = tmp_path_factory.mktemp("drafts")
    draft = AutoModelForCausalLM.from_pretrained(draft_path)
    export_draft(draft, folder / "trained.safetensors", torch.float32)
    torch.manual_seed(0)
    random = AutoModelForCausalLM.from_config(draft.config)
    export_draft(random, folder / "random.safetensors", torch.float32)
    return {"trained": str(folder / "trained.safetensors"), "random": str(folder / "random.safetensors")}


def accepted(llm) -> int:
    return int(spec_counters(llm)["num_accepted_tokens"])


def test_swap_with_requests_in_flight_keeps_greedy_outputs(llm, prompts, target_only, draft_files) -> None:
    pool = RequestPool(llm, GREEDY, len(prompts))
    for i, prompt in enumerate(prompts):
        pool.submit(i, prompt)
    done, swap_times, in_flight_at_swap = [], [], []
    for step in range(10_000):
        done += pool.poll()
        if step in (2, 5):  # random weights mid-request, then the trained draft back
            in_flight_at_swap.append(len(pool.in_flight))
            swap_times.append(swap_draft(llm, draft_files["random" if step == 2 else "trained"]))
        if not pool.in_flight:
            break
    assert min(in_flight_at_swap) > 0, in_flight_at_swap  # the swaps did land mid-request
    # speculation, whatever the draft proposes, never changes greedy output: same tokens as the target alone
    assert [s.token_ids for s in sorted(done, key=lambda s: s.index)] == target_only
    assert max(swap_times) < SWAP_LIMIT_S, swap_times


def test_swapped_weights_are_the_ones_that_propose(llm, prompts, target_only, draft_files) -> None:
    """The same prompts with the trained draft, a random one, and the trained one back: a reload that did
    nothing (or reloaded the target) would keep the acceptance; an inexact one would not restore it."""
    counts = []
    for name in ("trained", "random", "trained"):
        swap_draft(llm, draft_files[name])
        before = accepted(llm)
        outputs = serve_all(llm, prompts, GREEDY, len(prompts))
        counts.append(accepted(llm) - before)
        assert [s.token_ids for s in outputs] == target_only, name
    assert counts[0] > 50 and counts[1] <= 0.02 * counts[0] and counts[2] == counts[0], counts


def test_swap_reaches_the_embedding_and_the_output_head(llm, draft_files) -> None:
    for name in ("random", "trained"):
        swap_draft(llm, draft_files[name])
        exported = load_file(draft_files[name])
        expected = [float(exported[k].float().sum()) for k in ("model.embed_tokens.weight", "lm_head.weight")]
        expected.append(expected[1])  # a full head scores all its rows
        (served,) = llm.collective_rpc("draft_head_sums")
        assert served == pytest.approx(expected, rel=1e-5), (name, served, expected)


def test_per_request_counters_add_up_to_vllms_totals(llm, prompts, draft_files) -> None:
    swap_draft(llm, draft_files["trained"])
    before = spec_counters(llm)
    served = serve_all(llm, prompts, GREEDY, 4)
    after = spec_counters(llm)
    per_request = [vllm_acceptance(s.counts) for s in served]
    assert sum(a for a, _ in per_request) == after["num_accepted_tokens"] - before["num_accepted_tokens"]
    assert sum(p for _, p in per_request) == after["num_draft_tokens"] - before["num_draft_tokens"]
    for s in served:  # prefill token + per step: the accepted tokens and one of the target's
        steps = s.counts.per_step_accepted
        assert len(s.token_ids) <= 1 + len(steps) + sum(steps) and len(
            wrong_positions(s.counts, len(s.token_ids))
        ) <= len(steps)


@pytest.mark.parametrize("background", [False, True])
def test_online_loop_updates_and_swaps_the_running_draft(
    llm, draft_files, draft_path, tmp_path, background
) -> None:
    swap_draft(llm, draft_files["trained"])
    args = ServingArguments(
        data_path=str(workload_path("sql", "eval")), output_dir=str(tmp_path), teacher_model_path=str(TINY_TEACHER_PATH),
        student_model_path=draft_path, max_propose_num=GAMMA, max_new_tokens=MAX_NEW, concurrency=4,
        online_update_interval=2, online_eval_interval=4, teacher_dtype="float32", learning_rate=1e-3, max_samples=8,
        online_background_update=background,
    )  # fmt: skip
    tokenizer = AutoTokenizer.from_pretrained(TINY_TEACHER_PATH)
    draft = AutoModelForCausalLM.from_pretrained(draft_path)
    target = AutoModelForCausalLM.from_pretrained(TINY_TEACHER_PATH)
    distiller = DraftDistiller(draft, target, learning_rate=args.learning_rate)
    entries = []
    start = time.perf_counter()
    state, _ = serve_stream(
        llm, args, distiller, load_queries(args.data_path, tokenizer, 400, limit=8), entries.append
    )
    assert len(state.queries) == 8 and state.updates == 4
    # every query's latency lies within the run; the loop's time waiting on the engine excludes the updates'
    elapsed = time.perf_counter() - start
    assert max(q.wall_time_s for q in state.queries) <= elapsed
    assert 0 < state.serve_time_s <= elapsed - state.update_time_s
    assert [e["queries_served"] for e in entries] == [4, 8]
    # in the background, exports that are ready together are swapped in once
    assert 1 <= entries[-1]["draft_swaps"] <= 4 if background else entries[-1]["draft_swaps"] == 4
    # the last swap, after the last update, serves the distilled draft
    export_draft(distiller.draft, tmp_path / "final.safetensors", torch.float32)
    final = load_file(tmp_path / "final.safetensors")["model.embed_tokens.weight"]
    (served,) = llm.collective_rpc("draft_head_sums")
    assert served[0] == pytest.approx(float(final.sum()), rel=1e-5)
    assert all(0 <= e["alpha"] <= 1 and 0 <= e["vllm_acceptance_rate"] <= e["alpha"] for e in entries), (
        entries
    )
    assert "alpha/dataset/sql" in entries[-1] and entries[-1]["swap_time_s"] < SWAP_LIMIT_S
    json.dumps(entries)  # metrics.jsonl-ready


# A draft with a sub-vocabulary head (osd.serving.subvocab). Last in this module: its engine unregisters
# the Prometheus counters of `llm`, so these tests read the per-request counters only.


@pytest.fixture(scope="module")
def subvocab(tmp_path_factory, target_only, draft_path) -> tuple[LLM, torch.Tensor]:
    """vLLM with the draft whose head scores every token except those the target writes on these prompts,
    and that token set [V']."""
    folder = tmp_path_factory.mktemp("subvocab")
    draft = AutoModelForCausalLM.from_pretrained(draft_path)
    written = {t for out in target_only for t in out}
    set_draft_vocab(draft, [t for t in range(draft.config.vocab_size) if t not in written])
    draft.save_pretrained(folder / "draft")
    AutoTokenizer.from_pretrained(draft_path).save_pretrained(folder / "draft")
    llm = build_engine(
        str(TINY_TEACHER_PATH), served_draft_folder(str(folder / "draft"), folder), GAMMA, "float32", 512
    )
    yield llm, draft_vocab_ids(draft)
    shutdown_engine(llm)


def test_subvocab_head_proposes_only_its_tokens(subvocab, prompts, target_only) -> None:
    """q = 0 on every token the target writes: nothing is accepted (the same weights with the full head
    are accepted > 50 times on these prompts, test above), and greedy output stays the target's."""
    llm, _ = subvocab
    served = serve_all(llm, prompts, GREEDY, len(prompts))
    assert [s.token_ids for s in served] == target_only
    accepted_tokens, proposed = (
        sum(c) for c in zip(*(vllm_acceptance(s.counts) for s in served), strict=True)
    )
    assert proposed > 50 and accepted_tokens == 0, (accepted_tokens, proposed)


def test_subvocab_head_follows_a_swap(subvocab, draft_files) -> None:
    llm, ids = subvocab
    for name in ("random", "trained"):
        swap_draft(llm, draft_files[name])
        rows = load_file(draft_files[name])["lm_head.weight"].index_select(0, ids)  # [V', H]
        (served,) = llm.collective_rpc("draft_head_sums")
        assert served[2] == pytest.approx(float(rows.sum()), rel=1e-5), (name, served)
