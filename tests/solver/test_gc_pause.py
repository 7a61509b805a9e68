"""partition and plan_step pause Python's cyclic collector for the call, and restore it."""

from __future__ import annotations

import gc
import importlib

import pytest

from seqpart.solver import SolverOptions, partition, plan_step
from seqpart.solver.options import gc_paused

from _patching import patch_solver

phase_module = importlib.import_module("seqpart.solver.engines.heuristic_phase")



def _spy(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    seen: list[bool] = []
    original = phase_module.lpt_lists

    def spying(*args: object, **kwargs: object) -> object:
        seen.append(gc.isenabled())
        return original(*args, **kwargs)

    patch_solver(monkeypatch, "lpt_lists", spying)
    return seen


LENGTHS = [900, 700, 650, 500, 420, 380, 300, 250, 200, 120, 90, 60]


def test_collector_is_off_inside_the_call_and_back_on_after(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _spy(monkeypatch)
    assert gc.isenabled()
    partition(LENGTHS, 3, 2000, time_limit=0.05)
    assert seen and not any(seen)
    assert gc.isenabled()


def test_pause_gc_false_leaves_the_collector_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _spy(monkeypatch)
    partition(LENGTHS, 3, 2000, time_limit=0.05, options=SolverOptions(pause_gc=False))
    assert seen and all(seen)
    assert gc.isenabled()


def test_a_collector_the_caller_turned_off_stays_off(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _spy(monkeypatch)
    gc.disable()
    try:
        partition(LENGTHS, 3, 2000, time_limit=0.05)
        assert not gc.isenabled()
    finally:
        gc.enable()
    assert seen and not any(seen)


def test_restored_when_the_call_raises() -> None:
    with pytest.raises(ValueError):
        partition(LENGTHS, 3, 2000, time_limit=-1)
    assert gc.isenabled()


def test_nested_pauses_restore_only_at_the_outermost() -> None:
    with gc_paused():
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_plan_step_pauses_too(monkeypatch: pytest.MonkeyPatch) -> None:
    step_module = importlib.import_module("seqpart.solver.step.makespan")  # plan_step assembles there
    seen: list[bool] = []
    original = step_module.check_schedule  # every schedule it returns passes it

    def spying(*args: object, **kwargs: object) -> object:
        seen.append(gc.isenabled())
        return original(*args, **kwargs)

    monkeypatch.setattr(step_module, "check_schedule", spying)
    plan_step(LENGTHS, 2, 2000, time_limit=0.1)
    assert gc.isenabled()
    assert seen and not any(seen)


def test_pause_gc_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="pause_gc"):
        SolverOptions(pause_gc="yes")  # type: ignore[arg-type]
