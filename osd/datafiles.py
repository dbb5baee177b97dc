"""What every data tool does with its files: read UTF-8 text naming the file and line of a bad
byte, and never write an output over an input (or two outputs over each other)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path


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


def refuse_overwrite(outputs: Mapping[str, str | Path], inputs: Iterable[str | Path]) -> None:
    """Raise when an output (named by its flag) is an input file or another output (paths resolved)."""
    sources = {Path(p).resolve(): Path(p) for p in inputs}
    seen: dict[Path, str] = {}
    for flag, out in outputs.items():
        target = Path(out).resolve()
        if target in sources:
            raise DataFileError(
                f"{flag} {out} is the input file {sources[target]}: writing it would destroy the input; "
                "choose another output path"
            )
        if target in seen:
            raise DataFileError(f"{flag} {out} and {seen[target]} are the same file; choose distinct outputs")
        seen[target] = f"{flag} {out}"
