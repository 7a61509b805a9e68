"""The exact makespan of one data-parallel rank's pipeline schedule and its lower bound.

Why: a rank's step time under pipeline parallelism is what the trainer's schedule makes of its
micro-batches, not a closed formula. This module evaluates that schedule exactly.

The model:

* the rank has ``pp`` devices (pipeline stages) and ``vpp`` model chunks per device, so
  ``pp*vpp`` virtual stages; virtual stage ``v`` is chunk ``v // pp`` on device ``v % pp``;
* micro-batch ``j`` takes ``t_j`` on every device (its forward and backward over the device's
  chunks), split evenly over the chunks and between forward and backward in the ratio
  ``forward:backward`` (default 1:2): a chunk's forward takes ``t_j*F/((F+B)*vpp)``, its backward
  ``t_j*B/((F+B)*vpp)``;
* the forward of ``(j, v)`` needs the forward of ``(j, v-1)``; the backward of ``(j, v)`` needs
  the backward of ``(j, v+1)``, and on the last virtual stage its own forward; a result that
  crosses devices arrives ``p2p_latency`` later;
* each device runs its operations one at a time in the schedule's order, each as soon as the
  device is free and its input has arrived. The makespan is the last operation's end: the
  longest path of that graph, computed in O(pp*vpp*m).

Schedules (``PipelineModel.schedule``):

* ``"megatron"`` (default): what Megatron-LM runs, ``"1f1b"`` when ``vpp == 1``, else
  ``"interleaved"``;
* ``"1f1b"``: non-interleaved 1F1B (Megatron's ``forward_backward_pipelining_without_
  interleaving``): ``pp-s-1`` warm-up forwards on device ``s``, then one forward one backward,
  then the remaining backwards;
* ``"interleaved"``: interleaved 1F1B (Megatron's ``forward_backward_pipelining_with_
  interleaving``): forwards visit the chunks in groups of ``group`` micro-batches (default
  ``pp``; the last group takes what is left), backwards the same with the chunks reversed;
  ``2*(pp-s-1) + (vpp-1)*group`` warm-up forwards on device ``s`` (all of them when that
  reaches ``m*vpp``), then one forward one backward, then the remaining backwards;
* ``"gpipe"``: all forwards, then all backwards, in the same chunk order.

Not modelled: blocking p2p pairing, memory limits, communication overlapping compute. Exact:
times are kept multiplied by :func:`scale` (``vpp*(F+B)``), ints; :func:`makespan` returns an
int or a Fraction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any

import numpy as np

SCHEDULES = ("megatron", "1f1b", "interleaved", "gpipe")
FWD, BWD = 0, 1  # operation kinds


#: Past this many virtual stages (``pp * vpp``) a size is a mistake: each holds a layer or more.
MAX_VIRTUAL_STAGES = 1024
#: The most operations (``2*pp*vpp*m``) a schedule is built with: about 5.5 us each here (2-core
#: AMD EPYC, Python 3.11), so 1.5 s; past it a count is refused (planners skip it).
MAX_SCHEDULE_OPERATIONS = 1 << 18


def _positive(x: Any, name: str, zero: bool = False) -> int:
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {x!r} ({type(x).__name__})")
    if x < 0 or (x == 0 and not zero):
        raise ValueError(f"{name} must be {'>= 0' if zero else '>= 1'}, got {x}")
    return int(x)


def pipeline_sizes(pp: Any, vpp: Any) -> tuple[int, int]:
    """``pp`` and ``vpp``, checked before any work (ints >= 1, at most MAX_VIRTUAL_STAGES)."""
    pp, vpp = _positive(pp, "pp"), _positive(vpp, "vpp")
    if pp * vpp > MAX_VIRTUAL_STAGES:
        raise ValueError(f"pp={pp} x vpp={vpp} = {pp * vpp} virtual pipeline stages, over the "
                         f"{MAX_VIRTUAL_STAGES} modelled: pass the pipeline depth as pp and the "
                         "model chunks per device as vpp")
    return pp, vpp


def count_error(pp: int, vpp: int, m: int, model: PipelineModel | None = None) -> str | None:
    """Why ``m`` micro-batches per rank cannot run, or None: Megatron-LM's interleaved schedule
    takes groups of N per chunk (``model.group``, default ``pp``) only when ``pp <= N <= m`` and
    ``m % N`` is 0 or at least ``pp``; nothing past MAX_SCHEDULE_OPERATIONS is evaluated."""
    model = model or DEFAULT_MODEL
    if pp > 1 and 2 * pp * vpp * m > MAX_SCHEDULE_OPERATIONS:
        return (f"m={m} micro-batches on pp={pp} x vpp={vpp} stages is more than the "
                f"{MAX_SCHEDULE_OPERATIONS} operations a schedule is evaluated with")
    group = model.group or pp
    if pp == 1 or model.resolved(vpp) != "interleaved" or (
            pp <= group <= m and (m % group == 0 or m % group >= pp)):
        return None
    return (f"Megatron-LM's interleaved schedule runs micro-batches in groups of N={group} per "
            f"chunk and needs pp={pp} <= N <= m and m % N either 0 or at least pp; m={m} is "
            f"refused: keep multiple_of a multiple of {group} (the default multiple_of=pp does), "
            "or use schedule='1f1b' with vpp=1")


@dataclass(frozen=True)
class PipelineModel:
    """Which schedule a rank runs and how its time splits: ``forward:backward`` the share of a
    micro-batch's time in each pass (ints, default 1:2), ``p2p_latency`` the time (in the
    micro-batch times' units, an int) a result takes from one device to the next, ``group``
    the interleaved schedule's micro-batch group per chunk (None: ``pp``, Megatron's default)."""

    schedule: str = "megatron"
    forward: int = 1
    backward: int = 2
    p2p_latency: int = 0
    group: int | None = None

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule={self.schedule!r}: use one of {', '.join(SCHEDULES)}")
        _positive(self.forward, "forward")
        _positive(self.backward, "backward")
        _positive(self.p2p_latency, "p2p_latency", zero=True)
        if self.group is not None:
            _positive(self.group, "group")

    def resolved(self, vpp: int) -> str:
        """The concrete schedule: "megatron" is "1f1b" at ``vpp == 1``, else "interleaved"."""
        if self.schedule == "megatron":
            return "1f1b" if vpp == 1 else "interleaved"
        if self.schedule == "1f1b" and vpp != 1:
            raise ValueError(
                f"schedule='1f1b' is not interleaved, so vpp must be 1 (got {vpp}): use "
                "schedule='interleaved' or 'megatron'"
            )
        return self.schedule


DEFAULT_MODEL = PipelineModel()


def scale(vpp: int, model: PipelineModel = DEFAULT_MODEL) -> int:
    """Every time in this module's scaled functions is the real time times this (an int)."""
    return vpp * (model.forward + model.backward)


