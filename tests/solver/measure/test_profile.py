"""Cost profiles: calibration with a simulated clock, the JSON round trip, the planners' use of
a profile, and the errors a user can hit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from seqpart.solver import Cost, MeasureError, load_cost_profile, partition, plan_step, step_time
from seqpart.solver.measure import SCHEMA_VERSION, calibrate, make_design
from seqpart.solver.measure.profile import CostProfile

OVERHEAD, LINEAR, QUADRATIC = 3e-3, 50e-6, 25e-9


class SimulatedModel:
    """A runner whose 'time' advances a clock by a known cost: the whole calibration path runs,
    deterministically, without depending on this machine's speed or load."""

    def __init__(self) -> None:
        self.now = 0.0
        self.calls: list[list[int]] = []

    def clock(self) -> float:
        return self.now

    def __call__(self, lengths: list[int]) -> None:
        self.calls.append(list(lengths))
        self.now += OVERHEAD + LINEAR * sum(lengths) + QUADRATIC * sum(x * x for x in lengths)


@pytest.fixture(scope="module")
def profile() -> CostProfile:
    model = SimulatedModel()
    design = make_design(max_tokens=2048, max_count=8, held_out=6)
    p = calibrate(model, design=design, repeats=2, warmup=1, progress=False, clock=model.clock,
                  model={"kind": "simulated"}, min_seconds=0)
    assert len(model.calls) == 3 * len(design.all)  # warm-up round + 2 interleaved rounds
    return p


def test_calibration_recovers_the_simulated_cost(profile: CostProfile) -> None:
    assert profile.overhead_s == pytest.approx(OVERHEAD, rel=1e-6)
    assert profile.linear_s == pytest.approx(LINEAR, rel=1e-6)
    assert profile.quadratic_s == pytest.approx(QUADRATIC, rel=1e-6)
    assert profile.fit_error["held_out"]["max_rel"] < 1e-6
    assert profile.extended is None
    assert profile.memory["measured"] is False and "CUDA" in profile.memory["reason"]


def test_integer_cost_reproduces_seconds(profile: CostProfile) -> None:
    cost, u = profile.cost, profile.unit_seconds
    assert isinstance(cost, Cost) and cost.quadratic >= 1
    assert cost.linear / cost.quadratic == pytest.approx(LINEAR / QUADRATIC, rel=1e-3)
    mb = [100, 700, 2000]
    units = profile.overhead + sum(cost.linear * x + cost.quadratic * x * x for x in mb)
    assert units * u == pytest.approx(profile.seconds(mb), rel=1e-3)


def test_round_trip_and_planners_accept_the_profile(profile: CostProfile, tmp_path: Path) -> None:
    path = profile.save(tmp_path / "p.json")
    loaded = load_cost_profile(path)
    assert loaded.cost == profile.cost and loaded.overhead == profile.overhead
    assert loaded.measurements == profile.measurements
    lengths = [3000, 200, 150, 900, 40, 1200, 700, 60]
    plan = plan_step(lengths, 2, 4096, cost=loaded.cost, overhead=loaded.overhead, time_limit=0.2)
    units = step_time(plan.ranks, lengths, cost=loaded.cost, overhead=loaded.overhead)
    seconds = float(units) * loaded.unit_seconds
    by_hand = max(sum(loaded.seconds([lengths[i] for i in mb]) for mb in rank) for rank in plan.ranks)
    assert seconds == pytest.approx(by_hand, rel=1e-3)
    assert partition(lengths, 3, 4096, cost=loaded.cost).k == 3


def test_schema_file_matches_a_written_profile(profile: CostProfile) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((Path(__file__).parents[3] / "docs" / "cost_profile.schema.json").read_text())
    jsonschema.validate(json.loads(json.dumps(profile.to_json())), schema)


