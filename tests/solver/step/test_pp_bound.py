"""The exact optimum of tiny pipeline steps (makespan_optimum) against a dumb brute force, and the
step bound at pp > 1 (bound.py) never above that optimum at any count."""

from __future__ import annotations

import random

import pytest
from _brute_pp import brute_step, brute_step_at_count

import seqpart.solver.step.bound as bound_module
from seqpart.solver.step.bound import capped_load_bound, ends_bound, exact_scaled_bounds
from seqpart.solver.step.makespan_optimum import (
    check_result,
    lp_certificate,
    optimal_at_count,
    optimal_step,
    runnable_counts,
)
from seqpart.solver.step.model import make_instance
from seqpart.solver.step.pipeline import PipelineModel, scale, scaled_load_bound, scaled_makespans

TINY = [  # lengths, dp, cap, overhead, pp, vpp, schedule, (F, B), latency
    ([5, 3, 8, 2], 1, 10, 1, 2, 1, "megatron", (1, 2), 0),
    ([4, 4, 1, 7, 2], 2, 8, 0, 3, 1, "gpipe", (1, 1), 2),
    ([9, 1, 3, 3], 1, None, 2, 2, 2, "megatron", (1, 2), 0),
    ([6, 2, 5, 1, 4], 2, 7, 1, 2, 1, "1f1b", (2, 1), 1),
]


def _inst(lengths, dp, cap, over, pp, vpp, schedule, fb, lat):  # noqa: ANN001, ANN202
    model = PipelineModel(schedule=schedule, forward=fb[0], backward=fb[1], p2p_latency=lat)
    inst = make_instance(lengths, dp, cap, overhead=over, pp=pp, vpp=vpp, multiple_of=1,
                         pipeline=model)
    return inst, model


@pytest.mark.parametrize("case", TINY)
def test_optimum_matches_a_dumb_brute_force(case: tuple) -> None:
    inst, model = _inst(*case)
    for m in runnable_counts(inst, model):
        got = optimal_at_count(inst, model, m)
        assert got is not None and got[0] == brute_step_at_count(inst, model, m)
        assert check_result(inst, model, got) == got[0]
    best = optimal_step(inst, model)
    assert best is not None and (best[0], best[1]) <= brute_step(inst, model)
    assert best[0] == brute_step(inst, model)[0]
    assert sorted(set(best[2])) == list(range(inst.dp_size * best[1]))
    assert optimal_step(inst, model, work_limit=1) is None  # over the work limit: None


#: Instances where the ends, capped and LP terms raise the old bound (kept from a random search
#: of 10^4 instances; the bound met the optimum or stayed below it on every one).
KEPT = [
    ([46, 26, 27], 1, 50, 0, 2, 1, "megatron", (1, 1), 3, 3),
    ([12, 26, 55, 39], 1, None, 0, 3, 2, "gpipe", (1, 2), 0, 2),
    ([48, 41, 36, 13, 44], 1, 48, 0, 4, 1, "1f1b", (1, 2), 0, 5),
    ([48, 46, 26, 17, 27, 53], 1, 53, 5, 2, 1, "megatron", (1, 1), 0, 5),
    ([14, 59, 59, 14], 1, None, 5, 2, 1, "gpipe", (1, 2), 3, 2),
    ([24, 34, 37, 9, 6, 24], 2, 37, 5, 2, 1, "megatron", (1, 2), 3, 2),
    ([2, 39, 41, 5], 1, None, 5, 2, 1, "gpipe", (1, 1), 0, 2),
    ([47, 22, 25], 1, 47, 5, 2, 2, "megatron", (1, 1), 3, 2),
    ([31, 2, 15, 45, 8, 32], 1, 84, 5, 4, 2, "megatron", (1, 1), 0, 4),
    ([49, 58, 22, 43, 60], 1, 60, 0, 3, 1, "megatron", (1, 2), 0, 5),
    ([44, 13, 13], 1, 44, 0, 3, 1, "1f1b", (1, 1), 0, 2),
]


def _old_bounds(inst, model, monkeypatch: pytest.MonkeyPatch) -> dict[int, int]:  # noqa: ANN001
    with monkeypatch.context() as mp:
        mp.setattr(bound_module, "ends_bound", lambda *a, **k: 0)
        mp.setattr(bound_module, "capped_load_bound", lambda *a, **k: 0)
        mp.setattr(bound_module, "LP_BUDGET", 0)
        mp.setattr(bound_module, "bundled_certificates", dict)  # the bundled LP certificates
        return exact_scaled_bounds(inst, model)


