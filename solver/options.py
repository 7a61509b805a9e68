"""Solver options and the best-plan record: shared by the orchestrator (``partition``) and the
engines (``cpsat``), so neither imports the other."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The parameter names are checked against ortools' own message type.
from ortools.sat.python import cp_model

#: Parameters that crash the process rather than fail: refused with the reason.
UNSAFE_PARAMETERS = {
    "repair_hint": "ortools 9.15 aborts the whole process on it (CHECK heuristics.fixed_search) "
    "with one worker, which budgets under 50 ms use",
}


def check_parameters(parameters: dict[str, object]) -> None:
    """Reject unknown or unsafe CP-SAT parameters, or values of the wrong type, up front
    (naming the problem), so nothing fails inside a solve and costs the heuristic plan."""
    if not isinstance(parameters, dict):
        raise TypeError(
            "SolverOptions.cp_sat_parameters must be a dict of CP-SAT parameter names to "
            f"values, got {type(parameters).__name__}"
        )
    known = cp_model.CpSolver().parameters
    for name, value in parameters.items():
        if name in UNSAFE_PARAMETERS:
            raise ValueError(f"CP-SAT parameter {name!r} is refused: {UNSAFE_PARAMETERS[name]}")
        if not hasattr(known, name):
            raise ValueError(
                f"unknown CP-SAT parameter {name!r} in SolverOptions.cp_sat_parameters: see "
                "ortools' sat_parameters.proto for the names"
            )
        try:
            setattr(known, name, value)  # a scratch message: protobuf checks the type
        except (TypeError, ValueError):
            raise TypeError(
                f"CP-SAT parameter {name!r}={value!r} ({type(value).__name__}) has the wrong "
                "type for that field: see ortools' sat_parameters.proto for its type"
            ) from None


ENGINES = ("auto", "heuristics", "cp-sat")


@dataclass(frozen=True)
class SolverOptions:
    """Knobs passed through to CP-SAT. The defaults suit a 2-core machine.

    ``deterministic``: identical plans on every machine and run, at a price: the heuristics run
    to completion whatever the clock says and CP-SAT's limit is counted in its deterministic time
    units, so wall time can overrun ``time_limit`` (see the README for measured figures).
    """

    workers: int = 2
    seed: int = 0
    log: bool = False
    deterministic: bool = False
    #: Skip the model when it would have more boolean variables than this (build time alone
    #: would eat an online budget); a tuned CP-SAT run can still be asked for with more.
    max_model_vars: int = 400_000
    #: Any other CP-SAT parameter by name, e.g. {"linearization_level": 2}; applied last.
    cp_sat_parameters: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1:
            raise ValueError(f"SolverOptions.workers must be an int >= 1, got {self.workers!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not (
            -(2**31) <= self.seed < 2**31
        ):
            raise TypeError(f"SolverOptions.seed must be an int (32-bit), got {self.seed!r}")
        for flag in ("log", "deterministic"):
            if not isinstance(getattr(self, flag), bool):
                raise TypeError(
                    f"SolverOptions.{flag} must be True or False, got {getattr(self, flag)!r}"
                )
        if isinstance(self.max_model_vars, bool) or not isinstance(self.max_model_vars, int):
            raise TypeError(
                f"SolverOptions.max_model_vars must be an int, got {self.max_model_vars!r}"
            )
        check_parameters(self.cp_sat_parameters)


@dataclass
class BestPlan:
    """The best item-level plan so far, and what is known about it."""

    bins: list[list[int]] | None
    max_load: int
    lower_bound: int
    method: str
    notes: list[str]
    hint: list[list[int]] | None = None  # an invalid plan CP-SAT may repair, when none is valid


