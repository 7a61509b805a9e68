"""seqpart.solver is the front door: what users call is importable from it, its docstring is the
API index, and every error class lives in seqpart.solver.errors."""

from __future__ import annotations

import inspect
import subprocess
import sys

import seqpart.solver as front
from seqpart.solver import errors

USER_API = {
    "partition", "plan_step", "plan_global", "partition_across_ranks", "plan_step_across_ranks",
    "order_for_pipeline", "Plan", "StepPlan", "Cost", "SolverOptions",
}


def test_the_front_door_exports_what_users_call() -> None:
    assert set(front.__all__) >= USER_API
    assert all(getattr(front, name) is not None for name in front.__all__)


def test_the_docstring_indexes_every_export() -> None:
    doc = front.__doc__ or ""
    missing = [name for name in front.__all__ if name not in doc]
    assert not missing, f"seqpart.solver's docstring does not mention {missing}"


def test_every_error_class_lives_in_errors_and_is_exported() -> None:
    classes = {name for name, obj in vars(errors).items()
               if inspect.isclass(obj) and issubclass(obj, Exception) and obj.__module__ == errors.__name__}
    assert classes == set(errors.__all__)
    assert classes <= set(front.__all__)
    for name in classes:
        assert getattr(front, name) is getattr(errors, name)


def test_the_front_door_does_not_import_torch() -> None:
    """torch is an optional extra: importing seqpart.solver must not load it."""
    code = "import sys, seqpart.solver; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_one_module_imported_alone_loads_only_what_it_uses() -> None:
    """The front door's names load on first use: a worker importing the errors alone does not
    pay for OR-Tools and the whole solver."""
    code = ("import sys, seqpart.solver.errors; "
            "print('ortools' in sys.modules, 'seqpart.solver._partition' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False False", out.stderr


PARTITION_IS_THE_FUNCTION = """
import importlib, types
import seqpart.solver as s
from seqpart.solver import partition
assert type(s) is types.ModuleType, type(s)  # a plain module: no class swapped in
import seqpart.solver._partition as home  # the private module, imported (as a test may)
assert s.partition is partition is home.partition and callable(partition)
assert s._partition is home  # bound under its own name, not over the function
try:
    importlib.import_module("seqpart.solver.partition")
except ModuleNotFoundError:
    pass
else:
    raise AssertionError("seqpart.solver.partition imported as a module")
print(partition.__module__)
"""


def test_partition_is_the_function_with_no_module_in_the_way() -> None:
    """The orchestrator lives in the private module ``_partition``, so ``seqpart.solver.partition``
    is the function however the package was imported; no module shares its name."""
    out = subprocess.run([sys.executable, "-c", PARTITION_IS_THE_FUNCTION], capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.strip() == "seqpart.solver._partition", out.stderr
