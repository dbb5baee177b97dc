"""Every tool that writes a single output file: a second run replaces its own output; a file the tool
did not write (a person's notes, another tool's output, its own output edited since), a folder or a
link at the output path is kept and refused in one error line naming the flag and the path; an output
that is one of the tool's inputs is refused. Each tool runs as its command line does (`run_main`)."""

from __future__ import annotations

import errno
import importlib
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from osd.analysis import analyze, online_replay, record, simulate
from osd.conversations import load_conversations
from osd.datafiles import (
    DataFileError,
    mark_path,
    read_mark,
    refuse_foreign_file,
    replacing,
    tmp_name,
    write_output,
)
from osd.paths import TINY_DRAFT_PATH, TINY_TEACHER_PATH, workload_path
from osd.user_errors import run_main

DATA_DIR = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def p(tmp_path_factory) -> SimpleNamespace:
    """A conversation file, a recording of it, a simulation of that recording and an online run's log."""
    root = tmp_path_factory.mktemp("single_outputs")
    p = SimpleNamespace(root=root, teacher=TINY_TEACHER_PATH, draft=TINY_DRAFT_PATH, conv=root / "conv.jsonl")
    records = load_conversations(workload_path("sql", "eval"))[:2]
    p.conv.write_text("".join(json.dumps(r) + "\n" for r in records))
    p.rec, p.sim, p.run = root / "rec", root / "sim", root / "run"
    record.main(["--target", str(p.teacher), "--conversations", str(p.conv), "--max_new_tokens", "4",
                 "--top_k", "4", "--output", str(p.rec)])  # fmt: skip
    simulate.main(
        ["--recording", str(p.rec), "--draft", str(p.draft), "--gamma", "2", "--output", str(p.sim)]
    )
    p.run.mkdir()
    entries = [{"step": i, "queries_served": i, "alpha": i / 10} for i in range(1, 5)]
    (p.run / "metrics.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))
    return p


# tool -> (module holding `main`, the writer's name in marks and errors, its command line writing to {out},
# the file of the output that the cases below put a foreign file at, the command line writing over an input,
# the error text of that)
TOOLS: dict[str, tuple[str, str, str, str, str, str]] = {
    "simulate": (
        simulate.__name__, simulate.TOOL, "--recording {rec} --draft {draft} --gamma 2 --output {out}", "{out}.txt",
        "--recording {rec} --draft {draft} --output {rec}", "--output {rec}.jsonl is the input file",
    ),
    "online_replay": (
        online_replay.__name__, online_replay.TOOL,
        "--recording {rec} --stream {conv} --draft {draft} --gamma 2 --out {out}.json", "{out}.json",
        "--recording {rec} --stream {conv} --draft {draft} --out {conv}", "--out {conv} is the input file",
    ),
    "analyze": (
        analyze.__name__, analyze.TOOL, "{sim}.jsonl --json {out}.json", "{out}.json",
        "{sim}.jsonl --json {sim}.jsonl", "--json {sim}.jsonl is the input file",
    ),
    "plots": (
        "osd.plots", "osd.plots", "{run} --out {out}.png", "{out}.png",
        "{run} --out {run}/metrics.jsonl", "--out {run}/metrics.jsonl is the input file",
    ),
    "token_counts": (
        "token_counts", "data/token_counts.py", "--data {conv} --tokenizer {teacher} --output {out}.json",
        "{out}.json", "--data {conv} --tokenizer {teacher} --output {conv}", "--output {conv} is the input file",
    ),
    "split_train_test": (
        "split_train_test", "data/split_train_test.py",
        "--input {conv} --eval_size 1 --train_output {out}.json --eval_output {out}_eval.json", "{out}_eval.json",
        "--input {conv} --eval_size 1 --train_output {conv} --eval_output {out}.json",
        "--train_output {conv} is the input file",
    ),
    "prepare_online": (
        "prepare_online", "data/prepare_online.py",
        "--kind abrupt --inputs a={conv} --lengths 2 --output {out}.json", "{out}.json",
        "--kind abrupt --inputs a={conv} --lengths 2 --output {conv}", "--output {conv} is the input file",
    ),
    "record": (
        record.__name__, "osd.analysis.record",
        "--target {teacher} --conversations {conv} --limit 1 --max_new_tokens 2 --output {out}", "{out}.jsonl",
        "--target {teacher} --conversations {conv} --output {root}/conv", "--output {conv} is the input file",
    ),
}  # fmt: skip


def run(tool: str, command: str, p: SimpleNamespace, out: Path, capsys, monkeypatch) -> tuple[int, str]:
    """(exit status, last stderr line) of `tool`'s command line, its paths filled in from `p` and `out`."""
    monkeypatch.syspath_prepend(str(DATA_DIR))
    main = importlib.import_module(TOOLS[tool][0]).main
    capsys.readouterr()
    code = run_main(lambda: main(command.format(**vars(p), out=out).split()), TOOLS[tool][1])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, (err.strip().splitlines() or [""])[-1]


def output_file(tool: str, p: SimpleNamespace, out: Path) -> Path:
    return Path(TOOLS[tool][3].format(**vars(p), out=out))


@pytest.mark.parametrize("tool", list(TOOLS))
def test_a_second_run_replaces_the_tools_own_output(tool, p, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    assert run(tool, TOOLS[tool][2], p, out, capsys, monkeypatch)[0] == 0
    target = output_file(tool, p, out)
    first = target.stat().st_ino
    code, err = run(tool, TOOLS[tool][2], p, out, capsys, monkeypatch)
    assert code == 0, err
    assert target.stat().st_ino != first  # written anew (renamed into place), not left as it was
    if tool != "record":  # a recording names its writer in its header instead
        assert read_mark(target)["tool"] == TOOLS[tool][1]
    assert not [f for f in tmp_path.iterdir() if f.name.endswith(".tmp")]  # no temporary file left


@pytest.mark.parametrize("tool", list(TOOLS))
def test_a_file_the_tool_did_not_write_is_kept(tool, p, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    target = output_file(tool, p, out)
    target.write_text("my notes\n")
    code, err = run(tool, TOOLS[tool][2], p, out, capsys, monkeypatch)
    assert code == 1
    assert f"{target} exists and {TOOLS[tool][1]} did not write it; choose another --" in err, err
    assert target.read_text() == "my notes\n"
    assert sorted(f.name for f in tmp_path.iterdir()) == [target.name]  # none of its other outputs either


@pytest.mark.parametrize("tool", [t for t in TOOLS if t != "record"])
def test_its_own_output_edited_since_is_kept(tool, p, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    assert run(tool, TOOLS[tool][2], p, out, capsys, monkeypatch)[0] == 0
    target = output_file(tool, p, out)
    with target.open("ab") as f:
        f.write(b"a line of mine\n")
    edited = target.read_bytes()
    code, err = run(tool, TOOLS[tool][2], p, out, capsys, monkeypatch)
    assert code == 1 and f"{target} was changed since {TOOLS[tool][1]} wrote it" in err, err
    assert target.read_bytes() == edited


@pytest.mark.parametrize("tool", ["plots", "token_counts"])
def test_another_tools_output_is_kept(tool, p, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    assert run("analyze", TOOLS["analyze"][2], p, out, capsys, monkeypatch)[0] == 0  # writes out.json
    written = (tmp_path / "out.json").read_bytes()
    command = TOOLS[tool][2].replace("{out}.png", "{out}.json")
    code, err = run(tool, command, p, out, capsys, monkeypatch)
    assert code == 1 and f"exists and {TOOLS[tool][1]} did not write it" in err, err
    assert (tmp_path / "out.json").read_bytes() == written


@pytest.mark.parametrize("kind", ["folder", "link"])
def test_a_folder_or_a_link_at_the_output_is_refused(kind, p, tmp_path, capsys, monkeypatch):
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere.json"
    elsewhere.write_text("[]\n")
    if kind == "folder":
        (tmp_path / "out.json").mkdir()
    else:
        (tmp_path / "out.json").symlink_to(elsewhere)
    code, err = run("analyze", TOOLS["analyze"][2], p, out, capsys, monkeypatch)
    assert (
        code == 1
        and f"--json {tmp_path / 'out.json'} is a {kind}, not a file osd.analysis.analyze wrote" in err
    ), err
    assert elsewhere.read_text() == "[]\n"


@pytest.mark.parametrize("tool", list(TOOLS))
def test_an_output_that_is_an_input_is_refused(tool, p, tmp_path, capsys, monkeypatch):
    before = {f: f.read_bytes() for f in p.root.rglob("*") if f.is_file()}
    code, err = run(tool, TOOLS[tool][4], p, tmp_path / "out", capsys, monkeypatch)
    assert code == 1 and TOOLS[tool][5].format(**vars(p)) in err, err
    assert {f: f.read_bytes() for f in p.root.rglob("*") if f.is_file()} == before


def test_the_mark_beside_an_output_is_hidden(p):
    assert mark_path(p.sim.with_name("sim.jsonl")).name == ".sim.jsonl.osd_written"
    assert read_mark(p.sim.with_name("sim.jsonl"))["tool"] == simulate.TOOL


def test_a_write_that_fails_midway_leaves_the_old_output_whole_and_replaceable(tmp_path, monkeypatch):
    """A kill or a full disk while the output is written: the old file stays whole (the new one is written
    beside it and renamed), and the next run may still replace it (its mark admits both contents)."""
    out = tmp_path / "out.json"
    write_output(out, "old\n", "--out", "a tool")

    write_bytes = Path.write_bytes

    def fail(path: Path, data: bytes) -> int:  # what a full disk does to the output's temporary file
        if path == tmp_name(out):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return write_bytes(path, data)

    monkeypatch.setattr(Path, "write_bytes", fail)
    with pytest.raises(OSError, match=f"No space left on device: '{out}'"):
        write_output(out, "new\n", "--out", "a tool")
    monkeypatch.undo()
    assert out.read_text() == "old\n"
    assert sorted(f.name for f in tmp_path.iterdir()) == [".out.json.osd_written", "out.json"]
    assert len(read_mark(out)["sha256"]) == 2  # the old content and the one that was being written
    write_output(out, "new\n", "--out", "a tool")
    assert out.read_text() == "new\n" and len(read_mark(out)["sha256"]) == 1
    with pytest.raises(DataFileError, match=f"--out {out} exists and another tool did not write it"):
        refuse_foreign_file(out, "--out", "another tool")


def test_replacing_removes_its_temporary_file_when_the_block_raises(tmp_path):
    out = tmp_path / "out.bin"
    out.write_bytes(b"old")
    with pytest.raises(RuntimeError), replacing(out) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("killed")
    assert sorted(f.name for f in tmp_path.iterdir()) == ["out.bin"] and out.read_bytes() == b"old"


def test_online_replay_saves_its_draft_only_into_a_folder_of_its_own(p, tmp_path, capsys, monkeypatch):
    folder = tmp_path / "saved"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine\n")
    command = "--recording {rec} --stream {conv} --draft {draft} --gamma 2 --save_draft {out}"
    code, err = run("online_replay", command, p, folder, capsys, monkeypatch)
    assert code == 1 and f"--save_draft {folder} holds files {online_replay.TOOL} did not write" in err, err
    assert sorted(f.name for f in folder.iterdir()) == ["notes.txt"]
    for _ in range(2):  # a new folder, then the same one again
        assert run("online_replay", command, p, tmp_path / "new", capsys, monkeypatch)[0] == 0
    assert (tmp_path / "new" / "model.safetensors").is_file()


def test_an_unwritable_folder_is_an_error_naming_the_output():
    """/proc takes no new files, whoever runs the test (root writes into read-only folders)."""
    out = Path("/proc") / f"osd_test_{os.getpid()}.json"
    if not Path("/proc/self").is_dir():
        pytest.skip("no /proc here")
    with pytest.raises(OSError, match=f"'{out}'"):
        write_output(out, "{}\n", "--out", "a tool")


def test_a_file_on_the_way_to_the_output_is_an_error_naming_both(tmp_path):
    (tmp_path / "afile").write_text("mine\n")
    with pytest.raises(
        OSError, match=f"cannot make its folder {tmp_path}/afile/sub .*'{tmp_path}/afile/sub/out.json'"
    ):
        write_output(tmp_path / "afile" / "sub" / "out.json", "{}\n", "--out", "a tool")
    assert (tmp_path / "afile").read_text() == "mine\n"


def test_a_replay_output_edited_since_is_kept_though_it_still_names_its_writer(
    p, tmp_path, capsys, monkeypatch
):
    """An --out that online_replay wrote is known by its "command" only while it has no mark: an edit of
    a marked one is kept, one written before marks existed is replaced."""
    out = tmp_path / "out"
    assert run("online_replay", TOOLS["online_replay"][2], p, out, capsys, monkeypatch)[0] == 0
    target = tmp_path / "out.json"
    edited = json.loads(target.read_text()) | {"note": "mine"}
    target.write_text(json.dumps(edited))
    code, err = run("online_replay", TOOLS["online_replay"][2], p, out, capsys, monkeypatch)
    assert code == 1 and "was changed since" in err, err
    assert json.loads(target.read_text()) == edited
    mark_path(target).unlink()  # as written before marks existed
    assert run("online_replay", TOOLS["online_replay"][2], p, out, capsys, monkeypatch)[0] == 0
    assert "note" not in json.loads(target.read_text())
