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
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from seqpart.solver.errors import UsageError


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


#: Column names that say "this is a length in tokens" (compared lower-case, with spaces and
#: dashes as underscores). With several columns and no --column, one of these is used.
LENGTH_COLUMNS = (
    "length", "lengths", "len", "tokens", "num_tokens", "n_tokens", "ntokens", "token_count",
    "total_tokens", "seq_len", "seqlen", "seq_length", "sequence_length", "response_length",
    "total_length", "num_tokens_total",
)

Say = Callable[[str], None]


def _is_int(cell: str) -> bool:
    try:
        int(cell.strip())
    except ValueError:
        return False
    return True


def _norm(header: str) -> str:
    return "_".join(header.strip().lower().replace("-", " ").split())


#: What the fast path reads: digits, commas and JSON's whitespace. Anything else (a sign, a
#: decimal point, a quote, ``true``) goes to ``json.loads``, so the solver can name it.
_FAST_BYTES = b"0123456789, \t\n\r"
_SPACE = b" \t\n\r"


def _int_list(stripped: str) -> np.ndarray | None:
    """A JSON list of positive ints with at most 18 digits each, parsed in C into an int64
    array (json.loads builds 10^6 Python ints, then the solver converts them: 4x slower).
    None when the text is anything else: then ``json.loads`` parses it and errors are
    reported as before. Exact: every value read is below 10^18 < 2**63 and is checked to be
    a whole JSON number (no leading zero, no empty or extra field)."""
    if len(stripped) < 3 or stripped[0] != "[" or stripped[-1] != "]":
        return None
    body = stripped[1:-1]
    try:
        raw = body.encode("ascii")
    except UnicodeEncodeError:
        return None
    if raw.translate(None, _FAST_BYTES):
        return None
    compact = raw.translate(None, _SPACE)
    # A field starting with 0 is a zero (not a length) or a leading zero (not JSON).
    if not compact or compact[:1] in (b",", b"0") or compact[-1:] == b"," or b",0" in compact:
        return None
    with warnings.catch_warnings():
        # numpy warns (or, in newer versions, raises) when it stops before the end of the
        # text: "1,2 3" and "1,,2" are not JSON lists.
        warnings.simplefilter("error")
        try:
            values = np.fromstring(body, dtype=np.int64, sep=",")
        except (ValueError, DeprecationWarning, AttributeError):  # AttributeError: a numpy
            return None  # without fromstring; json.loads still reads the file
    if len(values) != compact.count(b",") + 1 or not len(values) or values.max() >= 10**18:
        return None  # a field left unread, or one that may have been clipped at int64
    return values


def parse_lengths(
    text: str, name: str, column: str | None = None, say: Say | None = None
) -> list[Any] | np.ndarray:
    """Lengths from a JSON list, a JSON object with ``lengths``, CSV, or whitespace-separated ints.

    JSON values are returned as parsed (the solver names a float or a bool precisely); a JSON
    list of plain positive ints is returned as an int64 array (read without building Python
    ints: 10^6 lengths in ~30 ms instead of ~150). CSV cells must be integers. A CSV with
    several columns needs ``column``, or a header that names one length column
    (:data:`LENGTH_COLUMNS`); the choice is reported through ``say``. A UTF-8 byte-order mark
    is ignored.
    """
    stripped = text.lstrip("\ufeff").strip()
    if not stripped:
        raise UsageError(
            f"{name} is empty: expected a JSON list, a JSON object with 'lengths', or CSV"
        )
    if stripped[0] in "[{":
        if column is not None:
            raise UsageError("--column applies to CSV input, not JSON")
        fast = _int_list(stripped)
        if fast is not None:
            return fast
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
    return _parse_table(stripped, name, column, say)


