"""Reading a user's sequence lengths from any file they have: the one entry point.

``seqpart solve``, ``study --data`` and ``step --data`` all call :func:`load_lengths`, so a
file gives the same lengths (and the same plan) whatever command reads it. Formats:

- text (:mod:`~seqpart.solver.study.readers.text`): a JSON list of token counts or of token-id
  lists, a JSON list of objects, an object with ``lengths`` or of equal-length columns, JSONL,
  CSV/TSV, or whitespace-separated ints; stdin for ``-``;
- parquet (``.parquet``/``.pq``, or a file starting with parquet's magic bytes): the
  ``parquet`` extra (pyarrow), imported only here;
- a Hugging Face dataset saved with ``save_to_disk`` (a directory), or a dataset's ``.arrow``
  file: the ``datasets`` extra, imported only here.

Records and tables take the lengths from a field: ``fields`` names it (several are summed,
e.g. prompt and response lengths), or the one field named like a length or like token ids is
used (see :mod:`~seqpart.solver.study.readers.fields`). A field of token-id lists counts their lengths.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import UsageError
from .fields import Say, choose_fields, parse_fields, summed
from .text import load_text_lengths

__all__ = ["PARQUET_SUFFIXES", "load_lengths"]

PARQUET_SUFFIXES = (".parquet", ".pq")
_PARQUET_MAGIC = b"PAR1"


def load_lengths(
    path: str | None, fields: str | Sequence[str] | None = None, say: Say | None = None
) -> list[Any] | np.ndarray:
    """The lengths in ``path`` (stdin for ``-``/None): token counts, one per sequence.

    ``fields``: the field(s) holding the lengths (a name, a list of names summed, or
    ``"a+b"``); None lets a field named like a length be found. Raises :class:`UsageError`
    with a one-line message naming the file and, where it can, the row, the field and the value;
    a missing optional dependency is named with the ``pip install`` that adds it."""
    notes: list[str] = []  # which field was used: said once the values have been read
    values = _load(path, parse_fields(fields), notes.append)
    for note in notes if say is not None else ():
        say(note)
    return values


def _load(path: str | None, wanted: tuple[str, ...], say: Say) -> list[Any] | np.ndarray:
    if path in (None, "-"):
        return load_text_lengths(path, wanted, say)
    file = Path(path)
    if file.is_dir():
        if (file / "dataset_info.json").exists() or (file / "dataset_dict.json").exists() \
                or (file / "state.json").exists():
            return _saved_dataset(file, wanted, say)
        raise UsageError(f"{path} is a directory but not a Hugging Face dataset saved with "
                         "save_to_disk (no dataset_info.json): give a file of lengths")
    if file.suffix.lower() in PARQUET_SUFFIXES or _starts_with(file, _PARQUET_MAGIC):
        return _parquet(file, wanted, say)
    if file.suffix.lower() == ".arrow":
        return _arrow_file(file, wanted, say)
    return load_text_lengths(path, wanted, say)


def _starts_with(file: Path, magic: bytes) -> bool:
    try:
        with file.open("rb") as fh:
            return fh.read(len(magic)) == magic
    except OSError:
        return False  # the text reader names the problem


def _need(module: str, extra: str, what: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise UsageError(f"reading {what} needs {module.split('.')[0]}, which is not installed: "
                         f"pip install 'seqpart[{extra}]'") from None


def _parquet(file: Path, fields: Sequence[str], say: Say | None) -> list[int]:
    pq = _need("pyarrow.parquet", "parquet", "parquet files")
    try:
        names = list(pq.read_schema(file).names)
    except (OSError, ValueError) as err:  # pyarrow's ArrowInvalid is a ValueError
        raise UsageError(f"{file}: not a readable parquet file ({err})") from None
    cols = choose_fields(names, fields, str(file), say)
    table = pq.read_table(file, columns=[names[c] for c in cols])
    return _from_table(table, str(file))


def _saved_dataset(folder: Path, fields: Sequence[str], say: Say | None) -> list[int]:
    datasets = _need("datasets", "datasets", "a saved Hugging Face dataset")
    try:
        data = datasets.load_from_disk(str(folder))
    except (OSError, ValueError, FileNotFoundError) as err:
        raise UsageError(f"{folder}: cannot load the saved dataset ({err})") from None
    if isinstance(data, datasets.DatasetDict):
        splits = list(data)
        split = splits[0] if len(splits) == 1 else "train" if "train" in splits else None
        if split is None:
            raise UsageError(f"{folder} holds the splits {', '.join(splits)}: give one split's "
                             f"folder, e.g. {folder / splits[0]}")
        if len(splits) > 1 and say is not None:
            say(f"seqpart: {folder}: using the 'train' split (of {', '.join(splits)}; give "
                "another split's folder to read it)")
        data = data[split]
        folder = folder / split
    return _from_dataset(data, str(folder), fields, say)


def _arrow_file(file: Path, fields: Sequence[str], say: Say | None) -> list[int]:
    datasets = _need("datasets", "datasets", "a dataset's .arrow file")
    try:
        data = datasets.Dataset.from_file(str(file))
    except (OSError, ValueError) as err:
        raise UsageError(f"{file}: not a readable dataset .arrow file ({err})") from None
    return _from_dataset(data, str(file), fields, say)


def _from_dataset(data: Any, name: str, fields: Sequence[str], say: Say | None) -> list[int]:
    names = list(data.column_names)
    cols = choose_fields(names, fields, name, say)
    table = data.select_columns([names[c] for c in cols]).with_format("arrow")[:]
    return _from_table(table, name)


def _from_table(table: Any, name: str) -> list[int]:
    """The chosen columns of a pyarrow table, summed per row; a list column counts its items.
    Read column by column in Arrow (no Python object per cell unless a cell is bad)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if table.num_rows == 0:
        raise UsageError(f"{name} has no rows")
    total: list[int] | None = None
    for col_name in table.column_names:
        column = table.column(col_name)
        kind = column.type
        if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
            column = pc.list_value_length(column)
        elif not pa.types.is_integer(kind) or column.null_count:
            # Name the first bad value the way the text readers do.
            rows = ((f"row {i + 1}", [v]) for i, v in enumerate(column.to_pylist()))
            column = pa.array(summed(rows, [0], [f", field {col_name!r}"], name))
        values = [int(v) for v in column.to_pylist()]
        total = values if total is None else [a + b for a, b in zip(total, values, strict=True)]
    assert total is not None
    return total