# ----------------------------------------------------------------------------- the orders


def _chunk_table(m: int, vpp: int, group: int) -> list[tuple[int, int]]:
    """The forward order of (micro-batch, chunk) pairs: ``group`` micro-batches through chunk 0,
    the same ones through chunk 1, ...; the last group takes every micro-batch left."""
    out: list[tuple[int, int]] = []
    lo = 0
    while lo < m:
        hi = m if lo + group >= m else lo + group
        out += [(j, c) for c in range(vpp) for j in range(lo, hi)]
        lo = hi
    return out


def device_orders(
    pp: int, vpp: int, m: int, model: PipelineModel = DEFAULT_MODEL
) -> list[list[tuple[int, int, int]]]:
    """Each device's operations in execution order, as (kind, micro-batch, chunk) with kind
    ``FWD`` (0) or ``BWD`` (1), for the model's schedule."""
    (pp, vpp), m = pipeline_sizes(pp, vpp), _positive(m, "m")
    name = model.resolved(vpp)
    group = model.group or pp
    why = count_error(pp, vpp, m, model)
    if why is not None:
        raise ValueError(why)
    table = _chunk_table(m, vpp, group)
    fwd = [(FWD, j, c) for j, c in table]
    bwd = [(BWD, j, vpp - 1 - c) for j, c in table]
    total = m * vpp
    out = []
    for s in range(pp):
        if name == "gpipe":
            warm = total
        elif name == "1f1b":
            warm = min(pp - s - 1, total)
        else:
            warm = min(2 * (pp - s - 1) + (vpp - 1) * group, total)
        ops = fwd[:warm]
        for i in range(total - warm):
            ops += [fwd[warm + i], bwd[i]]
        ops += bwd[total - warm :]
        out.append(ops)
    return out