def _parse_table(text: str, name: str, column: str | None, say: Say | None) -> list[int]:
    first_line = text.splitlines()[0]
    if "\t" in first_line:
        delimiter = "\t"
    elif "," in text:
        delimiter = ","
    elif ";" in first_line:
        delimiter = ";"
    else:  # plain ints, one per line or separated by spaces: one column
        rows: list[tuple[str, list[str]]] = []
        for line_no, line in enumerate(text.splitlines(), start=1):
            cells = line.split()
            rows += [(f"line {line_no}" if len(cells) == 1 else f"line {line_no} value {i}", [c])
                     for i, c in enumerate(cells, start=1)]
        return _pick_column(rows, name, column, say)
    reader = csv.reader(io.StringIO(text), delimiter=delimiter)
    rows = []
    for row in reader:
        if any(c.strip() for c in row):
            rows.append((f"row {reader.line_num}", row))
    return _pick_column(rows, name, column, say)


def _pick_column(
    rows: list[tuple[str, list[str]]], name: str, column: str | None, say: Say | None
) -> list[int]:
    first = rows[0][1]
    header = [c.strip() for c in first] if not all(_is_int(c) for c in first) else None
    body = rows[1:] if header is not None else rows
    if not body:
        raise UsageError(f"{name} has a header but no rows of lengths")
    if header is None and len(body) == 1 and column is None:  # "8,7,6": one line, one batch
        cells = [c for c in body[0][1] if c.strip()]
        return [int(c) for c in cells]
    width = max(len(r) for _, r in body)
    if header is not None:
        width = max(width, len(header))
    if column is not None:
        if header is not None and column in header:
            col = header.index(column)
        elif header is not None and _norm(column) in [_norm(h) for h in header]:
            col = [_norm(h) for h in header].index(_norm(column))
        elif column.isdigit() and 1 <= int(column) <= width:
            col = int(column) - 1
        else:
            known = f"columns: {', '.join(header)}" if header else f"{width} unnamed columns"
            raise UsageError(f"--column {column!r} not found in {name} ({known}); "
                             "give a header name or a 1-based number")
    elif width == 1:
        col = 0
    elif header is None:
        raise UsageError(f"{name} has {width} columns and no header: say which one holds the "
                         "lengths with --column NUMBER (1-based)")
    else:
        named = [c for c, h in enumerate(header) if _norm(h) in LENGTH_COLUMNS]
        if len(named) != 1:
            which = (f"none is named like a length ({', '.join(LENGTH_COLUMNS[:5])}, ...)"
                     if not named else
                     f"{', '.join(header[c] for c in named)} are all named like lengths")
            raise UsageError(f"{name} has several columns ({', '.join(header)}) and {which}: "
                             "pick one with --column NAME")
        col = named[0]
    if header is not None and col < len(header):
        label = f", column {header[col]!r}"
    else:
        label = f", column {col + 1}" if width > 1 else ""
    values = []
    for where, row in body:
        cell = row[col].strip() if col < len(row) else ""
        if not _is_int(cell):
            raise UsageError(f"{name} {where}{label}: {_why_not_int(cell)}")
        values.append(int(cell))
    if column is None and width > 1 and header is not None and say is not None:
        say(f"seqpart: {name}: using column {header[col]!r} for the lengths "
            f"(of {', '.join(header)}; --column picks another)")
    return values


def _why_not_int(cell: str) -> str:
    if not cell:
        return "the cell is empty; every row needs a token count"
    try:
        number = float(cell)
    except ValueError:
        return (f"cell {cell!r} is not a number; token counts are integers (drop or fill "
                "missing rows)")
    if number != number:  # NaN
        return f"cell {cell!r} is a missing value; drop or fill that row"
    return f"cell {cell!r} is not an integer; token counts are whole numbers"


def load_lengths(
    path: str | None, column: str | None = None, say: Say | None = None
) -> list[Any] | np.ndarray:
    """:func:`parse_lengths` of the file at ``path`` (or stdin for ``-``/None)."""
    text, name = read_text(path)
    return parse_lengths(text, name, column, say)