def test_bad_files_give_clear_errors(profile: CostProfile, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        load_cost_profile(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"kind": "seqpart.cost_profile", "schema_')
    with pytest.raises(ValueError, match="corrupt"):
        load_cost_profile(bad)
    newer = profile.to_json() | {"schema_version": SCHEMA_VERSION + 1}
    bad.write_text(json.dumps(newer))
    with pytest.raises(ValueError, match="newer than this seqpart reads"):
        load_cost_profile(bad)
    bad.write_text(json.dumps({k: v for k, v in profile.to_json().items() if k != "coefficients"}))
    with pytest.raises(ValueError, match="'coefficients' is missing"):
        load_cost_profile(bad)
    bad.write_text(json.dumps([1, 2]))
    with pytest.raises(ValueError, match="not a seqpart cost profile"):
        load_cost_profile(bad)
    raw = profile.to_json()
    raw["coefficients"] = {"overhead_s": 0.0, "linear_s": -1.0, "quadratic_s": 0.0}
    bad.write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="linear_s must be"):
        load_cost_profile(bad)


def test_a_raising_runner_names_its_micro_batch() -> None:
    def run(lengths: list[int]) -> None:
        if len(lengths) == 4:
            raise RuntimeError("out of memory")

    with pytest.raises(MeasureError, match=r"RuntimeError on a warm-up micro-batch of 4 sequences.*lengths="):
        calibrate(run, design=make_design(max_tokens=256, max_count=4, held_out=0), progress=False)
    with pytest.raises(TypeError, match="callable"):
        calibrate(42, progress=False)  # type: ignore[arg-type]


def test_unknown_devices_and_clocks_are_rejected() -> None:
    pytest.importorskip("torch")
    import torch

    from seqpart.solver.measure.models import resolve_device

    with pytest.raises(ValueError, match="device='tpu'"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device"):
            calibrate(device="cuda", progress=False)
    with pytest.raises(ValueError, match="clock"):
        calibrate(lambda ls: None, clock="sundial", progress=False)
    with pytest.raises(ValueError, match="meaningless"):
        calibrate(device="cuda", clock="cpu", progress=False)


class SizedModel(SimulatedModel):
    """A simulated device whose micro-batches also pay per sequence and per squared token
    total (a per-token cost that grows with the micro-batch's size)."""

    def __call__(self, lengths: list[int]) -> None:
        self.calls.append(list(lengths))
        self.now += self.seconds_of(lengths)

    @staticmethod
    def seconds_of(lengths: list[int]) -> float:
        total = sum(lengths)
        return (OVERHEAD + LINEAR * total + QUADRATIC * sum(x * x for x in lengths)
                + 4e-4 * len(lengths) + 8e-9 * total * total)


def test_extended_fit_is_what_the_planners_optimise(tmp_path: Path) -> None:
    """A calibration that finds a per-sequence cost and a size term hands both to the planners:
    ``cost.per_sequence`` and a MicroBatchCost, whose step time is the measured model's."""
    from seqpart.solver import MicroBatchCost

    model = SizedModel()
    design = make_design(max_tokens=2048, max_count=8, held_out=6)
    p = calibrate(model, design=design, repeats=1, warmup=0, progress=False, clock=model.clock,
                  model={"kind": "simulated"})
    assert p.planning_fit == "extended"
    assert set(p.extended["coefficients"]) == {"overhead", "linear", "quadratic", "count", "total_sq"}
    assert p.cost.per_sequence > 0
    batch = p.overhead
    assert isinstance(batch, MicroBatchCost) and batch.square > 0
    lengths = [50 + (i * 37) % 900 for i in range(40)]
    plan = plan_step(lengths, 2, 4096, cost=p.cost, overhead=batch, time_limit=0.3)
    simulated = max(sum(SizedModel.seconds_of([lengths[i] for i in mb]) for mb in rank)
                    for rank in plan.ranks)
    assert float(plan.step_time) * p.unit_seconds == pytest.approx(simulated, rel=2e-3)
    from seqpart.solver.measure.plot import _formula, plot_profile

    assert "ms per sequence" in _formula(p.planning_coefficients)
    picture = plot_profile(p, tmp_path / "fit.png")
    assert picture.stat().st_size > 10_000
    written = json.loads(json.dumps(p.to_json()))
    assert written["planner"]["fit"] == "extended" and written["planner"]["square"] == batch.square
    # A file whose extended fit the model cannot express (a negative hinge, as older files may
    # hold) plans with the base fit.
    written["extended"]["coefficients"] = {"overhead": 1e-3, "linear": 1e-5, "quadratic": 0.0,
                                           "hinge@512": -1e-6}
    from seqpart.solver.measure.profile import profile_from_json

    old = profile_from_json(written)
    assert old.planning_fit == "base" and old.cost.per_sequence == 0


def test_peak_memory_path_with_simulated_hooks() -> None:
    """The CUDA memory path without a GPU: the hooks a CUDA calibration gets (reset, read the
    peak) report a simulated peak, and the fit, the profile and the cap for a budget follow it.
    Only the two torch.cuda calls behind the real hooks are left to the GPU test."""
    from seqpart.solver.measure.calibrate import largest_cap, profile_from_timings, time_micro_batches
    from seqpart.solver.study.measure_cli import format_profile

    base, per_token, per_pair = 200 * 2**20, 16 * 2**10, 64.0
    model = SimulatedModel()
    peak = [0]

    def run(lengths: list[int]) -> None:
        model(lengths)
        peak[0] = max(peak[0], int(base + per_token * sum(lengths) + per_pair * sum(x * x for x in lengths)))

    def hooks() -> tuple:
        return (lambda: peak.__setitem__(0, 0)), (lambda: peak[0])

    design = make_design(max_tokens=2048, max_count=8, held_out=4)
    timings = time_micro_batches(run, design.all, repeats=1, warmup=0, progress=False, memory=hooks,
                                 clock=model.clock)
    p = profile_from_timings(design, timings, device="cuda:0", dtype="bfloat16", model={"kind": "simulated"},
                             meta={}, threads=None, repeats=1, warmup=0)
    mem = p.memory
    assert mem["measured"] and mem["max_peak_bytes"] == max(timings.peak_bytes)
    assert mem["base_bytes"] == pytest.approx(base, rel=1e-6)
    assert mem["per_token_bytes"] == pytest.approx(per_token, rel=1e-6)
    assert mem["per_pair_bytes"] == pytest.approx(per_pair, rel=1e-6)
    budget = 2 * 2**30
    cap = largest_cap(mem, budget)
    def peak_of(cap: int) -> float:
        return base + per_token * cap + per_pair * cap**2

    assert peak_of(cap) <= budget < peak_of(cap + 2)
    assert largest_cap(mem, base / 2) == 0
    assert f"largest cap for 2 GiB: {cap} tokens" in format_profile(p, 2.0)
    assert largest_cap({"measured": False}, budget) is None
    cpu = profile_from_timings(design, time_micro_batches(model, design.all, repeats=1, warmup=0,
                                                          progress=False, clock=model.clock),
                               device="cpu", dtype="float32", model={"kind": "simulated"}, meta={},
                               threads=1, repeats=1, warmup=0)
    assert "unknown: peak memory was not measured" in format_profile(cpu, 2.0)