@dataclass(frozen=True)
class _Compiled:
    """The schedule's graph in a topological order: per operation the index of the one before
    it on its device (-1: none), of its input (-1: none), whether the input crosses devices,
    its micro-batch and kind; and each device's last operation."""

    prev: tuple[int, ...]
    dep: tuple[int, ...]
    cross: tuple[bool, ...]
    mb: tuple[int, ...]
    kind: tuple[int, ...]
    last: tuple[int, ...]


@lru_cache(maxsize=512)
def _compile(pp: int, vpp: int, m: int, model: PipelineModel) -> _Compiled:
    orders = device_orders(pp, vpp, m, model)
    return _compile_orders(pp, vpp, m, tuple(tuple(o) for o in orders))


def schedule_error(pp: int, vpp: int, m: int, model: PipelineModel = DEFAULT_MODEL) -> str | None:
    """Why the model's schedule cannot run ``m`` micro-batches (a group out of range, or an
    order that deadlocks, as the interleaved one does for some counts that are not a multiple
    of ``pp``), or None when it can: a planner skips such counts."""
    if pp == 1:
        return None
    why = count_error(pp, vpp, m, model)
    if why is not None:
        return why
    try:
        _compile(pp, vpp, m, model)
    except ValueError as err:
        return str(err)
    return None


def scaled_makespan_of(
    orders: Sequence[Sequence[tuple[int, int, int]]],
    times: Sequence[int],
    pp: int,
    vpp: int,
    model: PipelineModel = DEFAULT_MODEL,
) -> int:
    """The makespan, times :func:`scale`, of any per-device order of the operations
    ((kind, micro-batch, chunk) per device, as :func:`device_orders` gives): for checking
    schedules other than the named ones (ValueError when the order deadlocks)."""
    m = len(times)
    frozen = tuple(tuple((int(k), int(j), int(c)) for k, j, c in o) for o in orders)
    if len(frozen) != pp:
        raise ValueError(f"orders has {len(frozen)} devices, expected pp={pp}")
    g = _compile_orders(pp, vpp, m, frozen)
    t = [int(x) for x in times]
    lat = model.p2p_latency * scale(vpp, model)
    return int(_longest_path(g, [model.forward * x for x in t], [model.backward * x for x in t],
                             lat, max))


