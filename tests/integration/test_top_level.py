"""`from seqpart import partition, plan_step, Cost`: the top-level package is the front door too,
without loading the solver for `import seqpart.heuristics`."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import sys
import seqpart.heuristics
assert "seqpart.solver" not in sys.modules, "seqpart.heuristics alone loaded the solver"
from seqpart import Cost, partition, plan_step
import seqpart, seqpart.solver
assert partition is seqpart.solver.partition and plan_step is seqpart.solver.plan_step
assert Cost is seqpart.solver.Cost and seqpart.solver.__file__.endswith("__init__.py")
assert sorted(seqpart.__all__) == sorted(seqpart.solver.__all__)
assert {"partition", "solver", "heuristics"} <= set(dir(seqpart))
try:
    seqpart.nope
except AttributeError as err:
    assert "seqpart.solver" in str(err)
else:
    raise AssertionError("seqpart.nope did not raise")
print(partition([5, 4, 3, 2], None, 7).bins)
"""


def test_from_seqpart_import_partition_in_a_fresh_process() -> None:
    # It used to fail: the top level was an empty namespace package.
    proc = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[[0, 3], [1, 2]]"
