"""Every exception seqpart raises on purpose, in one place.

All of them are ``ValueError`` subclasses except :class:`UsageError` (the command line's bad
arguments, exit code 2) and :class:`MeasureError` (a timed run of a model failed), so
``except ValueError`` in a trainer catches any bad-input or no-plan
outcome of a seqpart call. Bad arguments that are not about a plan raise plain ``ValueError`` or
``TypeError`` with the argument's name and the fix in the message.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "DistributedPlanError",
    "InfeasibleError",
    "InvalidPlanError",
    "MeasureError",
    "TrainerInputError",
    "UsageError",
]


class InvalidPlanError(ValueError):
    """A plan broke a hard constraint; ``violations`` lists each one."""

    def __init__(self, violations: list[str]) -> None:
        self.violations = violations
        super().__init__("invalid plan: " + "; ".join(violations))


class InfeasibleError(ValueError):
    """No plan was returned. ``proven`` says whether none exists (True) or none was found in the
    time budget (False); the message says which, and what to change."""

    def __init__(self, message: str, *, proven: bool) -> None:
        self.proven = proven
        prefix = "proven infeasible: " if proven else "no plan found within the budget: "
        super().__init__(prefix + message)


class DistributedPlanError(ValueError):
    """Raised with the same message on every rank of the group when any rank cannot plan.

    ``code`` names the problem: "too_few_samples", "mismatched_args", "mismatched_call" (ranks
    called different seqpart collectives), "over_cap", "infeasible", "not_found" (no plan within
    the time limit), "bad_input", "plan_failed", "global_failed", "timeout" (a rank did not join
    within ``timeout``; raised on the ranks that waited), "comm_failed" or "internal". ``rank``
    is the global rank at fault (None when no single rank is), ``numbers`` the figures quoted
    in the message (sample count, needed and agreed counts, caps).
    """

    def __init__(
        self, message: str, *, code: str, rank: int | None = None, numbers: dict[str, Any] | None = None
    ) -> None:
        self.code = code
        self.rank = rank
        self.numbers = dict(numbers or {})
        super().__init__(message)


class TrainerInputError(ValueError, AssertionError):
    """Bad input to a drop-in. A ``ValueError`` like every seqpart input error, and also an
    ``AssertionError``, which is what the originals raise (they ``assert``), so a trainer's
    ``except AssertionError`` or its tests' ``pytest.raises(AssertionError)`` still catch it."""


class UsageError(Exception):
    """Bad command-line arguments or input file: reported on one line, exit code 2."""


class MeasureError(RuntimeError):
    """A timed run during calibration or replay failed: the message names the micro-batch it was
    running (its lengths), and the original exception is chained as ``__cause__``."""