def _compile_orders(
    pp: int, vpp: int, m: int, orders: tuple[tuple[tuple[int, int, int], ...], ...]
) -> _Compiled:
    """Run the devices' orders as the event-driven simulation would (each device takes its next
    operation once the input is done), recording the topological order it finds; a schedule
    that stalls with work left would deadlock, which is an error."""
    nv = pp * vpp
    done: dict[tuple[int, int, int], int] = {}  # (kind, j, v) -> topological index
    prev, dep, cross, mb, kind = [], [], [], [], []
    last = [-1] * pp
    ptr = [0] * pp
    queue = list(range(pp))
    while queue:
        d = queue.pop()
        ops = orders[d]
        while ptr[d] < len(ops):
            k, j, c = ops[ptr[d]]
            v = c * pp + d
            if k not in (FWD, BWD) or not (0 <= j < m and 0 <= c < vpp) or (k, j, v) in done:
                raise ValueError(
                    f"device {d} runs {(k, j, c)!r}: each operation is (kind 0 or 1, micro-batch "
                    f"in range({m}), chunk in range({vpp})), once"
                )
            if k == FWD:
                need = (FWD, j, v - 1) if v > 0 else None
            else:
                need = (FWD, j, v) if v == nv - 1 else (BWD, j, v + 1)
            if need is not None and need not in done:
                break
            idx = len(prev)
            done[(k, j, v)] = idx
            prev.append(last[d])
            dep.append(-1 if need is None else done[need])
            cross.append(need is not None and need[2] % pp != d)
            mb.append(j)
            kind.append(k)
            last[d] = idx
            ptr[d] += 1
            # The device that may wait for this result: the next forward's or backward's.
            nxt = v + 1 if k == FWD else v - 1
            if 0 <= nxt < nv and nxt % pp != d:
                queue.append(nxt % pp)
    expected = 2 * m * vpp
    if len(prev) != pp * expected or any(len(o) != expected for o in orders):
        raise ValueError(
            "the pipeline order deadlocks or is incomplete: every device must run the forward "
            "and backward of every micro-batch on each of its chunks, each after its input"
        )
    return _Compiled(tuple(prev), tuple(dep), tuple(cross), tuple(mb), tuple(kind), tuple(last))


# ----------------------------------------------------------------------------- evaluation


def _dtype(times: Sequence[Any], pp: int, vpp: int, model: PipelineModel) -> Any:
    """int64 when no path length can reach 2**62, else exact Python ints (object arrays)."""
    t = np.asarray(times, dtype=object)
    worst = (int(t.sum(axis=-1).max()) * pp + 1) * scale(vpp, model) * (
        1 + 2 * model.p2p_latency
    ) * 2
    return np.int64 if worst < 2**62 else object


def _longest_path(g: _Compiled, fwd: list[Any], bwd: list[Any], lat: int, maxf: Any) -> Any:
    """End of every device's last operation, maxed: the makespan. ``fwd[j]``/``bwd[j]`` are a
    chunk's scaled durations for micro-batch j (ints, or arrays over many candidates)."""
    ends: list[Any] = []
    append = ends.append
    for p, d, x, j, k in zip(g.prev, g.dep, g.cross, g.mb, g.kind, strict=True):
        if d < 0:
            start = ends[p] if p >= 0 else 0
        else:
            ready = ends[d] + lat if x else ends[d]
            start = maxf(ends[p], ready) if p >= 0 else ready
        append(start + (bwd[j] if k else fwd[j]))
    out = ends[g.last[0]]
    for i in g.last[1:]:
        out = maxf(out, ends[i])
    return out


_PY_ROWS = 12  # up to this many rows, one by one in Python ints (numpy's call cost dominates)


def scaled_makespans(
    times: Any, pp: int, vpp: int, model: PipelineModel = DEFAULT_MODEL
) -> list[int]:
    """The makespan times :func:`scale` (exact ints) of each row of ``times`` (shape (R, m):
    R ranks or candidate orders, micro-batch times in execution order), in one pass."""
    pp, vpp = pipeline_sizes(pp, vpp)
    rows = [list(r) for r in times]
    if not rows:
        return []
    m = len(rows[0])
    if m == 0 or any(len(r) != m for r in rows):
        raise ValueError("times must be rows of equal, non-zero length (one per rank or order)")
    sc = scale(vpp, model)
    if pp == 1:  # one device runs everything back to back
        return [sc * sum(r) for r in rows]
    g = _compile(pp, vpp, m, model)
    lat = model.p2p_latency * sc
    if len(rows) <= _PY_ROWS:  # numpy's per-call cost outweighs its width on a few rows
        return [int(_longest_path(g, [model.forward * int(x) for x in r],
                                  [model.backward * int(x) for x in r], lat, max)) for r in rows]
    arr = np.asarray(rows, dtype=_dtype(rows, pp, vpp, model)).T.copy()
    out = _longest_path(g, list(model.forward * arr), list(model.backward * arr), lat, np.maximum)
    return [int(x) for x in out.tolist()]


