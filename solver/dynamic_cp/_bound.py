"""A lower bound on the time of every valid dynamic-CP schedule, under both sync models.

Under "dag" no schedule is slower than under "barrier" (a barrier only adds waiting), so a
bound on the dag makespan bounds both. Each GPU runs one group in each of the ``S`` steps, and
each group costs each of its GPUs at least ``overhead``. Three bounds, the largest is returned:

* area: a sequence of length l at degree c costs its group's GPUs ``w + cp_comm*l*(c-1)`` GPU-time
  together (``w = a*l + b*l^2 + p``), least at its smallest feasible degree ``cmin``; spread over
  ``n`` GPUs, plus ``S_min * overhead`` that every GPU pays;
* each sequence alone: ``min_c (w/c + cp_comm*l*(c-1)/c) + overhead`` on its GPUs, which also
  run ``S_min - 1`` other groups;
* ``S_min`` is the fewest steps: ``ceil(sum l / (n*m))``, at least one per sequence longer
  than ``n*m/2`` (two of them never share a step), and at least one.
"""

from __future__ import annotations

from fractions import Fraction

from ._model import CPInstance

__all__ = ["cp_lower_bound", "min_steps"]


def min_steps(inst: CPInstance) -> int:
    n, m = inst.n_gpus, inst.m
    total = sum(inst.lengths)
    big = sum(1 for lo in inst.lengths if 2 * lo > n * m)
    return max(1, -(-total // (n * m)), big)


def cp_lower_bound(inst: CPInstance) -> Fraction:
    """The largest of the bounds above, exact."""
    s_min = min_steps(inst)
    k = inst.scale  # every term below times k is an int (see CPInstance.scaled_time)
    fixed = k * inst.overhead
    comm = inst.cp_comm.numerator * (k // inst.cp_comm.denominator)  # k * cp_comm
    area = 0
    alone = 0
    for i, lo in enumerate(inst.lengths):
        w = inst.work(i)
        cmin = inst.min_degree(lo)
        assert cmin is not None  # make_cp_instance refused longer sequences
        area += k * w + comm * lo * (cmin - 1)
        best = min(inst.scaled_time(c, w, lo) for c in inst.degrees if lo <= c * inst.m) - fixed
        alone = max(alone, best)
    return max(Fraction(area, k * inst.n_gpus), Fraction(alone, k)) + s_min * inst.overhead
