"""What every tool does with its files: read UTF-8 text naming the file and line of a bad byte;
never write an output over or into an input (a data file, a data or model folder), nor two outputs
over each other (`refuse_overwrite`, checked before any model loads); write a single output file
only where it is new or the same tool wrote it (`refuse_foreign_file`), whole or not at all
(`write_output`)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
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
    flag: str = "--output_dir",
) -> Path:
    """The folder `tool` writes `outputs` (names in it) into, created if missing. Refused when it would
    destroy an input (`refuse_overwrite`) or when it holds files (but `ignore`d ones, e.g. the run's lock)
    and `tool` did not claim it earlier; from an earlier run of `tool` only its `outputs` are removed,
    anything else there stays. `flag` names the folder in errors."""
    refuse_overwrite({flag: path}, inputs)
    out, owner = Path(path), Path(path) / OWNER_FILE
    if out.exists() and not out.is_dir():
        raise DataFileError(f"{flag} {path} is a file, not a folder; choose an empty or new folder")
    if out.is_dir() and any(p.name not in ignore for p in out.iterdir()):
        if not owner.is_file() or owner.read_text().strip() != tool:
            raise DataFileError(
                f"{flag} {path} holds files {tool} did not write; choose an empty or new folder"
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
    """Write UTF-8 text whole or not at all (creating parent folders); a failure (a full disk, a
    read-only folder, a parent that is a file) raises an OSError that names the file."""
    write_bytes(path, text.encode("utf-8"))


def write_bytes(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` whole or not at all (`replacing`), creating parent folders."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # a file where a folder on the way should be
        raise OSError(e.errno, f"cannot make its folder {path.parent} ({e.strerror})", str(path)) from e
    try:
        with replacing(path) as tmp:
            tmp.write_bytes(data)
    except OSError as e:
        if e.filename is not None and e.filename != str(tmp_name(path)):
            raise
        raise OSError(e.errno, e.strerror, str(path)) from e


def tmp_name(path: Path) -> Path:
    """The temporary file beside `path` that `replacing` writes first (hidden, per process)."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


@contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """A temporary path beside `path` for the block to write; renamed over `path` (`os.replace`, atomic)
    when the block ends, removed when it raises: a kill or an error never leaves half a file at `path`."""
    path = Path(path)
    tmp = tmp_name(path)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


MARK_SUFFIX = ".osd_written"  # beside an output file, hidden: the tool that wrote it and its content


def mark_path(path: str | Path) -> Path:
    """The hidden file beside the output `path` that names the tool that wrote it (`write_output`)."""
    path = Path(path)
    return path.with_name(f".{path.name}{MARK_SUFFIX}")


def file_sha256(path: Path) -> str:
    """The hex sha256 of the file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_mark(path: Path) -> dict:
    """The mark beside `path` ({"tool": ..., "sha256": [...]}), or {} when missing or unreadable."""
    try:
        mark = json.loads(mark_path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return mark if isinstance(mark, dict) else {}


def refuse_foreign_file(
    path: str | Path, flag: str, tool: str, own: Callable[[Path], bool] | None = None
) -> None:
    """Raise unless `tool` may write the single output file `path` (given with `flag`): nothing is there
    yet, or `tool` wrote the file (its mark names `tool` and the file's content, unchanged since), or,
    unmarked, `own(path)` recognises it as `tool`'s (a format that names its writer). Anything else
    there (a file another tool or a person wrote, one edited since, a folder, a link) is refused."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return
    if path.is_symlink() or not path.is_file():
        kind = "a link" if path.is_symlink() else "a folder" if path.is_dir() else "not a regular file"
        raise DataFileError(f"{flag} {path} is {kind}, not a file {tool} wrote; choose another {flag}")
    mark = read_mark(path)
    if mark.get("tool") == tool:
        if file_sha256(path) in mark.get("sha256", []):
            return
        raise DataFileError(
            f"{flag} {path} was changed since {tool} wrote it; choose another {flag} or move the file away"
        )
    if own is None or not own(path):
        raise DataFileError(
            f"{flag} {path} exists and {tool} did not write it; choose another {flag} or move the file away"
        )


def write_output(
    path: str | Path, data: str | bytes, flag: str, tool: str, own: Callable[[Path], bool] | None = None
) -> Path:
    """Write the output file `path` of `tool` whole or not at all, after `refuse_foreign_file`, and mark
    it as `tool`'s so that a later run of `tool` may replace it. Returns the path."""
    path = Path(path)
    refuse_foreign_file(path, flag, tool, own)
    data = data.encode("utf-8") if isinstance(data, str) else data
    new = hashlib.sha256(data).hexdigest()
    old = [file_sha256(path)] if path.is_file() else []
    try:  # the mark admits the old content and the new one while the file is replaced (a kill in between)
        write_text(mark_path(path), json.dumps({"tool": tool, "sha256": [*old, new]}) + "\n")
    except OSError as e:  # named as the output: the mark is the tool's own business
        raise OSError(e.errno, e.strerror, str(path)) from e
    write_bytes(path, data)
    write_text(mark_path(path), json.dumps({"tool": tool, "sha256": [new]}) + "\n")
    return path