@pytest.mark.parametrize("case", KEPT)
def test_bound_between_the_old_one_and_the_optimum(case: tuple,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    *args, m = case
    inst, model = _inst(*args)
    new, old = exact_scaled_bounds(inst, model), _old_bounds(inst, model, monkeypatch)
    for count in runnable_counts(inst, model):
        opt = optimal_at_count(inst, model, count)
        assert opt is not None and old[count] <= new[count] <= opt[0]
    assert new[m] > old[m]


def test_bound_below_the_optimum_on_random_tiny_instances() -> None:
    rng = random.Random(5)
    checked = 0
    while checked < 40:
        n, dp, pp, vpp = rng.randint(2, 5), rng.randint(1, 2), rng.randint(2, 4), rng.choice([1, 2])
        fb = rng.choice([(1, 2), (1, 1)])
        model = PipelineModel(schedule=rng.choice(["megatron", "gpipe"]), forward=fb[0],
                              backward=fb[1], p2p_latency=rng.choice([0, 2]))
        lengths = [rng.randint(1, 40) for _ in range(n)]
        cap = rng.choice([None, max(lengths), 2 * max(lengths)])
        try:
            inst = make_instance(lengths, dp, cap, overhead=rng.choice([0, 3]), pp=pp, vpp=vpp,
                                 multiple_of=1, pipeline=model)
        except ValueError:
            continue
        bounds = exact_scaled_bounds(inst, model)
        for m in runnable_counts(inst, model):
            opt = optimal_at_count(inst, model, m)
            assert opt is not None and bounds[m] <= opt[0], (lengths, dp, cap, m)
            checked += 1


def _capped_reference(total: int, m: int, top: int, pp: int, vpp: int, model: PipelineModel
                      ) -> int:
    """The least Z the greedy test allows, by plain bisection over Z."""
    ss, bb = scale(vpp, model), (pp - 1) * (model.forward + model.backward)

    def possible(z: int) -> bool:
        j = 0 if z < (ss + bb) * top else min(m, (z - (ss + bb) * top) // (ss * top) + 1)
        e = m - j
        return z >= ss * total and (z - ss * j * top) * bb**e <= (z - ss * total) * (ss + bb)**e

    lo, hi = ss * total - 1, ss * total + bb * top
    while hi - lo > 1:
        lo, hi = (lo, (lo + hi) // 2) if possible((lo + hi) // 2) else ((lo + hi) // 2, hi)
    return hi


def test_capped_load_bound_is_the_greedy_s_least_value() -> None:
    rng = random.Random(3)
    for _ in range(300):
        m, top = rng.randint(1, 30), rng.randint(1, 500)
        total, pp, vpp = rng.randint(1, m * top), rng.randint(2, 8), rng.randint(1, 3)
        model = PipelineModel(forward=rng.randint(1, 3), backward=rng.randint(1, 3))
        got = capped_load_bound(total, m, top, pp, vpp, model)
        assert got == _capped_reference(total, m, top, pp, vpp, model)
        assert got >= scaled_load_bound(total, m, 0, pp, vpp, model)  # the cap only adds


def test_ends_bound_on_equal_micro_batches_is_the_textbook_makespan() -> None:
    # m equal micro-batches of u: (m + pp - 1) * u, and the ends term meets it.
    for pp, m, u in ((4, 6, 5), (8, 3, 7), (2, 9, 1)):
        exact = scaled_makespans([[u] * m], pp, 1)[0]
        assert ends_bound(m * u, m, u, u, 2 * u, pp, 1) == exact


@pytest.mark.parametrize(("pp", "vpp", "m"), [(4, 1, 6), (2, 1, 5), (4, 2, 8), (3, 1, 3)])
def test_lp_certificate_is_below_every_split_and_above_the_geometric_bound(pp: int, vpp: int,
                                                                         m: int) -> None:
    model = PipelineModel(p2p_latency=1)
    cost, crossed, flow = lp_certificate(pp, vpp, m, PipelineModel())
    lat = model.p2p_latency * scale(vpp, model)
    rng = random.Random(m)
    rows = [[rng.randint(1, 50) for _ in range(m)] for _ in range(200)] + [[7] * m]
    for row, value in zip(rows, scaled_makespans(rows, pp, vpp, model), strict=True):
        assert cost * sum(row) + crossed * lat <= flow * value
    total = 1000 * m
    assert cost * total >= flow * (scaled_load_bound(total, m, 0, pp, vpp) - 1)
