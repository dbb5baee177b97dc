"""osd.online: one loop, every server. The loop's cadence on a scripted server; the osd engine and a replay of
a recording of the same target drive the same loop to the same acceptance; updates land where they are due."""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, replace

import pytest
import torch

from osd.analysis.replay_server import ReplayServer, recording_queries, topk_loss
from osd.distill.losses import get_divergence
from osd.online.buffer import distillation_loss
from osd.online.config import OnlineArguments
from osd.online.engine_server import EngineServer
from osd.online.loop import SHARED_DRAFT, OnlineLoop, Query, Served, in_turns
from osd.online.records import OnlineState, QueryStats
from osd.online.updater import DraftUpdater, adamw_step
from tests.tiny_models import EOS, VOCAB, draft_from_target, recorded_tiny_target

NEW_TOKENS = 12


class ScriptedServer:
    """Serves each query as proposing 4 tokens, one accepted; records what the loop asks of it."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def serve(self, queries, draft_for, first_index):
        return [self._served(q, draft_for) for q in queries]

    def stream(self, queries, draft_for, before):
        return in_turns(self, queries, draft_for, before)

    def _served(self, query, draft_for) -> Served:
        draft_for(query.route)
        self.events.append(f"serve {query.prompt_ids[0]}")
        return Served(
            query.route,
            QueryStats(1.0, 4, 1, 1, query.groups, 2),
            lambda positions: Item(query.prompt_ids[0]),
        )

    def refresh(self, updater) -> None:
        self.events.append(f"refresh v{updater.version}")

    def metrics(self) -> dict:
        return {"server": 1}


@dataclass
class Item:
    n: int
    replayed: bool = False
    nbytes: int = 8


def scripted_loop(config: OnlineArguments, logs: list, learns: bool = True, update_s: float = 0.0):
    draft = torch.nn.Linear(2, 2)
    trained: list[list[int]] = []

    def loss(model, buffer, backward):
        trained.append([q.n for q in buffer])
        time.sleep(update_s)
        value = model.weight.sum()
        backward(value)
        return value.detach()

    server = ScriptedServer()
    updater = DraftUpdater(
        {SHARED_DRAFT: draft}, loss, adamw_step(draft.parameters(), 0.1), config, OnlineState(), learns
    )
    return OnlineLoop(server, updater, config, logs.append), server, trained


def test_the_loop_updates_when_due_refreshes_what_is_served_and_logs_on_time():
    logs: list[dict] = []
    config = OnlineArguments(online_update_interval=2, online_eval_interval=3, online_replay_queries=1)
    loop, server, trained = scripted_loop(config, logs)
    state = loop.run([Query([n]) for n in range(5)])
    # queries 0-1, then 1 (kept) 2 3; at the stream's end 3 (kept) 4 hold one new query: not due, no update
    assert trained == [[0, 1], [1, 2, 3]] and state.updates == 2
    assert server.events == [
        "serve 0",
        "serve 1",
        "refresh v1",
        "serve 2",
        "serve 3",
        "refresh v2",
        "serve 4",
    ]
    assert [e["queries_served"] for e in logs] == [3, 5] and all(e["server"] == 1 for e in logs)
    assert logs[0]["alpha"] == pytest.approx(0.25) and logs[-1]["online_updates"] == 2


def test_a_background_update_runs_beside_the_next_turn_and_lands_after_it():
    logs: list[dict] = []
    config = OnlineArguments(online_update_interval=1, online_background_update=True)
    loop, server, trained = scripted_loop(config, logs)
    state = loop.run([Query([n]) for n in range(3)])
    assert trained == [[0], [1], [2]] and state.updates == 3 and state.background_update_time_s > 0
    # query 1 is served while the update on query 0 runs; it lands after query 1's turn
    assert server.events == ["serve 0", "serve 1", "refresh v1", "serve 2", "refresh v3"]


def test_each_query_carries_the_update_time_that_held_up_serving_after_it():
    config = OnlineArguments(online_update_interval=2)  # updates in line, after queries 1 and 3
    loop, _, trained = scripted_loop(config, [], update_s=0.05)
    state = loop.run([Query([n]) for n in range(5)])
    waits = [q.update_time_s for q in state.queries]
    assert trained == [[0, 1], [2, 3]]
    assert waits[0] == waits[2] == waits[4] == 0.0 and min(waits[1], waits[3]) >= 0.05
    assert sum(waits) == pytest.approx(state.update_time_s)


def test_a_static_run_buffers_nothing_and_never_refreshes():
    logs: list[dict] = []
    loop, server, trained = scripted_loop(OnlineArguments(online_update_interval=0), logs, learns=False)
    state = loop.run([Query([n]) for n in range(3)])
    assert trained == [] and state.updates == 0 and state.max_buffer_bytes == 0
    assert "refresh" not in " ".join(server.events)


@pytest.fixture(scope="module")
def pair():
    target, recording = recorded_tiny_target(NEW_TOKENS)
    return target, draft_from_target(target, noise=0.15), recording


def engine_loop(target, draft, config):
    divergence = get_divergence("forward")
    server = EngineServer(target, 3, NEW_TOKENS, EOS, 0)
    updater = DraftUpdater(
        {SHARED_DRAFT: draft}, lambda d, b, bw: distillation_loss(d, b, divergence, backward=bw),
        adamw_step(draft.parameters(), 1e-2), config, OnlineState(), config.online_update_interval > 0,
    )  # fmt: skip
    return OnlineLoop(server, updater, config)


def replay_loop(recording, draft, config):
    server = ReplayServer(recording, 3, VOCAB)
    updater = DraftUpdater({SHARED_DRAFT: draft}, topk_loss, adamw_step(draft.parameters(), 1e-2), config,
                           OnlineState(), config.online_update_interval > 0)  # fmt: skip
    return OnlineLoop(server, updater, config)


def test_the_engine_and_a_replay_of_the_same_target_serve_a_static_stream_alike(pair):
    """Greedy: the live engine and the simulation against its recording accept the same tokens."""
    target, draft, recording = pair
    static = OnlineArguments(online_update_interval=0)
    queries = recording_queries(recording, ["all"] * len(recording.prompts))
    live = engine_loop(target, copy.deepcopy(draft), static).run(queries)
    replayed = replay_loop(recording, copy.deepcopy(draft), static).run(queries)
    for a, b in zip(live.queries, replayed.queries, strict=True):
        assert (a.alpha_sum, a.num_proposed, a.accepted, a.num_generated) == (
            b.alpha_sum, b.num_proposed, b.accepted, b.num_generated,
        )  # fmt: skip
    assert 0 < sum(q.accepted for q in live.queries) < sum(q.num_proposed for q in live.queries)


@pytest.mark.parametrize("server", ["engine", "replay"])
def test_each_server_drives_the_loop_to_update_at_the_interval_and_learn(pair, server):
    target, draft, recording = pair
    config = OnlineArguments(online_update_interval=2, online_steps_per_update=2, online_loss_positions="all")
    queries = recording_queries(recording, ["all"] * len(recording.prompts))
    start = copy.deepcopy(draft)
    loop = engine_loop(target, draft, config) if server == "engine" else replay_loop(recording, draft, config)
    state = loop.run(queries)
    assert state.updates == 3 and len(state.queries) == len(queries) and state.losses
    assert any(not torch.equal(a, b) for a, b in zip(draft.parameters(), start.parameters(), strict=True))
    entry = loop.entry()
    assert entry["online_updates"] == 3 and 0.0 <= entry["alpha_cumulative"] <= 1.0


def test_a_batch_turn_serves_each_route_with_its_own_draft(pair):
    target, draft, _ = pair
    config = OnlineArguments(online_update_interval=0)
    drafts = {"a": copy.deepcopy(draft), "b": draft_from_target(target, noise=2.0, seed=5)}
    server = EngineServer(target, 3, NEW_TOKENS, EOS, 0)
    updater = DraftUpdater(drafts, None, None, config, OnlineState(), learns=False)
    loop = OnlineLoop(server, updater, config)
    prompts = [[5, 6, 7, 8], [9, 10, 11], [12, 13, 14, 15, 16]]
    batch = loop.step([Query(p, route=r) for p, r in zip(prompts, "aba", strict=True)])
    for query, served in zip(prompts, batch, strict=True):
        alone = engine_loop(target, drafts[served.route], replace(config)).step([Query(query)])[0]
        assert served.stats.alpha_sum == alone.stats.alpha_sum and served.route in drafts


def test_a_background_update_reloads_a_spare_copy_in_the_worker_and_swaps_it_in(pair):
    """The served copy after an update is the worker's reloaded spare: the draft's weights cast to the serving
    dtype, its lean-step weights already derived, and nothing reloaded on the serving path."""
    from osd.spec import lean_llama

    target, draft, _ = pair
    draft = copy.deepcopy(draft).float()
    config = OnlineArguments(online_update_interval=1, online_background_update=True,
                             draft_serving_dtype="bfloat16", online_loss_positions="all")  # fmt: skip
    loop = engine_loop(target, draft, config)
    updater = loop.updater
    served = [updater.serving(SHARED_DRAFT)]
    for prompt in [[5, 6, 7, 8], [9, 10, 11], [12, 13, 14]]:
        loop.step([Query(prompt)], last=False)
        served.append(updater.serving(SHARED_DRAFT))
        assert not updater._stale, "a landed background update leaves nothing to reload on the serving path"
    updater.finish(wait=True)
    now = updater.serving(SHARED_DRAFT)
    assert updater.state.updates >= 2 and len({id(m) for m in served}) == 2  # two copies take turns
    for name, p in now.state_dict().items():
        assert p.dtype == torch.bfloat16 and torch.equal(p, draft.state_dict()[name].to(torch.bfloat16)), name
    derived = lean_llama._derived.get(now)
    assert derived is not None and derived.key == lean_llama._parameter_key(now)
