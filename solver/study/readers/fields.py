"""Which field of a user's records holds the lengths, and how a cell becomes a token count.

Shared by every reader (CSV, JSON records, JSONL, parquet, Hugging Face datasets) so that the
same file in any format gives the same lengths, and the same messages. A length is either a
token count (an int) or a list of token ids (its length counts). Several fields are summed:
``--field prompt_length --field response_length`` (or ``prompt_length+response_length``) gives
each sequence's total, the length a trainer packs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ...errors import UsageError

Say = Callable[[str], None]

#: Field names that say "this is a length in tokens" (compared lower-case, with spaces and
#: dashes as underscores). With several fields and none given, the one such field is used.
LENGTH_COLUMNS = (
    "length", "lengths", "len", "tokens", "num_tokens", "n_tokens", "ntokens", "token_count",
    "total_tokens", "seq_len", "seqlen", "seq_length", "sequence_length", "response_length",
    "total_length", "num_tokens_total",
)
#: Field names that usually hold a list of token ids (its length is the sequence's length).
TOKEN_ID_COLUMNS = ("input_ids", "token_ids", "ids", "tokens")


def norm(name: str) -> str:
    """A field name compared loosely: lower case, spaces and dashes as underscores."""
    return "_".join(str(name).strip().lower().replace("-", " ").split())


def parse_fields(specs: str | Sequence[str] | None) -> tuple[str, ...]:
    """``--field`` values as a tuple of names: repeated flags and ``a+b`` both sum fields."""
    if specs is None:
        return ()
    if isinstance(specs, str):
        specs = [specs]
    out: list[str] = []
    for spec in specs:
        parts = [p.strip() for p in str(spec).split("+")]
        if not all(parts):
            raise UsageError(f"--field {spec!r}: use a field name, or names joined by '+' to sum them")
        out += parts
    return tuple(out)


def choose_fields(
    names: Sequence[str] | None, fields: Sequence[str], where: str, say: Say | None,
    width: int | None = None,
) -> list[int]:
    """The positions of the length fields among ``names`` (None: unnamed, ``width`` columns).

    Given ``fields``: each is matched exactly, then loosely, then (unnamed columns or a number)
    as a 1-based position. None given: the only field; else the one named like a length or like
    token ids; else an error that lists the fields and says how to pick. The choice is
    reported through ``say`` when there was one to make."""
    count = len(names) if names is not None else (width or 0)
    if fields:
        return [_find(names, f, where, count) for f in fields]
    if count == 1:
        if names is not None and say is not None and norm(names[0]) not in LENGTH_COLUMNS \
                + TOKEN_ID_COLUMNS:
            say(f"seqpart: {where}: using its only field {names[0]!r} for the lengths")
        return [0]
    if names is None:
        raise UsageError(f"{where} has {count} columns and no header: say which one holds the "
                         "lengths with --field NUMBER (1-based)")
    loose = [norm(n) for n in names]
    for known, kind in ((LENGTH_COLUMNS, "a length"), (TOKEN_ID_COLUMNS, "token ids")):
        hits = [i for i, n in enumerate(loose) if n in known]
        prompt = [n for n in names if norm(n).startswith("prompt") and norm(n).endswith(
            ("len", "length", "lengths", "tokens"))]
        if len(hits) == 1 and prompt and loose[hits[0]].startswith("response"):
            # A trainer packs prompt and response together: guessing one would be wrong.
            raise UsageError(
                f"{where} has {prompt[0]} and {names[hits[0]]}: a packed sequence is usually "
                f"both, --field {prompt[0]} --field {names[hits[0]]} (or pick one with --field)")
        if len(hits) == 1:
            if say is not None:
                say(f"seqpart: {where}: using field {names[hits[0]]!r} for the lengths "
                    f"(of {', '.join(names)}; --field picks another, --field A --field B sums)")
            return hits
        if len(hits) > 1:
            raise UsageError(
                f"{where} has several fields ({', '.join(names)}) and "
                f"{', '.join(names[i] for i in hits)} are all named like {kind}: pick one with "
                "--field NAME (or sum them: --field A --field B)")
    raise UsageError(
        f"{where} has several fields ({', '.join(names)}) and none is named like a length "
        f"({', '.join(LENGTH_COLUMNS[:5])}, ...) or token ids ({', '.join(TOKEN_ID_COLUMNS[:2])}, "
        "...): pick one with --field NAME, or sum several, e.g. --field prompt_length "
        "--field response_length")


def _find(names: Sequence[str] | None, field: str, where: str, count: int) -> int:
    if names is not None:
        if field in names:
            return list(names).index(field)
        loose = [norm(n) for n in names]
        if norm(field) in loose:
            return loose.index(norm(field))
    if field.isdigit() and 1 <= int(field) <= count:
        return int(field) - 1
    known = f"fields: {', '.join(names)}" if names is not None else f"{count} unnamed columns"
    raise UsageError(f"--field {field!r} not found in {where} ({known}); give a field name or a "
                     "1-based column number")


def cell_length(value: Any) -> int | str:
    """A cell as a token count: an int as is, a list of token ids as its length, a numeric
    string (CSV) as its int, a JSON list in a string (CSV) as its length. Anything else
    returns the reason it is not a length (the caller adds where it is)."""
    if isinstance(value, bool):
        return f"{value!r} is a bool, not a token count"
    if isinstance(value, int):
        return value
    if hasattr(value, "__len__") and not isinstance(value, (str, bytes, dict)):
        return len(value)  # token ids (a list, tuple or numpy array)
    if hasattr(value, "dtype") and getattr(value.dtype, "kind", "") in "iu":
        return int(value)  # a numpy integer scalar
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text)
        except ValueError:
            pass
        if text.startswith("[") and text.endswith("]"):
            try:
                ids = json.loads(text)
            except json.JSONDecodeError:
                return f"cell {value!r} is not a JSON list of token ids"
            return len(ids)
        return _why_not_int(text)
    if value is None:
        return "the value is missing; every record needs a token count (drop or fill it)"
    if isinstance(value, float):
        if math.isnan(value):
            return "the value is a missing value (NaN); drop or fill that record"
        return f"{value!r} is not an integer; token counts are whole numbers"
    if isinstance(value, dict):
        return "the value is an object; name a field inside it with --field, or flatten it"
    return f"{value!r} ({type(value).__name__}) is not a token count"


def _why_not_int(cell: str) -> str:
    if not cell:
        return "the cell is empty; every row needs a token count"
    try:
        number = float(cell)
    except ValueError:
        return (f"cell {cell!r} is not a number; token counts are integers (a text field "
                "needs tokenizing first; drop or fill missing rows)")
    if number != number:  # NaN
        return f"cell {cell!r} is a missing value; drop or fill that row"
    return f"cell {cell!r} is not an integer; token counts are whole numbers"


def summed(
    rows: Iterable[tuple[str, Sequence[Any]]], cols: Sequence[int], labels: Sequence[str],
    name: str,
) -> list[int]:
    """Per row, the sum of the chosen cells as token counts; the first bad cell raises a
    :class:`UsageError` naming the file, the row, the field and the value."""
    out = []
    for where, row in rows:
        total = 0
        for col, label in zip(cols, labels, strict=True):
            value = row[col] if col < len(row) else ""
            got = cell_length(value)
            if isinstance(got, str):
                raise UsageError(f"{name} {where}{label}: {got}")
            total += got
        out.append(total)
    return out


def lengths_from_records(
    records: Sequence[Any], fields: Sequence[str], name: str, say: Say | None,
    wheres: Sequence[str] | None = None,
) -> list[int]:
    """Lengths from a list of JSON objects (one per sequence), by :func:`choose_fields` on
    the first record's keys; a record that lacks a chosen field is an error naming it.
    ``wheres`` names each record in messages (default "record 1", "record 2", ...)."""
    where = list(wheres) if wheres is not None else [f"record {i}" for i in range(1, len(records) + 1)]
    first = records[0]
    if not isinstance(first, dict):
        raise UsageError(f"{name} {where[0]} is {type(first).__name__}, not an object")
    names = list(first)
    if not names:
        raise UsageError(f"{name} {where[0]} is an empty object: it has no length field")
    cols = choose_fields(names, fields, name, say)
    chosen = [names[c] for c in cols]
    rows = []
    for here, record in zip(where, records, strict=True):
        if not isinstance(record, dict):
            raise UsageError(f"{name} {here} is {type(record).__name__}, not an object like "
                             f"{where[0]}")
        missing = [f for f in chosen if f not in record]
        if missing:
            raise UsageError(f"{name} {here} has no field {missing[0]!r} (its fields: "
                             f"{', '.join(record) or 'none'})")
        rows.append((here, [record[f] for f in chosen]))
    labels = [f", field {f!r}" for f in chosen]
    return summed(rows, list(range(len(chosen))), labels, name)
