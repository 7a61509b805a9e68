"""`seqpart replay --pp/--vpp`: bad pipeline arguments stop before any process starts, with the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from seqpart.solver.cli import main
from seqpart.solver.measure.profile import CostProfile


def _files(tmp_path: Path) -> tuple[str, str]:
    prof = CostProfile(overhead_s=1e-3, linear_s=20e-6, quadratic_s=10e-9, device="cpu", dtype="float32",
                       torch_version="x", model={"kind": "reference", "hidden_size": 32,
                                                 "num_hidden_layers": 1, "num_attention_heads": 2,
                                                 "intermediate_size": 64, "vocab_size": 64})
    lengths = tmp_path / "l.json"
    lengths.write_text(json.dumps([900, 120, 400, 330, 70, 600, 250, 180]))
    return str(lengths), str(prof.save(tmp_path / "p.json"))


def test_vpp_without_pp_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lengths, prof = _files(tmp_path)
    assert main(["replay", lengths, "--cost-profile", prof, "--vpp", "2"]) == 2
    assert "--vpp 2 interleaves pipeline stages: give --pp > 1" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--pp", "--vpp"])
def test_non_positive_pipeline_sizes_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 flag: str) -> None:
    lengths, prof = _files(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["replay", lengths, "--cost-profile", prof, flag, "0"])
    assert exit_info.value.code == 2
    assert f"{flag}: '0' must be > 0" in capsys.readouterr().err
