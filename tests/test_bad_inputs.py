"""The bad-input catalogue (issue 24): each case runs a tool's `main` as its command line does
(`osd.user_errors.run_main`) on the tiny pair and checks that it ends with one error line naming the
file, flag or model, the stated exit status, no traceback, and every input file untouched.

Five cases once lost data or gave a wrong result with exit status 0: `record` and `simulate` wrote
over their input (defects 1, 2), `osd.train` replaced the teacher's weights (defect 4); the other
two (a second run in a live folder, a partial answer file of another input) are tested with their
tools (tests/distill/test_run_lock.py, tests/data/test_generate_answer.py). The rest were raw
tracebacks or `nan`/`[]` with exit status 0.
"""

from __future__ import annotations

import importlib
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from osd.analysis import analyze, record, simulate
from osd.conversations import load_conversations
from osd.datafiles import tmp_name
from osd.paths import TINY_DRAFT_PATH, TINY_TEACHER_PATH, workload_path
from osd.user_errors import run_main

DATA_DIR = Path(__file__).resolve().parents[1] / "data"
DEV_FULL = Path("/dev/full")  # every write to it fails with ENOSPC: a full disk without filling one


@pytest.fixture(scope="module")
def p(tmp_path_factory) -> SimpleNamespace:
    """Copies of the tiny pair, a conversation file, a recording of it, and broken variants of each."""
    root = tmp_path_factory.mktemp("bad_inputs")
    p = SimpleNamespace(root=root, teacher=root / "teacher", draft=root / "draft", afile=root / "afile")
    shutil.copytree(TINY_TEACHER_PATH, p.teacher)
    shutil.copytree(TINY_DRAFT_PATH, p.draft)
    records = load_conversations(workload_path("sql", "eval"))[:2]
    p.conv = root / "conv.jsonl"
    p.conv.write_text("".join(json.dumps(r) + "\n" for r in records))
    p.datadir = root / "datadir"
    p.datadir.mkdir()
    shutil.copy(p.conv, p.datadir / "train.jsonl")
    p.topic = root / "topic.json"
    p.topic.write_text(json.dumps([{**records[0], "topic": 3}]))
    p.afile.write_text("not a folder")
    (root / "notes.jsonl").write_text("my notes\n")
    p.rec = root / "rec"
    record.main(["--target", str(p.teacher), "--conversations", str(p.conv), "--limit", "1",
                 "--max_new_tokens", "4", "--output", str(p.rec)])  # fmt: skip
    lines = (root / "rec.jsonl").read_text().splitlines(keepends=True)
    p.torn, p.empty = root / "torn.jsonl", root / "empty.jsonl"
    p.torn.write_text(lines[0] + lines[1][: len(lines[1]) // 2])  # killed while writing the prompt line
    p.empty.write_text(lines[0])  # what `record --limit 0` wrote
    p.truncated = root / "truncated"
    shutil.copytree(p.draft, p.truncated)
    with open(p.truncated / "model.safetensors", "r+b") as f:
        f.truncate(1000)
    p.notok = root / "notok"
    p.notok.mkdir()
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        shutil.copy(p.draft / name, p.notok / name)
    p.small = root / "small"
    draft = AutoModelForCausalLM.from_pretrained(p.draft)
    draft.resize_token_embeddings(draft.get_input_embeddings().num_embeddings - 100)
    draft.save_pretrained(p.small)
    AutoTokenizer.from_pretrained(p.draft).save_pretrained(p.small)
    return p


# tool -> (module holding `main`, the name its errors carry); data scripts are imported from data/
TOOLS = {
    "train": ("osd.train", "osd.train"),
    "record": (record.__name__, record.__name__),
    "simulate": (simulate.__name__, simulate.__name__),
    "analyze": (analyze.__name__, analyze.__name__),
    "generate_answer": ("generate_answer", "generate_answer.py"),
    "prepare_online": ("prepare_online", "prepare_online.py"),
    "clean_gsm8k": ("clean_gsm8k", "clean_gsm8k.py"),
    "online_demo": ("osd.demo.online_demo", "osd.demo.online_demo"),
}
# command lines and expected error texts name the fixture's paths as {teacher}, {conv}, ...
TRAIN = "--student_model_path {draft} --teacher_model_path {teacher} --data_path {conv} --report_to none --max_steps 1"
RECORD = "--target {teacher} --conversations {conv}"
SIMULATE = "--draft {draft} --output {root}/sim --recording"
# id -> (tool, command line, exit status, texts the error line holds)
CASES: dict[str, tuple[str, str, int, tuple[str, ...]]] = {
    "record over its conversations (defect 1)": (
        "record", f"{RECORD} --output {{root}}/conv", 1, ("--output {conv} is the input file {conv} (--conversations)",)
    ),
    "simulate over its recording (defect 2)": (
        "simulate", "--draft {draft} --recording {rec} --output {rec}", 1,
        ("--output {rec}.jsonl is the input file {rec}.jsonl (--recording)",),
    ),
    "train into the teacher's folder with --overwrite_output_dir (defect 4)": (
        "train", f"{TRAIN} --output_dir {{teacher}} --overwrite_output_dir True", 1,
        ("--output_dir {teacher} is the input folder {teacher} (--teacher_model_path)",),
    ),
    "train into a folder inside the draft's": (
        "train", f"{TRAIN} --output_dir {{draft}}/run", 1,
        ("--output_dir {draft}/run is inside the input folder {draft} (--student_model_path)",),
    ),
    "train into its data folder (could never resume: 'sha256 changed')": (
        "train", f"{TRAIN} --data_path {{datadir}} --output_dir {{datadir}}", 1,
        ("--output_dir {datadir} is the input folder {datadir} (--data_path)",),
    ),
    "train with --output_dir a file": (
        "train", f"{TRAIN} --output_dir {{afile}}", 1, ("--output_dir {afile} is a file, not a folder",)
    ),
    "train with --output_dir under a file (not writable)": (
        "train", f"{TRAIN} --output_dir {{afile}}/run", 1,
        ("--output_dir {afile}/run: cannot write there (Not a directory)",),
    ),
    "train with --output_dir in a read-only file system": (
        "train", f"{TRAIN} --output_dir /sys/osd_run", 1, ("--output_dir /sys/osd_run: cannot write there",)
    ),
    "train with a truncated model.safetensors": (
        "train", f"{TRAIN} --output_dir {{root}}/r1 --student_model_path {{truncated}}", 1,
        ("{truncated}: cannot load its model (Error while deserializing header",),
    ),
    "train with a hub model that is not cached, offline": (
        "train", f"{TRAIN} --output_dir {{root}}/r2 --teacher_model_path nobody/no-model", 1,
        ("nobody/no-model: cannot load its tokenizer (", "couldn't find them in the cached files"),
    ),
    "train on a numeric topic (dropped out of per-group alpha)": (
        "train", f"{TRAIN} --output_dir {{root}}/r3 --data_path {{topic}}", 1,
        ("{topic}, record 0: 'topic' is 3 (int); a grouping field is a string",),
    ),
    "record --limit 0 (then simulate said alpha nan)": (
        "record", f"{RECORD} --limit 0 --output {{root}}/zero", 2, ("argument --limit: 0; expected at least 1",)
    ),
    "record over a file it did not write (issue 49 probe: replaced, exit status 0)": (
        "record", f"{RECORD} --limit 1 --output {{root}}/notes", 1,
        ("--output {root}/notes.jsonl exists and osd.analysis.record did not write it; choose another --output",),
    ),
    "record on a full disk": (
        "record", f"{RECORD} --limit 1 --max_new_tokens 2 --output {{root}}/full", 1,
        ("No space left on device: '{root}/full.jsonl'",),
    ),
    "simulate an empty recording": ("simulate", f"{SIMULATE} {{empty}}", 1, ("{empty}: a header and no prompt records",)),
    "simulate a torn recording (was JSONDecodeError)": (
        "simulate", f"{SIMULATE} {{torn}}", 1, ("{torn}, line 2: not valid JSON",)
    ),
    "simulate with a smaller-vocabulary draft (was IndexError)": (
        "simulate", f"{SIMULATE} {{rec}} --draft {{small}}", 1,
        ("draft {small} embeds ", "token ids, but prompt sql_eval_0 of the recording holds token id"),
    ),
    "simulate with a draft without tokenizer": (
        "simulate", f"{SIMULATE} {{rec}} --draft {{notok}}", 1,
        ("{notok}: cannot load its tokenizer (", "name the target's tokenizer with --tokenizer"),
    ),
    "analyze a recording (was KeyError: 'prompt')": (
        "analyze", "{rec}.jsonl", 1, ("{rec}.jsonl: a recording (osd-recording/1), not per-iteration rows",)
    ),
    "analyze with --json over its input": (
        "analyze", "{rec}.jsonl --json {rec}.jsonl", 1, ("--json {rec}.jsonl is the input file {rec}.jsonl (path)",)
    ),
    "generate_answer into the model's folder": (
        "generate_answer", "--filename {conv} --model {teacher} --output {teacher}/a.json", 1,
        ("--output {teacher}/a.json is inside the input folder {teacher} (--model)",),
    ),
    "prepare_online --n -5 (wrote [])": (
        "prepare_online", "--kind mix --inputs a={conv} --n -5 --output {root}/m.json", 1,
        ("--n must be >= 1, got -5",),
    ),
    "the online demo into a folder holding its models (it empties its --output_dir)": (
        "online_demo", "--target {teacher} --draft {draft} --output_dir {root}", 1,
        ("--output_dir {root} holds the input folder {teacher} (--target)",),
    ),
    "a clean script writing into its raw folder": (
        "clean_gsm8k", "--raw_path {datadir} --output_dir {datadir} --splits train", 1,
        ("is inside the input folder {datadir} (--raw_path)",),
    ),
}  # fmt: skip


def writable(folder: Path) -> bool:
    try:
        folder.mkdir()
    except OSError:
        return False
    folder.rmdir()
    return True


def snapshot(root: Path) -> dict[Path, tuple[int, int]]:
    return {f: (f.stat().st_size, f.stat().st_mtime_ns) for f in root.rglob("*") if f.is_file()}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_error_line_and_inputs_are_untouched(case, p, capsys, monkeypatch):
    tool, command, status, expected = CASES[case]
    if case == "record on a full disk":
        if not DEV_FULL.exists():
            pytest.skip("no /dev/full here")
        tmp = tmp_name(p.root / "full.jsonl")  # the output is written there first, then renamed
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(DEV_FULL)
    if case.endswith("read-only file system") and writable(Path("/sys/osd_run")):
        pytest.skip("/sys is writable here")
    monkeypatch.syspath_prepend(str(DATA_DIR))
    module, prog = TOOLS[tool]
    main = importlib.import_module(module).main
    before = snapshot(p.root)
    capsys.readouterr()
    try:
        code = run_main(lambda: main(command.format(**vars(p)).split()), prog)
    except SystemExit as e:  # argparse's usage errors
        code = e.code
    err = capsys.readouterr().err
    assert code == status, err[-3000:]
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"{prog}: error: ") if status == 1 else ": error: argument" in last, last
    for text in expected:
        assert text.format(**vars(p)) in last, last
    after = snapshot(p.root)
    assert {f: after.get(f) for f in before} == before  # no input written over, none removed
