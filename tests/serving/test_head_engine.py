"""A real vLLM engine serving an EAGLE-3 head (`method: "eagle3"`) on the tiny teacher, and the head swapped while
requests are in flight: with a full-vocabulary head and with a sub-vocabulary one (d2t).

Runs in the vLLM environment (`bash bash_scripts/test_vllm.sh`); skipped where vLLM is not installed. This module's
engines read the per-request counters only (vLLM's Prometheus counters belong to the last engine built).
"""

from __future__ import annotations

import copy

import pytest
import torch
from safetensors.torch import load_file

pytest.importorskip(
    "vllm", reason="vLLM is not installed here: bash bash_scripts/setup_vllm.sh makes .venv-vllm"
)

from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from osd.online.loop import Query  # noqa: E402
from osd.paths import TINY_TEACHER_PATH, workload_path  # noqa: E402
from osd.serving.acceptance import vllm_acceptance  # noqa: E402
from osd.serving.config import ServingArguments  # noqa: E402
from osd.serving.distiller import DraftDistiller, export_draft  # noqa: E402
from osd.serving.engine import (  # noqa: E402
    RequestPool,
    build_engine,
    sampling_params,
    serve_all,
    shutdown_engine,
    swap_draft,
)
from osd.serving.online import load_queries, serve_stream  # noqa: E402
from osd.serving.worker import probe_input  # noqa: E402
from osd.spec.draft_vocab import full_vocab_logits  # noqa: E402
from osd.spec.eagle3 import Eagle3Head, save_head  # noqa: E402
from tests.serving.conftest import GAMMA, MAX_NEW, SWAP_LIMIT_S  # noqa: E402
from tests.tiny_models import distilled_head  # noqa: E402

GREEDY = sampling_params(MAX_NEW, 0.0)


@pytest.fixture(scope="module")
def teacher():
    return AutoModelForCausalLM.from_pretrained(TINY_TEACHER_PATH).eval()


@pytest.fixture(scope="module", params=[None, 1024], ids=["full_vocab", "sub_vocab"])
def served(request, teacher, target_only, tmp_path_factory):
    """vLLM serving a head distilled on the tiny teacher (over its whole vocabulary, or its 1024 most written
    ids), and the swap files of that head and of a random head of the same vocabulary."""
    folder = tmp_path_factory.mktemp("head")
    trained = distilled_head(teacher, request.param, steps=40)
    heads = {"trained": trained, "random": Eagle3Head.for_target(teacher, trained.token_ids, seed=1)}
    files = {}
    for name, head in heads.items():
        files[name] = str(folder / f"{name}.safetensors")
        export_draft(head, files[name], torch.float32)
    llm = build_engine(str(TINY_TEACHER_PATH), str(save_head(trained, folder / "served", teacher)), GAMMA,
                       "float32", 512)  # fmt: skip
    yield llm, heads, files
    shutdown_engine(llm)


def expected_probe(head: Eagle3Head) -> dict[str, torch.Tensor]:
    """What `DraftReloadExtension.head_probe` reads off the served head, computed by osd's head."""
    layer = head.layers[0]
    attention = layer.self_attn
    with torch.no_grad():
        h = head.fc(probe_input(2, head.fc.in_features))  # [2, H]
        hh = torch.cat([h, h], -1)
        qkv = torch.cat([attention.q_proj(hh), attention.k_proj(hh), attention.v_proj(hh)], -1)
        q = qkv[:, : attention.q_proj.out_features]
        logits = full_vocab_logits(head.lm_head(h), head.token_ids, head.config.vocab_size)
        return {"fc": h, "qkv": qkv, "o": attention.o_proj(q), "mlp": layer.mlp(h), "logits": logits}


def assert_serves(llm, head: Eagle3Head) -> None:
    (probe,) = llm.collective_rpc("head_probe")
    assert tuple(probe.pop("target_layers")) == head.target_layers
    for name, expected in expected_probe(head).items():
        torch.testing.assert_close(torch.tensor(probe[name]), expected, rtol=1e-4, atol=1e-5, msg=name)


def test_vllm_serves_the_head_over_its_target_layers(served, teacher) -> None:
    """vLLM reads the target at the head's layers (1, 2, 3 of 4: not its default (2, 2, 1)), and its modules, the
    d2t mapping included, compute what osd's head computes."""
    llm, heads, _ = served
    assert heads["trained"].target_layers == (1, 2, 3)
    assert_serves(llm, heads["trained"])


