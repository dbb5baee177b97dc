"""llamacpp_patches/README.md against the scripts: every command names files, flags and variables
that exist, the recorded table is what the report computes from its files, and the helpers that the
README describes behave so (report's refusal of missing files, convert.sh with a hub name, run.py's
context size).

The first-round section (commands of commit 6396769, the tiny pair) is history and not checked.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from llamacpp_patches import report
from llamacpp_patches.run import needed_context
from osd.paths import TINY_TEACHER_PATH

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "llamacpp_patches" / "README.md").read_text(encoding="utf-8")
CURRENT = README.split("### First round")[0]
REPO_PREFIXES = ("llamacpp_patches/", "osd/", "data/", "tests/", "bash_scripts/")
PRODUCED = {"osd/demo/models/target"}  # python -m osd.demo.target (bash_scripts/setup_env.sh) writes it
CPP = (ROOT / "llamacpp_patches" / "osd-stream" / "osd-stream.cpp").read_text(encoding="utf-8")


def _commands() -> list[str]:
    """The shell lines of the README's bash blocks (continuations joined) and its inline commands."""
    blocks = re.findall(r"```bash\n(.*?)```", CURRENT, flags=re.S)
    lines = [line for b in blocks for line in b.replace("\\\n", " ").splitlines() if line.strip()]
    inline = [c for c in re.findall(r"`([^`\n]+)`", CURRENT) if re.match(r"(\w+=\S+ )*(bash|python) ", c)]
    return lines + inline


def test_bash_blocks_use_only_variables_they_set() -> None:
    """A `$NAME` in a bash block is set by an earlier line of the README's bash blocks."""
    assigned: set[str] = set()
    for line in re.findall(r"```bash\n(.*?)```", CURRENT, flags=re.S):
        for command in line.splitlines():
            used = set(re.findall(r"\$\{?([A-Za-z_]\w*)", command.split("#")[0]))
            assert used <= assigned, f"{sorted(used - assigned)} not set before: {command}"
            assigned |= set(re.findall(r"^([A-Z_]+)=", command))


def _source_of(words: list[str]) -> str | None:
    """The text of the script or module a command runs (None for other programs)."""
    for i, word in enumerate(words):
        if word.endswith(".sh") and (ROOT / word).is_file():
            return (ROOT / word).read_text(encoding="utf-8")
        if word == "-m" and i + 1 < len(words) and words[i - 1].endswith("python"):
            module = ROOT / (words[i + 1].replace(".", "/") + ".py")
            return module.read_text(encoding="utf-8") if module.is_file() else None
    return None


def _flag_known(flag: str, source: str) -> bool:
    """argparse (`"--flag"`), a dataclass field (`flag:`) or a shell `case` pattern (`--flag)`)."""
    name = flag[2:]
    return (
        f'"{flag}"' in source or re.search(rf"^\s+{re.escape(name)}: ", source, re.M) or f"{flag})" in source
    )


COMMANDS = _commands()


def test_readme_has_commands() -> None:
    assert len(COMMANDS) >= 15
    assert any("convert.sh lmsys/" in c for c in COMMANDS) and any("--help" in c for c in COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_command_names_existing_files_flags_and_variables(command: str) -> None:
    words = shlex.split(command, comments=True)
    for word in words:
        path = word.split("=", 1)[-1]
        if (
            path.startswith(REPO_PREFIXES)
            and not path.startswith("llamacpp_patches/work/")
            and path not in PRODUCED
        ):
            assert list(ROOT.glob(path)) if "*" in path else (ROOT / path).exists(), f"{path} in: {command}"
    program = next((w for w in words if "=" not in w), "")
    if program == "$BIN":  # llama-osd-stream: our flags are in the example's source
        for flag in (w for w in words if w.startswith("--osd-")):
            assert f'"{flag}"' in CPP, f"{flag} in: {command}"
        return
    source = _source_of(words)
    if source is None:
        return
    for word in words:
        if re.fullmatch(r"--[a-z][\w-]*", word):
            assert _flag_known(word, source), f"{word} is no flag of the program in: {command}"
        if re.fullmatch(r"[A-Z_]+=\S*", word):
            assert "${" + word.split("=")[0] + ":-" in source, f"{word} is read by nothing in: {command}"


def _table_rows(section: str) -> list[list[str]]:
    return [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in section.splitlines()
        if re.match(r"\| \d ", line)
    ]


def test_recorded_table_is_the_report_of_its_files() -> None:
    section = CURRENT.split("## Measured here")[1]
    rows = _table_rows(section)
    assert len(rows) == 8
    results = ROOT / "llamacpp_patches" / "results" / "demo_v3_cpu"
    names = {"Standard": "demo-standard-f16", "Online-distilled": "demo-distilled-f16"}
    for gamma, draft, *numbers in rows:
        files = sorted(str(f) for f in results.glob(f"*_g{gamma}.jsonl"))
        computed = next(
            r
            for r in report.summarize([x for f in files for x in report.load_lines(f)])
            if r.draft == names[draft] and r.dataset == report.ALL
        )
        expected = [
            computed.base_ms_per_token,
            computed.spec_ms_per_token,
            computed.speedup,
            computed.acceptance,
            computed.alpha,
            computed.c,
            computed.verify_cost,
            computed.predicted,
            computed.predicted_verify,
            computed.speedup / computed.predicted_verify,
        ]
        for text, value in zip(numbers, expected, strict=True):
            decimals = len(text.split(".")[1])
            assert float(text) == pytest.approx(value, abs=0.51 * 10**-decimals), (
                f"gamma {gamma} {draft}: {text}"
            )


def test_report_refuses_missing_files(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        report.main(["runs/llamacpp/nothing/*.jsonl"])
    assert exit_info.value.code == 2
    assert "no such file: runs/llamacpp/nothing/*.jsonl" in capsys.readouterr().err


def test_needed_context() -> None:
    assert needed_context([10, 40, 25], max_new_tokens=64, gamma=3) == 40 + 64 + 3 + 1


def test_convert_takes_a_hub_name(tmp_path: Path) -> None:
    """convert.sh org/tiny converts the cached snapshot (a stub converter records its input)."""
    cache = tmp_path / "hub"
    snapshot = cache / "models--org--tiny" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    for f in TINY_TEACHER_PATH.iterdir():
        (snapshot / f.name).symlink_to(f)
    (cache / "models--org--tiny" / "refs").mkdir()
    (cache / "models--org--tiny" / "refs" / "main").write_text("abc")
    tree = tmp_path / "llama.cpp"
    tree.mkdir()
    (tree / "convert_hf_to_gguf.py").write_text(
        "import sys; from pathlib import Path\n"
        "Path(sys.argv[sys.argv.index('--outfile') + 1]).write_text(sys.argv[1])\n"
    )
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    env |= {"LLAMACPP_SRC": str(tree), "PYTHON": sys.executable}
    out = tmp_path / "gguf" / "tiny"
    subprocess.run(
        ["bash", "llamacpp_patches/convert.sh", "org/tiny", str(out), "f16"], cwd=ROOT, env=env, check=True
    )
    assert Path((tmp_path / "gguf" / "tiny-f16.gguf").read_text()) == snapshot
    usage = subprocess.run(["bash", "llamacpp_patches/convert.sh"], cwd=ROOT, capture_output=True, text=True)
    assert usage.returncode == 2 and "usage: bash llamacpp_patches/convert.sh" in usage.stderr
