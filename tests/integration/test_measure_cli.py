"""`seqpart calibrate`, `seqpart replay` and `solve --cost-profile` from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from seqpart.solver.cli import main
from seqpart.solver.measure.design import make_design
from seqpart.solver.measure.profile import CostProfile, load_cost_profile

pytest.importorskip("torch")


def _profile(tmp_path: Path) -> Path:
    p = CostProfile(overhead_s=1e-3, linear_s=20e-6, quadratic_s=10e-9, device="cpu", dtype="float32",
                    torch_version="x", model={"kind": "reference", "hidden_size": 32, "num_hidden_layers": 1,
                                              "num_attention_heads": 2, "intermediate_size": 64,
                                              "vocab_size": 64})
    return p.save(tmp_path / "p.json")


def test_calibrate_writes_a_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "c.json"
    code = main(["calibrate", "--quiet", "--max-tokens", "1024", "--max-count", "2", "--held-out", "2",
                 "--min-length", "8", "--repeats", "1", "--min-seconds", "0", "--clock", "cpu",
                 "--random-train", "2", "--memory-budget", "1", "--out", str(out)])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "held-out error" in text and "memory: peak memory is measured on CUDA only" in text
    assert "largest cap for 1 GiB: unknown: peak memory was not measured" in text
    profile = load_cost_profile(out)
    assert profile.model["kind"] == "reference"
    assert profile.design["min_length"] == 8 and profile.design["random_train"] == 2
    structured = make_design(1024, 2, 2, min_length=8).train  # then the 2 random ones
    assert profile.design["train"] == len(make_design(1024, 2, 2, min_length=8, random_train=2).train)
    assert min(min(r["lengths"]) for r in profile.measurements[:len(structured)]) >= 8


def test_calibrate_bad_device_and_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--quiet", "--device", "tpu", "--out", str(tmp_path / "x.json")]) == 2
    assert "device='tpu'" in capsys.readouterr().err
    assert main(["calibrate", "--quiet", "--hf-config", str(tmp_path / "none.json")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_solve_and_replay_take_a_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prof = _profile(tmp_path)
    lengths = tmp_path / "l.json"
    lengths.write_text(json.dumps([900, 120, 400, 330, 70, 600, 250, 180]))
    assert main(["solve", str(lengths), "--k", "2", "--cost-profile", str(prof)]) == 0
    assert "cost 2000*l + 1*l^2" in capsys.readouterr().out
    code = main(["replay", str(lengths), "--cost-profile", str(prof), "--cap", "1024", "--repeats", "1",
                 "--target-cost", "20000,1", "--time-limit", "0.2"])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "scale 0.1000" in text and "plan_step / best trainer by cpu clock" in text
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert main(["replay", str(lengths), "--cost-profile", str(bad)]) == 2
    assert "corrupt" in capsys.readouterr().err
