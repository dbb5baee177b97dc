"""The README's "Use with HF generate" block runs as written, from the repository root."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_use_with_hf_generate_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Use with HF generate", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert "assistant_model=draft" in block
    monkeypatch.chdir(ROOT)
    exec(
        compile(block, "README.md", "exec"), {}
    )  # its assert: assisted greedy output == target's greedy output
    assert capsys.readouterr().out.strip()
