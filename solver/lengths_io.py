"""Reading a batch of lengths from a file or stdin: JSON, CSV or whitespace-separated ints.

The one place the package parses user files (the CLI and the study call it). Errors are
:class:`UsageError` with a one-line message that names the file, and where it can, the row,
the column and the cell.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path
from typing import Any


class UsageError(Exception):
    """Bad arguments or input: reported on one line, exit code 2."""


def read_text(path: str | None) -> tuple[str, str]:
    """The text of ``path``, or of stdin for ``-``/None; and a name for messages."""
    if path in (None, "-"):
        if sys.stdin is None or sys.stdin.isatty():
            raise UsageError("no input: give a file of lengths, or pipe them into stdin")
        return sys.stdin.read(), "<stdin>"
    file = Path(path)
    if file.is_dir():
        raise UsageError(f"{path} is a directory, not a file of lengths")
    try:
        return file.read_text(encoding="utf-8"), path
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not a text file (expected JSON or CSV)") from None
    except OSError as err:
        raise UsageError(f"{path}: cannot read it ({err.strerror})") from None


def _is_int(cell: str) -> bool:
    try:
        int(cell.strip())
    except ValueError:
        return False
    return True


def parse_lengths(text: str, name: str, column: str | None = None) -> list[Any]:
    """Lengths from a JSON list, a JSON object with ``lengths``, CSV, or whitespace-separated ints.

    JSON values are returned as parsed (the solver names a float or a bool precisely); CSV cells
    must be integers.
    """
    stripped = text.strip()
    if not stripped:
        raise UsageError(
            f"{name} is empty: expected a JSON list, a JSON object with 'lengths', or CSV"
        )
    if stripped[0] in "[{":
        if column is not None:
            raise UsageError("--column applies to CSV input, not JSON")
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as err:
            raise UsageError(
                f"{name} is not valid JSON (line {err.lineno}, column {err.colno}: {err.msg})"
            ) from None
        if isinstance(data, dict):
            if "lengths" not in data:
                raise UsageError(f"{name}: a JSON object needs a 'lengths' list of token counts")
            data = data["lengths"]
        if not isinstance(data, list):
            raise UsageError(f"{name}: 'lengths' must be a JSON list, got {type(data).__name__}")
        return data
    return _parse_table(stripped, name, column)


def _parse_table(text: str, name: str, column: str | None) -> list[int]:
    first_line = text.splitlines()[0]
    if "\t" in first_line:
        delimiter = "\t"
    elif "," in text:
        delimiter = ","
    elif ";" in first_line:
        delimiter = ";"
    else:  # plain ints, one per line or separated by spaces: one column
        cells = text.split()
        rows = [[c] for c in cells]
        return _pick_column(rows, name, column)
    reader = csv.reader(io.StringIO(text), delimiter=delimiter)
    rows = [row for row in reader if any(c.strip() for c in row)]
    return _pick_column(rows, name, column)


def _pick_column(rows: list[list[str]], name: str, column: str | None) -> list[int]:
    header = [c.strip() for c in rows[0]] if not all(_is_int(c) for c in rows[0]) else None
    body = rows[1:] if header is not None else rows
    if not body:
        raise UsageError(f"{name} has a header but no rows of lengths")
    if header is None and len(body) == 1 and column is None:  # "8,7,6": one line, one batch
        return [int(c) for c in body[0] if c.strip()]
    width = max(len(r) for r in body)
    if column is not None:
        if header is not None and column in header:
            col = header.index(column)
        elif header is not None and column.lower() in [h.lower() for h in header]:
            col = [h.lower() for h in header].index(column.lower())
        elif column.isdigit() and 1 <= int(column) <= width:
            col = int(column) - 1
        else:
            known = f"columns: {', '.join(header)}" if header else f"{width} unnamed columns"
            raise UsageError(f"--column {column!r} not found in {name} ({known}); "
                             "give a header name or a 1-based number")
    else:
        candidates = [c for c in range(width) if all(c < len(r) and _is_int(r[c]) for r in body)]
        if not candidates:
            raise UsageError(f"{name} has no column of integers: pick one with --column NAME")
        col = candidates[0]
    label = header[col] if header is not None and col < len(header) else f"column {col + 1}"
    values = []
    for line, row in enumerate(body, start=2 if header is not None else 1):
        cell = row[col].strip() if col < len(row) else ""
        if not _is_int(cell):
            raise UsageError(
                f"{name} row {line}, {label}: {cell!r} is not an integer token count"
            )
        values.append(int(cell))
    return values


def load_lengths(path: str | None, column: str | None = None) -> list[Any]:
    text, name = read_text(path)
    return parse_lengths(text, name, column)
