"""osd.dashboard: the definition builds and prints without network; saving creates, or updates by URL.
(That every panel names a key the trainer logs: tests/distill/test_logged_metrics.py.)"""

from __future__ import annotations

import json
import socket
import sys

import pytest
import wandb
import wandb_workspaces.workspaces as ws

from osd.conversations import GROUP_FIELDS
from osd.dashboard import NAME, build_workspace, main, save, sections
from osd.user_errors import run_main

URL = "https://wandb.ai/e/p?nw=abc123"


def refuse(*args, **kwargs):
    raise AssertionError("the network was used")


def test_print_builds_the_whole_definition_without_network(monkeypatch, capsys):
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(wandb, "Api", refuse)
    main(["--entity", "e", "--project", "p", "--print"])
    out = capsys.readouterr().out
    spec = json.loads(out[: out.index("\n}\n") + 2])  # the JSON first, then the panel list
    built = spec["section"]["panelBankConfig"]["sections"]
    assert [s["name"] for s in built] == list(sections())
    regexes = {p["config"].get("metricRegex") for s in built for p in s["panels"]}
    for field in GROUP_FIELDS:  # alpha per group, online and in evaluation
        assert {f"^train/alpha/{field}/.+$", f"^eval/alpha/{field}/.+$"} <= regexes
    assert {s["localPanelSettings"]["xAxis"] for s in built} == {"train/queries_served", "train/global_step"}


@pytest.fixture
def saved(monkeypatch) -> list:
    """Workspace.save records the workspace instead of sending it."""
    calls: list = []
    monkeypatch.setattr(ws.Workspace, "save", lambda self: calls.append(self) or self)
    monkeypatch.setattr(ws.Workspace, "url", property(lambda self: URL))
    return calls


def test_without_url_a_new_workspace_is_saved(saved):
    assert save(build_workspace("e", "p")) == URL
    assert saved[0].name == NAME and [s.name for s in saved[0].sections] == list(sections())


def test_url_replaces_the_sections_of_the_saved_workspace(saved, monkeypatch):
    old = ws.Workspace(entity="e", project="p", name="old", sections=[ws.Section(name="hand-made")])
    monkeypatch.setattr(
        ws.Workspace, "from_url", classmethod(lambda cls, url: old if url == URL else refuse())
    )
    save(build_workspace("e", "p", name="renamed"), URL)
    assert saved == [old]  # the loaded view is saved again: same id, updated in place
    assert old.name == "renamed" and [s.name for s in old.sections] == list(sections())


def test_saving_without_a_wandb_key_is_a_one_line_error_without_network(monkeypatch, tmp_path, capsys):
    """Issue 49: without a key, saving asked wandb, which prompts for one (a hang) or fails in a traceback."""
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(ws.Workspace, "save", refuse)
    monkeypatch.setattr(sys, "argv", ["osd.dashboard", "--entity", "e", "--project", "p"])
    assert run_main(main, "osd.dashboard") == 1
    assert capsys.readouterr().err == (
        "osd.dashboard: error: saving the workspace needs a wandb API key: run `wandb login` or set "
        "WANDB_API_KEY (or --print the spec, which needs none)\n"
    )
