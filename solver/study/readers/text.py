"""Reading a batch of lengths from text: JSON, JSONL, CSV or whitespace-separated ints.

The text formats of :mod:`~seqpart.solver.study.readers` (which also reads parquet and
Hugging Face datasets, and is what the CLI and the studies call). Errors are
:class:`UsageError` with a one-line message that names the file, and where it can, the row,
the column and the cell.
"""

from __future__ import annotations

import csv
import io
import json
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import UsageError
from .fields import choose_fields, lengths_from_records, summed


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


Say = Callable[[str], None]


def _is_int(cell: str) -> bool:
    try:
        int(cell.strip())
    except ValueError:
        return False
    return True


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
    text: str, name: str, fields: Sequence[str] = (), say: Say | None = None
) -> list[Any] | np.ndarray:
    """Lengths from JSON, JSONL, CSV, or whitespace-separated ints.

    JSON: a list of token counts, a list of token-id lists, a list of objects (records), an
    object with ``lengths``, or an object of equal-length lists (columns). JSONL: one count,
    token-id list or object per line. Records and columns take their field(s) by
    :func:`~seqpart.solver.study.readers.fields.choose_fields` (``fields`` summed). A plain JSON
    list's values are returned as parsed (the solver names a float or a bool precisely); a list
    of plain positive ints is returned as an int64 array (read without building Python ints:
    10^6 lengths in ~30 ms instead of ~150). CSV cells must be integers (or JSON lists of token
    ids). A UTF-8 byte-order mark is ignored.
    """
    stripped = text.lstrip("\ufeff").strip()
    if not stripped:
        raise UsageError(
            f"{name} is empty: expected a JSON list, a JSON object with 'lengths', JSONL or CSV"
        )
    if stripped[0] in "[{":
        fast = None if fields else _int_list(stripped)
        if fast is not None:
            return fast
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as err:
            if err.msg == "Extra data" or name.endswith((".jsonl", ".ndjson")):
                return _parse_jsonl(stripped, name, fields, say)
            raise UsageError(
                f"{name} is not valid JSON (line {err.lineno}, column {err.colno}: {err.msg})"
            ) from None
        return _from_json(data, name, fields, say)
    return _parse_table(stripped, name, fields, say)


def _from_json(data: Any, name: str, fields: Sequence[str], say: Say | None) -> list[Any]:
    if isinstance(data, dict):
        if "lengths" in data and not fields:
            data = data["lengths"]
            if not isinstance(data, list):
                raise UsageError(f"{name}: 'lengths' must be a JSON list, got {type(data).__name__}")
            return _from_list(data, name, fields, say)
        columns = {k: v for k, v in data.items() if isinstance(v, list)}
        sizes = {len(v) for v in columns.values()}
        if not columns or len(sizes) != 1:
            raise UsageError(f"{name}: a JSON object needs a 'lengths' list of token counts (or "
                             "lists of equal length, one per field)")
        names = list(columns)
        cols = choose_fields(names, fields, name, say)
        rows = [(f"record {i + 1}", [columns[names[c]][i] for c in cols])
                for i in range(sizes.pop())]
        return summed(rows, list(range(len(cols))), [f", field {names[c]!r}" for c in cols], name)
    return _from_list(data, name, fields, say)


def _from_list(data: list[Any], name: str, fields: Sequence[str], say: Say | None) -> list[Any]:
    """Records, token-id lists, or counts (returned as parsed, for the solver to check)."""
    if data and isinstance(data[0], dict):  # records (a stray non-object is named)
        return lengths_from_records(data, fields, name, say)
    if fields:
        raise UsageError(f"--field applies to records (objects) or tables; {name} is a plain list")
    if data and all(isinstance(x, list) for x in data):
        return [len(x) for x in data]  # token ids
    return data


def _parse_jsonl(text: str, name: str, fields: Sequence[str], say: Say | None) -> list[Any]:
    """One JSON value per line (blank lines skipped), then as a JSON list of them."""
    values, wheres = [], []
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            values.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise UsageError(f"{name} line {line_no} is not valid JSON (column {err.colno}: "
                             f"{err.msg}); JSONL needs one JSON value per line") from None
        wheres.append(f"line {line_no}")
    if values and isinstance(values[0], dict):
        return lengths_from_records(values, fields, name, say, wheres)
    return _from_list(values, name, fields, say)


def _parse_table(text: str, name: str, fields: Sequence[str], say: Say | None) -> list[int]:
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
        return _pick_columns(rows, name, fields, say)
    reader = csv.reader(io.StringIO(text), delimiter=delimiter)
    rows = []
    for row in reader:
        if any(c.strip() for c in row):
            rows.append((f"row {reader.line_num}", row))
    return _pick_columns(rows, name, fields, say)


def _pick_columns(
    rows: list[tuple[str, list[str]]], name: str, fields: Sequence[str], say: Say | None
) -> list[int]:
    first = rows[0][1]
    header = [c.strip() for c in first] if not all(_is_int(c) for c in first) else None
    body = rows[1:] if header is not None else rows
    if not body:
        raise UsageError(f"{name} has a header but no rows of lengths")
    if header is None and len(body) == 1 and not fields:  # "8,7,6": one line, one batch
        cells = [c for c in body[0][1] if c.strip()]
        return [int(c) for c in cells]
    width = max(len(r) for _, r in body)
    if header is not None:
        width = max(width, len(header))
    cols = choose_fields(header, fields, name, say, width)
    labels = []
    for col in cols:
        if header is not None and col < len(header):
            labels.append(f", column {header[col]!r}")
        else:
            labels.append(f", column {col + 1}" if width > 1 else "")
    return summed(body, cols, labels, name)


def load_text_lengths(
    path: str | None, fields: Sequence[str] = (), say: Say | None = None
) -> list[Any] | np.ndarray:
    """:func:`parse_lengths` of the text file at ``path`` (or stdin for ``-``/None)."""
    text, name = read_text(path)
    return parse_lengths(text, name, fields, say)
