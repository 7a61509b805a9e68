"""A lower bound on the time of every valid dynamic-CP schedule, under both sync models.

Under "dag" no schedule is slower than under "barrier" (a barrier only adds waiting), so a
bound on the dag makespan bounds both. Each GPU runs one group in each of the ``S`` steps, and
each group costs each of its GPUs at least ``overhead``; ``S`` is at least ``S_min``.

Sequence i at degree c keeps each GPU of its group busy ``t_i(c) = w/c + cp_comm*l*(c-1)/c``
(``w = a*l + b*l^2 + p``) and takes ``g_i(c) = c*t_i(c) = w + cp_comm*l*(c-1)`` GPU-time, which
grows with c. In a schedule of makespan T, every sequence runs at a degree with
``t_i(c) + S_min*overhead <= T`` (its GPUs run ``S_min - 1`` other groups too), and all the GPU-time
fits: ``sum_i g_i(c_i) + n*S_min*overhead <= n*T``. So T is at least the smallest value for which
each sequence's least GPU-time among the degrees that T allows fits the GPUs; it is found
exactly by walking the ``t_i(c)`` in order. This contains two simpler bounds: the area (every
sequence at its smallest feasible degree) and each sequence alone at its fastest degree.

Under "barrier" one more bound holds: the step that runs a long sequence i at degree c lasts at
least ``t_i(c) + overhead``; in it the other ``n - c`` GPUs take at most ``m`` tokens each, and
at most that step's length of work, so the rest of the others' least GPU-time waits for the
other steps, each as long as its average GPU's load at least. Taking i's best degree, for each
of the longest sequences, this catches a long sequence next to memory-bound short ones.

``S_min`` is the fewest steps: ``ceil(sum l / (n*m))``, at least one per sequence longer than
``n*m/2`` (two of them never share a step), and at least one.
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
    """The bound above, exact."""
    k = inst.scale  # every time below is k times the real one, an int (CPInstance.scaled_time)
    fixed = k * inst.overhead
    n = inst.n_gpus
    # Each sequence's options, narrowest first: (time on each of its GPUs, GPU-time, degree),
    # times k.
    options = []
    for i, lo in enumerate(inst.lengths):
        w = inst.work(i)
        ts = [(inst.scaled_time(c, w, lo) - fixed, c) for c in inst.degrees if lo <= c * inst.m]
        assert ts  # make_cp_instance refused longer sequences
        options.append([(t, c * t, c) for t, c in ts])
    bound = Fraction(_least_makespan(options, n), k) + min_steps(inst) * inst.overhead
    if inst.sync == "barrier":
        bound = max(bound, _long_step_bound(inst, options))
    return bound


#: The barrier bound looks at this many sequences, the slowest alone (it binds for the long).
_LONG = 16


def _long_step_bound(inst: CPInstance, options: list[list[tuple[int, int, int]]]) -> Fraction:
    """The barrier bound above: the best, over the longest sequences i, of i's step at its
    best degree plus the others' work its step cannot take, spread over the GPUs."""
    k, n, m = inst.scale, inst.n_gpus, inst.m
    least = [opts[0][1] for opts in options]  # GPU-time at the smallest feasible degree
    if len(least) < 2:
        return Fraction(0)
    total = sum(least)
    # The two largest GPU-times per token: the others' largest is one of them.
    ratios = sorted(range(len(least)), key=lambda j: Fraction(least[j], inst.lengths[j]))[-2:]
    best = Fraction(0)
    for i in sorted(range(len(least)), key=lambda i: -min(o[0] for o in options[i]))[:_LONG]:
        j = ratios[-1] if ratios[-1] != i else ratios[-2]
        rest = total - least[i]
        per_token = Fraction(least[j], inst.lengths[j])
        steps = []
        for t, _, c in options[i]:
            taken = min(per_token * (n - c) * m, Fraction((n - c) * t), Fraction(rest))
            steps.append(Fraction(t) + max(Fraction(0), rest - taken) / n)
        best = max(best, min(steps))
    return best / k + min_steps(inst) * inst.overhead


def _least_makespan(options: list[list[tuple[int, int, int]]], n: int) -> Fraction:
    """The smallest T with every sequence at a degree whose time is at most T, and the least
    GPU-time of those degrees summed at most ``n*T``."""
    floor = max(min(o[0] for o in opts) for opts in options)  # each sequence alone
    # chosen[i]: the narrowest option allowed so far (the least GPU-time: it grows with c).
    chosen = [min(j for j, o in enumerate(opts) if o[0] <= floor) for opts in options]
    area = sum(opts[j][1] for opts, j in zip(options, chosen, strict=True))
    later = sorted((o[0], i, j) for i, opts in enumerate(options) for j, o in enumerate(opts)
                   if o[0] > floor and j < chosen[i])
    level = floor
    for t, i, j in later:
        if area <= n * level:
            return Fraction(level)
        if Fraction(area, n) < t:  # the area fits before the next degree opens
            return Fraction(area, n)
        level = t
        if j < chosen[i]:
            area -= options[i][chosen[i]][1] - options[i][j][1]
            chosen[i] = j
    return max(Fraction(level), Fraction(area, n))
