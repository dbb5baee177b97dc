"""What every tool does with its files: read UTF-8 text naming the file and line of a bad byte, and
never write an output over or into an input (a data file, a data or model folder), nor two outputs
over each other: one rule, `refuse_overwrite`, checked before any model loads."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


class DataFileError(ValueError):
    """A data file cannot be read as the tool expects, or an output would replace an input."""


def read_text(path: str | Path) -> str:
    """The file's text (UTF-8, an optional BOM dropped); raises naming the file and line of a non-UTF-8 byte."""
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise DataFileError(
            f"{path}, line {line}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}); "
            "re-save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)"
        ) from None


def json_lines(text: str, path: str | Path, hint: str, error: type[ValueError] = DataFileError) -> list[Any]:
    """The values of JSON-lines `text` read from `path` (blank lines skipped); a line that is not JSON
    raises `error` naming the file and line, then `hint`."""
    values = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            values.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise error(f"{path}, line {number}: not valid JSON ({e.msg}); {hint}") from None
    return values


def refuse_overwrite(outputs: Mapping[str, str | Path], inputs: Mapping[str, str | Path | None]) -> None:
    """Raise, before anything is written, when an output (named by its flag) would replace an input:
    it is an input file or folder, lies inside an input folder (a model, a data set), or holds an
    input folder; or when two outputs are the same file. Outputs and inputs are named by their flags;
    paths are resolved (symlinks, `..`); inputs that are not on this disk (hub names) or None are skipped.
    An input file inside an output folder is allowed (a run folder may hold its stream)."""
    sources = {
        Path(p).resolve(): (flag, Path(p)) for flag, p in inputs.items() if p is not None and Path(p).exists()
    }
    seen: dict[Path, str] = {}
    for flag, out in outputs.items():
        target = Path(out).resolve()
        for source, (in_flag, given) in sources.items():
            kind = "folder" if source.is_dir() else "file"
            if target == source:
                where = f"is the input {kind} {given} ({in_flag})"
            elif target.is_relative_to(source):
                where = f"is inside the input folder {given} ({in_flag})"
            elif kind == "folder" and source.is_relative_to(target):
                where = f"holds the input folder {given} ({in_flag})"
            else:
                continue
            raise DataFileError(
                f"{flag} {out} {where}: writing there would destroy the input; choose another output path"
            )
        if target in seen:
            raise DataFileError(f"{flag} {out} and {seen[target]} are the same file; choose distinct outputs")
        seen[target] = f"{flag} {out}"


OWNER_FILE = ".osd_owner"  # in an output folder: the tool that writes it


def claim_output_dir(
    path: str | Path,
    tool: str,
    outputs: Sequence[str],
    inputs: Mapping[str, str | Path | None],
    ignore: Sequence[str] = (),
) -> Path:
    """The folder `tool` writes `outputs` (names in it) into, created if missing. Refused when it would
    destroy an input (`refuse_overwrite`) or when it holds files (but `ignore`d ones, e.g. the run's lock)
    and `tool` did not claim it earlier; from an earlier run of `tool` only its `outputs` are removed,
    anything else there stays."""
    refuse_overwrite({"--output_dir": path}, inputs)
    out, owner = Path(path), Path(path) / OWNER_FILE
    if out.is_dir() and any(p.name not in ignore for p in out.iterdir()):
        if not owner.is_file() or owner.read_text().strip() != tool:
            raise DataFileError(
                f"--output_dir {path} holds files {tool} did not write; choose an empty or new folder"
            )
        for name in outputs:
            old = out / name
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old)
            elif old.exists() or old.is_symlink():
                old.unlink()
    out.mkdir(parents=True, exist_ok=True)
    owner.write_text(tool + "\n")
    return out


def write_text(path: str | Path, text: str) -> None:
    """Write UTF-8 text (creating parent folders); a failure (a full disk, a read-only folder, a
    parent that is a file) raises an OSError that names the file."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        if e.filename is not None:
            raise
        raise OSError(e.errno, e.strerror, str(path)) from e
