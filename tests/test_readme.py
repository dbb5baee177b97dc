"""The README's "Use with HF generate" block runs as written, from the repository root; every results
path and relative link in the README, docs/ and benchmarks/README.md exists."""

from __future__ import annotations

import json
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


DOCS = ["README.md", "benchmarks/README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]
RESULTS_PATH = re.compile(r"benchmarks/results/[\w./{},*-]*")
MD_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _expand_braces(path: str) -> list[str]:
    """`a{b,c}d` -> [`abd`, `acd`], nested left to right."""
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    return [
        e for alt in m.group(1).split(",") for e in _expand_braces(path[: m.start()] + alt + path[m.end() :])
    ]


def _exists(path: str) -> bool:
    """A file or folder, a glob matching something, or a recording stem (`rec_45_32` for rec_45_32.jsonl)."""
    if "*" in path:
        return any(ROOT.glob(path))
    p = ROOT / path
    return p.exists() or any(p.parent.glob(p.name + ".*"))


@pytest.mark.parametrize("doc", DOCS)
def test_results_paths_named_in_docs_exist(doc: str) -> None:
    text = (ROOT / doc).read_text(encoding="utf-8")
    named = {m.rstrip(".,;:") for m in RESULTS_PATH.findall(text)}
    missing = sorted(p for m in named for p in _expand_braces(m) if not _exists(p))
    assert not missing, f"{doc} names results that do not exist: {missing}"


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation but `-` and `_` dropped, spaces as `-`."""
    headings = re.findall(r"^#+ (.+)$", markdown, flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("doc", DOCS)
def test_relative_links_in_docs_resolve(doc: str) -> None:
    text = (ROOT / doc).read_text(encoding="utf-8")
    broken = []
    for target in MD_LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # a URL
        path, _, anchor = target.partition("#")
        linked = (ROOT / doc).parent.joinpath(path) if path else ROOT / doc
        if not linked.exists() or (anchor and anchor not in _anchors(linked.read_text(encoding="utf-8"))):
            broken.append(target)
    assert not broken, f"{doc} links to missing files or headings: {broken}"


def test_the_main_jobs_default_ceilings_are_recorded() -> None:
    """The demo draws its ceiling from the default folder's file recorded at the gamma it serves; a moved or missing
    file would drop the line silently. One for every gamma the start-up choice may take by default (1..max_gamma)."""
    from osd.demo.online_demo import CEILING_PATH, parse_args

    recorded = [json.loads(f.read_text()) for f in sorted(CEILING_PATH.glob("*.json"))]
    args = parse_args([])
    assert sorted(r["gamma"] for r in recorded) == list(range(1, args.max_gamma + 1)), CEILING_PATH
    for r in recorded:
        assert (ROOT / r["draft"]).resolve() == Path(args.draft).resolve()
        assert set(r["offline"]) == set(args.domains) and r["max_new_tokens"] == args.max_new_tokens