def test_swaps_with_requests_in_flight_keep_greedy_outputs(served, prompts, target_only) -> None:
    llm, heads, files = served
    pool = RequestPool(llm, GREEDY, len(prompts))
    for i, prompt in enumerate(prompts):
        pool.submit(i, prompt)
    done, swap_times, in_flight_at_swap = [], [], []
    for step in range(10_000):
        done += pool.poll()
        if step in (2, 5):  # a random head mid-request, then the trained one back
            in_flight_at_swap.append(len(pool.in_flight))
            swap_times.append(swap_draft(llm, files["random" if step == 2 else "trained"]))
        if not pool.in_flight:
            break
    assert min(in_flight_at_swap) > 0, in_flight_at_swap
    assert [s.token_ids for s in sorted(done, key=lambda s: s.index)] == target_only
    assert max(swap_times) < SWAP_LIMIT_S, swap_times
    assert_serves(llm, heads["trained"])


def test_a_swap_lands_in_every_layer(served) -> None:
    """After each swap the served head computes what the exported one does (the probe), and the worker's output
    head sums to the exported one's (`draft_head_sums`, as for a draft model)."""
    llm, heads, files = served
    for name in ("random", "trained"):
        swap_draft(llm, files[name])
        assert_serves(llm, heads[name])
        (sums,) = llm.collective_rpc("draft_head_sums")
        assert sums[1] == pytest.approx(float(load_file(files[name])["lm_head.weight"].sum()), rel=1e-5), name


def test_the_swapped_head_is_the_one_that_proposes(served, prompts, target_only) -> None:
    """The same prompts with the trained head, a random one, and the trained one back: greedy output stays the
    target's; the random head is accepted far less, and the trained one's acceptance comes back exactly."""
    llm, _, files = served
    counts = []
    for name in ("trained", "random", "trained"):
        swap_draft(llm, files[name])
        outputs = serve_all(llm, prompts, GREEDY, len(prompts))
        assert [s.token_ids for s in outputs] == target_only, name
        counts.append(sum(vllm_acceptance(s.counts)[0] for s in outputs))
    assert counts[0] > 20 and counts[1] <= 0.1 * counts[0] and counts[2] == counts[0], counts


def test_the_online_loop_distils_the_head_and_swaps_it_in(served, teacher, tmp_path) -> None:
    """--drafter head on vLLM: each finished query buffered from one teacher-forced forward of the target (its
    states at the head's layers, its logits), an update every 2 queries, each exported and swapped in; the last
    swap serves the distilled head."""
    llm, heads, files = served
    swap_draft(llm, files["trained"])
    args = ServingArguments(
        data_path=str(workload_path("sql", "eval")), output_dir=str(tmp_path), teacher_model_path=str(TINY_TEACHER_PATH),
        drafter="head", max_propose_num=GAMMA, max_new_tokens=MAX_NEW, concurrency=4, online_update_interval=2,
        online_eval_interval=4, online_loss_positions="all", teacher_dtype="float32", learning_rate=1e-3, max_samples=8,
    )  # fmt: skip
    head = copy.deepcopy(heads["trained"])
    distiller = DraftDistiller(head, teacher, learning_rate=args.learning_rate)
    queries = load_queries(args.data_path, AutoTokenizer.from_pretrained(TINY_TEACHER_PATH), 400, limit=8)
    entries = []
    state, _ = serve_stream(llm, args, distiller, queries, entries.append)
    assert len(state.queries) == 8 and state.updates == 4 and entries[-1]["draft_swaps"] == 4
    assert not torch.equal(head.fc.weight, heads["trained"].fc.weight)  # the updates moved the head
    assert_serves(llm, head)
    assert all(0 <= e["alpha"] <= 1 for e in entries) and entries[-1]["swap_time_s"] < SWAP_LIMIT_S, entries


def test_bench_vllm_compares_the_head_with_osds_engine(
    served, teacher, prompts, target_only, tmp_path
) -> None:
    """`benchmarks.bench_vllm --head`'s comparison on the tiny teacher (float32: no bf16 near-ties): vLLM with the
    head, osd's engine with it and vLLM's target alone emit the same tokens for every query, and each engine's osd
    alpha is pooled per domain and over the stream."""
    from benchmarks.bench_vllm import compare_head_to_engine

    llm, heads, files = served
    swap_draft(llm, files["trained"])
    head = save_head(heads["trained"], tmp_path / "head", teacher)
    args = ServingArguments(data_path="stream.json", output_dir=str(tmp_path), max_propose_num=GAMMA,
                            max_new_tokens=MAX_NEW, teacher_dtype="float32")  # fmt: skip
    queries = [Query(p, {"dataset": "sql" if i < 4 else "math"}) for i, p in enumerate(prompts)]  # conftest's
    result = compare_head_to_engine(llm, target_only, queries, args, str(head), teacher)
    for equal in ("same_outputs", "vllm_as_target_alone", "osd_spec_as_target_alone"):
        assert result["overall"][equal] == "8/8", result
    for measures in (result["overall"], result["per_domain"]["sql"], result["per_domain"]["math"]):
        assert all(0 <= measures[k] <= 1 for k in ("vllm", "vllm_without_first_step", "osd_spec")), result
    assert result["per_domain"]["code"]["osd_spec"] is None  # no query of the domain: no alpha
