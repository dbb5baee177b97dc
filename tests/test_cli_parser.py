"""osd.distill.flags (osd.train's command line): help order and choices, usage errors, and offline mode when the hub does not answer."""

from __future__ import annotations

import http.server
import shutil
import threading
import time
from pathlib import Path

import huggingface_hub.constants
import pytest
from transformers import AutoConfig, AutoTokenizer

from osd.distill import flags
from osd.paths import TINY_TEACHER_PATH


def test_help_lists_project_groups_first_with_choices() -> None:
    text = flags.build_parser().format_help()
    sections = ["\nmodels:", "\ndata:", "\ndistillation (osd):", "\ntransformers.TrainingArguments:"]
    starts = [text.index(s) for s in sections]
    assert starts == sorted(starts)
    assert starts[0] < text.index("  --teacher_model_path") < starts[1]
    assert starts[2] < text.index("  --mode {offline,online}") < starts[3]
    assert text.index("  --learning_rate") > starts[3]
    assert "--kl_method {forward,jsd,reference_mix,reverse,tvd}" in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--output_dir", "x"], "required: --teacher_model_path"),
        (["--teacher_model_path", "t", "--output_dir", "x"], "required: --data_path"),
        (["--teacher_model_path", "t", "--data_path", "d", "--mode", "bogus"], "invalid choice: 'bogus'"),
        (
            ["--teacher_model_path", "t", "--data_path", "d", "--mix_ratio", "3"],
            "--mix_ratio must be in [0, 1]",
        ),
        (["--teacher_model_path", "t", "--data_path", "d", "--do_predict"], "--do_predict: osd.train has no"),
    ],
)
def test_bad_command_line_is_a_usage_error(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        flags.parse_train_args([*argv, "--use_cpu", "True"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m osd.train") and message in err


def test_hub_reachable_answers_within_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens
    assert not flags.hub_reachable(timeout=2)
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)  # 501 to HEAD
    threading.Thread(target=server.handle_request, daemon=True).start()
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", f"http://127.0.0.1:{server.server_port}")
    assert flags.hub_reachable(timeout=2)
    server.server_close()


@pytest.fixture
def online_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    """As without HF_HUB_OFFLINE (the suite sets it); monkeypatch restores both afterwards."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)


@pytest.mark.usefixtures("online_mode")
def test_local_folders_never_check_the_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flags, "hub_reachable", lambda: pytest.fail("checked the hub for local folders"))
    assert not flags.go_offline_if_unreachable([str(TINY_TEACHER_PATH), None])
    assert not huggingface_hub.constants.HF_HUB_OFFLINE


@pytest.mark.usefixtures("online_mode")
def test_cached_hub_model_loads_at_once_when_the_hub_is_unreachable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A hub name in the cache: offline mode is switched on, and loading takes no retries (without it,
    huggingface_hub retries each API call 5 times with 1+2+4+8+8 s of back-off)."""
    snapshot = tmp_path / "models--org--tiny" / "snapshots" / "abc"
    shutil.copytree(TINY_TEACHER_PATH, snapshot)
    (tmp_path / "models--org--tiny" / "refs").mkdir()
    (tmp_path / "models--org--tiny" / "refs" / "main").write_text("abc")
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", "http://127.0.0.1:9")
    assert flags.go_offline_if_unreachable(["org/tiny"])
    assert huggingface_hub.constants.HF_HUB_OFFLINE
    start = time.monotonic()
    AutoConfig.from_pretrained("org/tiny", cache_dir=tmp_path)
    AutoTokenizer.from_pretrained("org/tiny", cache_dir=tmp_path)
    assert time.monotonic() - start < 20


@pytest.mark.usefixtures("online_mode")
def test_explicit_hf_hub_offline_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(flags, "hub_reachable", lambda: pytest.fail("checked the hub despite HF_HUB_OFFLINE"))
    assert not flags.go_offline_if_unreachable(["org/name"])


def test_routing_flags_are_a_group_of_their_own() -> None:
    from osd.distill.routing import RoutingArguments

    text = flags.build_parser((RoutingArguments,), "osd.distill.routing").format_help()
    assert text.startswith("usage: python -m osd.distill.routing ")
    assert (
        text.index("\ndistillation (osd):")
        < text.index("\nRoutingArguments:")
        < text.index("\ntransformers.")
    )
    assert "--route_by {dataset,topic,language}" in text
