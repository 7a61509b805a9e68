"""benchmarks/gpu_check.py: its --smoke run takes the GPU command's code path on CPU, so the
command stays ready for a GPU machine; a run killed part-way keeps the steps it finished; the
cap check's logic, on a memory model known exactly."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("scipy")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpu_steps import Settings, cap_check, memory_model, size_design  # noqa: E402

from seqpart.solver.measure.calibrate import Timings  # noqa: E402
from seqpart.solver.measure.design import make_design  # noqa: E402
from seqpart.solver.measure.profile import load_cost_profile  # noqa: E402


def _command(out: Path) -> list[str]:
    return [sys.executable, str(SCRIPT), "--smoke", "--out", str(out)]


def test_the_smoke_run_records_every_step(tmp_path: Path) -> None:
    out = tmp_path / "gc"
    done = subprocess.run(_command(out), cwd=ROOT, capture_output=True, text=True, timeout=600)
    record = json.loads((out / "record.json").read_text())
    assert done.returncode in (0, 1) and record["done"], done.stderr[-3000:]
    steps = record["steps"]
    assert record["smoke"] and steps["env"]["status"] == "done"
    assert steps["env"]["torch"] and steps["env"]["gpus_visible"] == 0
    for name in ("0.5B", "1.5B"):
        cal = steps["calibration"][name]
        assert cal["status"] == "done", cal
        assert 0 <= cal["held_out"]["median_rel"] <= cal["held_out"]["max_rel"]
        assert cal["noise"] >= 0 and cal["design"]["held_out"] == cal["held_out"]["count"]
        assert cal["against"]["attention_default_a_over_b"] == 24576 and cal["against"]["flops_a_over_b"] > 0
        profile = load_cost_profile(out / cal["profile_file"])
        assert profile.linear_s * 1e6 == pytest.approx(cal["fit"]["linear_us_per_token"])
        mem = steps["memory"][name]
        assert mem["status"] == "skipped" and "CUDA only" in mem["reason"]
    replay = steps["replay"]
    assert replay["status"] == "done" and "modelled ring all-reduce" in replay["method"]
    assert [w["kind"] for w in replay["workloads"]] == ["long-CoT", "math", "chat"]
    for w in replay["workloads"]:
        assert w["status"] == "done", w
        low, mid, high = w["ratio"][1], w["ratio"][0], w["ratio"][2]
        assert low <= mid <= high and w["predicted_ratio"] > 0 and 0 < w["ci_level"] < 1
        assert w["repeats"] >= 3 and "plan_step" in w["steps"] and w["best"] in w["steps"]
    assert steps["cp"] == {**steps["cp"], "status": "skipped", "reason": "needs 2 or more GPUs (0 visible)"}
    failed = [name for name, ok in record["targets"].items() if ok is False and "end to end" not in name]
    assert not failed, failed
    report = (out / "report.md").read_text()
    assert "## 4. Replay" in report and "long-CoT" in report and "NOT GPU figures" in report
    for png in ("calibration_0.5B.png", "calibration_1.5B.png", "replay.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
    assert sorted(record["plots"]) == sorted(["calibration_0.5B.png", "calibration_1.5B.png", "replay.png"])


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def test_a_run_killed_after_its_first_calibration_keeps_it(tmp_path: Path) -> None:
    out = tmp_path / "gc"
    proc = subprocess.Popen(_command(out), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            got = _read(out / "record.json")
            if got and got["steps"].get("calibration", {}).get("0.5B", {}).get("status") == "done":
                break
            time.sleep(0.02)
        assert proc.poll() is None, "the run ended before it could be killed"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    record = json.loads((out / "record.json").read_text())  # written whole, even when killed
    assert not record["done"] and record["steps"]["env"]["status"] == "done"
    assert record["steps"]["calibration"]["0.5B"]["status"] == "done"
    assert (out / "profile_0.5B.json").exists()
    assert "NOT finished" in (out / "report.md").read_text()


class _Memory:
    """A runner whose peak memory is ``true(lengths)`` bytes, and CUDA-like hooks to read it."""

    def __init__(self, true: Any) -> None:
        self.true, self.peak, self.cleaned = true, 0, 0

    def __call__(self, lengths: list[int]) -> None:
        self.peak = max(self.peak, self.true(lengths))

    def hooks(self) -> tuple[Any, Any]:
        return (lambda: setattr(self, "peak", 0)), (lambda: self.peak)


def _exact(mb: list[int]) -> int:
    return 4000 + 12 * sum(mb) + 3 * sum(x * x for x in mb)


def test_the_memory_model_is_scored_on_held_out_micro_batches_and_the_cap_fits() -> None:
    design = make_design(1024, 8, 4, seed=0)
    ones = np.ones(len(design.all))
    peaks = np.array([float(_exact(list(mb))) for mb in design.all])
    model = memory_model(design, Timings(design.all, ones, ones[:, None], peaks))
    assert model["held_out_error"]["count"] == 4 and model["held_out_error"]["max_rel"] < 1e-6
    assert model["fit"]["per_pair_bytes"] == pytest.approx(3, rel=1e-6)
    mem = _Memory(_exact)
    checks = cap_check(mem, model["fit"], [1e6, 5e6], mem.hooks, lambda mb: 0.0, 60.0)
    for check in checks:
        assert check["cap"] is not None and _exact([check["cap"]]) <= check["budget_bytes"] < _exact(
            [check["cap"] + 1])
        assert [r["count"] for r in check["runs"]] == [1, 4, 32]
        assert all(r["within_budget"] and r["peak_bytes"] <= check["budget_bytes"] for r in check["runs"])


def test_the_cap_check_reports_memory_the_fit_misses_and_failed_runs() -> None:
    fit = {"measured": True, "base_bytes": 4000.0, "per_token_bytes": 12.0, "per_pair_bytes": 3.0}
    # The real memory has a cost per sequence the fit lacks: 32 sequences at the cap overrun it.
    mem = _Memory(lambda mb: _exact(mb) + 31000 * (len(mb) - 1))
    [check] = cap_check(mem, fit, [1e6], mem.hooks, lambda mb: 0.0, 60.0)
    within = {r["count"]: r["within_budget"] for r in check["runs"]}
    assert within == {1: True, 4: True, 32: False}

    def out_of_memory(lengths: list[int]) -> None:
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    cleaned: list[int] = []
    [check] = cap_check(out_of_memory, fit, [1e6], mem.hooks, lambda mb: 0.0, 60.0,
                        cleanup=lambda: cleaned.append(1))
    assert all(r["out_of_memory"] and not r["within_budget"] for r in check["runs"]) and len(cleaned) == 3
    [check] = cap_check(mem, fit, [1e6], mem.hooks, lambda mb: 1e6, 60.0)  # each would take 11 days
    assert all("over the step's share" in r["skipped"] for r in check["runs"])


def test_the_design_is_sized_to_the_memory_and_the_time_left() -> None:
    # A probe as on a GPU: 5 ms per micro-batch, 10 us per token; 1 GiB held, 1 MiB per token.
    probe = {"tokens": 8192, "small_s": 0.005, "large_s": 0.005 + 8192e-5, "small_peak_bytes": 2**30,
             "large_peak_bytes": 2**30 + 8128 * 2**20, "device_bytes": 20 * 2**30}
    s = Settings(device="cuda", dtype="bfloat16", models={}, max_tokens=(16384, 8192, 4096))
    design, sizing = size_design(probe, s, 1e9)  # 60% of 20 GiB: 11,264 tokens
    assert sizing["memory_allows_tokens"] == 11264 and design is not None and design.max_tokens == 8192
    assert sizing["repeats"] == s.repeats and sizing["tried"][0]["skipped"] == "memory allows 11264 tokens"
    smaller, sizing = size_design(probe, s, sizing["estimated_s"] - 1e-9)
    assert smaller is not None and smaller.max_tokens == 4096 and sizing["estimated_s"] > 0
    nothing, sizing = size_design(probe, s, 0.01)
    assert nothing is None and len(sizing["tried"]) == 2 * len(s.max_tokens)