def makespan(
    times: Sequence[int], pp: int, vpp: int = 1, model: PipelineModel = DEFAULT_MODEL
) -> int | Fraction:
    """One rank's makespan with its micro-batches run in the order of ``times`` (non-negative
    ints, one per micro-batch): an int, or a Fraction when :func:`scale` does not divide it."""
    if len(times) == 0:
        return 0
    for t in times:
        _positive(t, "times[j]", zero=True)
    scaled = scaled_makespans([list(times)], pp, vpp, model)[0]
    return _unscale(scaled, scale(vpp, model))


def _unscale(x: int, sc: int) -> int | Fraction:
    q, r = divmod(x, sc)
    return q if r == 0 else Fraction(x, sc)


# ----------------------------------------------------------------------------- lower bound


def scaled_lower_bound(
    times: Sequence[int], pp: int, vpp: int, model: PipelineModel = DEFAULT_MODEL
) -> int:
    """A lower bound, times :func:`scale`, on the makespan of these micro-batches in every order
    and under every schedule (any per-device order of the operations), the max of:

    * the last device's work on the ``k`` longest micro-batches, for every ``k``: it cannot
      start before one of them crossed the ``pp-1`` stages before it, nor end before its
      backward crossed them back, each at least the ``k``-th longest's ``(pp-1)*t_k/vpp`` in
      all: ``T_k + (pp-1)*t_k/vpp`` (``T_k`` the ``k`` longest's sum) plus ``2(pp-1)``
      latencies (a one-machine relaxation with release and delivery times);
    * the longest micro-batch's whole path: its forward and backward through all ``pp*vpp``
      virtual stages one after another, ``pp*max t`` plus ``2(pp*vpp-1)`` latencies.

    Equal to the textbook makespans (and so tight) for equal times.
    """
    if len(times) == 0:
        return 0
    sc = scale(vpp, model)
    if pp == 1:
        return sc * sum(times)
    lat = model.p2p_latency * sc
    fb = model.forward + model.backward
    desc = sorted((int(t) for t in times), reverse=True)
    top, load = 0, 0
    for t in desc:
        top += t
        load = max(load, sc * top + (pp - 1) * fb * t)
    path = pp * sc * desc[0] + 2 * (pp * vpp - 1) * lat
    return max(load + 2 * (pp - 1) * lat, path)


def scaled_load_bound(total: int, m: int, low: int, pp: int, vpp: int,
                      model: PipelineModel = DEFAULT_MODEL) -> int:
    """A lower bound, times :func:`scale`, on the makespan of any ``m`` micro-batches of times
    summing to at least ``total``, each at least ``low``: the minimum over such times of the
    last-device terms of :func:`scaled_lower_bound`. With ``b = (pp-1)/vpp`` and
    ``q = b/(1+b)``, ``T_k + b*t_k <= Z`` for every ``k`` forces ``T_k <= Z*(1 - q^k)``, so
    ``Z >= total/(1 - q^m)``; and ``total + b*low`` (``k = m``)."""
    sc = scale(vpp, model)
    if pp == 1:
        return sc * total
    lat2 = 2 * (pp - 1) * model.p2p_latency * sc
    fb = model.forward + model.backward
    flat = sc * total + (pp - 1) * fb * low
    if m > 256:  # q^m is negligible: the geometric term is total*(1 + tiny)
        return flat + lat2
    d, b = pp - 1 + vpp, pp - 1  # q = b/d
    geo = sc * total * d**m // (d**m - b**m)
    return max(flat, geo) + lat2


def makespan_lower_bound(
    times: Sequence[int], pp: int, vpp: int = 1, model: PipelineModel = DEFAULT_MODEL
) -> int | Fraction:
    """:func:`scaled_lower_bound` in the times' units (exact)."""
    return _unscale(scaled_lower_bound(times, pp, vpp, model), scale(vpp, model))
