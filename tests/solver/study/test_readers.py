"""A user's file of lengths gives the same lengths (and so the same plan) in every format.

JSON, JSON records, JSONL, columnar JSON, CSV and token-id lists are read by the core install;
parquet needs pyarrow and saved Hugging Face datasets need ``datasets``: those tests skip,
saying so, when the extra is absent.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from seqpart.solver import partition
from seqpart.solver.errors import UsageError
from seqpart.solver.study.readers import load_lengths

PROMPT = [311, 52, 1200, 97, 640, 18, 905, 77, 3, 450, 260, 1024]
RESPONSE = [4238, 17, 880, 2048, 5, 730, 1900, 64, 3000, 12, 999, 411]
TOTAL = [p + r for p, r in zip(PROMPT, RESPONSE, strict=True)]
CAP = 6000


def _records() -> list[dict[str, object]]:
    return [{"id": i, "prompt_length": p, "response_length": r, "text": "x"}
            for i, (p, r) in enumerate(zip(PROMPT, RESPONSE, strict=True))]


def _plan(lengths: object) -> list[list[int]]:
    return partition(lengths, None, CAP, time_limit=0.05).bins


def test_every_text_format_gives_the_json_lengths_and_plan(tmp_path: Path) -> None:
    reference = tmp_path / "lens.json"
    reference.write_text(json.dumps(TOTAL))
    expected = _plan(load_lengths(str(reference)))
    files = {
        "records.json": json.dumps(_records()),
        "records.jsonl": "\n".join(json.dumps(r) for r in _records()) + "\n\n",
        "columns.json": json.dumps({"prompt_length": PROMPT, "response_length": RESPONSE}),
        "table.csv": "id,prompt_length,response_length\n" + "\n".join(
            f"{i},{p},{r}" for i, (p, r) in enumerate(zip(PROMPT, RESPONSE, strict=True))),
        "table.tsv": "prompt_length\tresponse_length\n" + "\n".join(
            f"{p}\t{r}" for p, r in zip(PROMPT, RESPONSE, strict=True)),
    }
    for name, text in files.items():
        path = tmp_path / name
        path.write_text(text)
        for fields in (["prompt_length", "response_length"], "prompt_length+response_length"):
            got = load_lengths(str(path), fields)
            assert list(got) == TOTAL, name
            assert _plan(got) == expected, name


def test_token_id_lists_count_their_lengths(tmp_path: Path) -> None:
    ids = [list(range(n)) for n in (5, 1, 9)]
    (tmp_path / "ids.json").write_text(json.dumps(ids))
    assert load_lengths(str(tmp_path / "ids.json")) == [5, 1, 9]
    (tmp_path / "ids.jsonl").write_text("\n".join(json.dumps({"input_ids": x, "n": 0}) for x in ids))
    notes: list[str] = []
    assert load_lengths(str(tmp_path / "ids.jsonl"), say=notes.append) == [5, 1, 9]
    assert "using field 'input_ids'" in notes[0]  # the choice is said, after the values read
    (tmp_path / "ids.csv").write_text('ids\n"[1, 2]"\n"[3]"\n')
    assert load_lengths(str(tmp_path / "ids.csv")) == [2, 1]


def test_jsonl_of_counts_and_a_one_field_record(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text('{"response_length": 4238}\n{"response_length": 17}\n')
    assert load_lengths(str(tmp_path / "a.jsonl")) == [4238, 17]
    (tmp_path / "b.jsonl").write_text("[1, 2]\n[3]\n")  # token ids, one list per line
    assert load_lengths(str(tmp_path / "b.jsonl")) == [2, 1]


@pytest.mark.parametrize(
    ("text", "fields", "words"),
    [
        ('[{"a": 1, "b": 2}]', None, ("none is named like a length", "--field")),
        ('[{"len": 1, "tokens": 2}]', None, ("all named like a length", "sum them")),
        ('[{"len": 1}]', "size", ("--field 'size' not found", "fields: len")),
        ('[{"len": 1}, {"len": null}]', None, ("record 2", "missing")),
        ('[{"len": 1}, {"len": "abc"}]', None, ("record 2", "'abc'", "tokenizing")),
        ('[{"len": 1}, 5]', None, ("record 2", "not an object")),
        ("[1, 2]", "len", ("--field applies to records",)),
        ("[1, 2]", "a+", ("'+'",)),
    ],
)
def test_bad_records_name_the_record_field_and_fix(
    tmp_path: Path, text: str, fields: str | None, words: tuple[str, ...]
) -> None:
    path = tmp_path / "x.json"
    path.write_text(text)
    with pytest.raises(UsageError) as err:
        load_lengths(str(path), fields)
    for word in words:
        assert word in str(err.value)


def test_parquet_gives_the_json_plan(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow", reason="parquet needs the parquet extra (pyarrow)")
    import pyarrow.parquet as pq

    table = pa.table({"prompt_length": pa.array(PROMPT, pa.int32()),
                      "response_length": pa.array(RESPONSE, pa.int64()),
                      "input_ids": [list(range(n)) for n in TOTAL]})
    pq.write_table(table, tmp_path / "rollouts.parquet")
    path = str(tmp_path / "rollouts.parquet")
    assert load_lengths(path, ["prompt_length", "response_length"]) == TOTAL
    assert load_lengths(path, "input_ids") == TOTAL  # a list column counts its token ids
    with pytest.raises(UsageError, match="--field prompt_length --field response_length"):
        load_lengths(path)  # one of prompt and response would be a wrong guess
    pq.write_table(table.select(["input_ids"]), tmp_path / "ids.parquet")
    assert load_lengths(str(tmp_path / "ids.parquet")) == TOTAL
    assert _plan(load_lengths(path, "prompt_length+response_length")) == _plan(TOTAL)
    pq.write_table(pa.table({"len": pa.array([5, None, 3], pa.int64())}), tmp_path / "n.pq")
    with pytest.raises(UsageError, match="row 2, field 'len': the value is missing"):
        load_lengths(str(tmp_path / "n.pq"))
    pq.write_table(pa.table({"len": [5.0, 2.5]}), tmp_path / "f.pq")
    with pytest.raises(UsageError, match="row 1, field 'len'.*whole numbers"):
        load_lengths(str(tmp_path / "f.pq"))


def test_saved_dataset_gives_the_json_plan(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets", reason="saved datasets need the datasets extra")
    data = datasets.Dataset.from_list(_records())
    data.save_to_disk(str(tmp_path / "ds"))
    got = load_lengths(str(tmp_path / "ds"), ["prompt_length", "response_length"])
    assert got == TOTAL and _plan(got) == _plan(TOTAL)
    datasets.DatasetDict({"train": data, "test": data.select([0])}).save_to_disk(
        str(tmp_path / "dd"))
    notes: list[str] = []
    assert load_lengths(str(tmp_path / "dd"), "response_length", notes.append) == RESPONSE
    assert "'train' split" in notes[0]
    arrow = next((tmp_path / "ds").glob("*.arrow"))
    assert load_lengths(str(arrow), "prompt_length+response_length") == TOTAL


def test_a_missing_extra_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules makes an import fail as if the package were not installed.
    for name in ("pyarrow", "pyarrow.parquet", "datasets"):
        monkeypatch.setitem(sys.modules, name, None)
    (tmp_path / "x.parquet").write_bytes(b"PAR1....PAR1")
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "dataset_info.json").write_text("{}")
    with pytest.raises(UsageError, match=r"parquet files needs pyarrow, which is not installed: "
                                         r"pip install 'seqpart\[parquet\]'"):
        load_lengths(str(tmp_path / "x.parquet"))
    with pytest.raises(UsageError, match=r"pip install 'seqpart\[datasets\]'"):
        load_lengths(str(tmp_path / "ds"))


def test_int64_fast_path_still_used_for_plain_lists(tmp_path: Path) -> None:
    (tmp_path / "l.json").write_text("[3, 4, 5]")
    got = load_lengths(str(tmp_path / "l.json"))
    assert isinstance(got, np.ndarray) and got.tolist() == [3, 4, 5]
