"""The zigzag split of CP micro-batches, the schedule checks, and the CP cost fit (pure parts)."""

from __future__ import annotations

import pytest

from seqpart.solver.measure.cp import CPLayout, barrier_seconds, check_steps, in_units, reference_schedules
from seqpart.solver.measure.cp.costfit import fit_model, group_seconds


def test_zigzag_pairs_an_early_chunk_with_a_late_one() -> None:
    lay = [CPLayout((10, 3), 2, r) for r in range(2)]
    # 10 tokens in 4 chunks [0,3) [3,6) [6,8) [8,10); 3 tokens: [0,1) [1,2) [2,3) and one empty
    assert lay[0].chunks == [[(0, 3), (8, 10)], [(0, 1)]]
    assert lay[1].chunks == [[(3, 6), (6, 8)], [(1, 2), (2, 3)]]
    assert lay[0].local_starts == [0, 5, 6] and lay[1].local_starts == [0, 5, 7]
    assert sorted(lay[0].local_index + lay[1].local_index) == list(range(13))
    where = lay[0].gather_index()
    held = [r * lay[0].padded + i for r in range(2) for i in range(len(lay[r].local_index))]
    assert sorted(where) == sorted(held)
    for pos, row in enumerate(where):  # each packed position maps to the rank row that holds it
        rank, i = divmod(row, lay[0].padded)
        assert lay[rank].local_index[i] == pos


def test_degree_one_holds_everything_in_order() -> None:
    lay = CPLayout((4, 2), 1, 0)
    assert lay.local_index == list(range(6)) and lay.local_starts == [0, 4, 6]


def test_bad_degree_rank_and_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="degree must be an int >= 1"):
        CPLayout((4,), 0, 0)
    with pytest.raises(ValueError, match="rank=2 is not a rank of a group of degree 2"):
        CPLayout((4,), 2, 2)
    with pytest.raises(ValueError, match="lengths must be a non-empty list"):
        CPLayout((4, 0), 2, 0)


def test_check_steps_accepts_the_written_out_schedules() -> None:
    for steps in reference_schedules().values():
        assert len(check_steps(steps, 2, 5)) == 2
    with pytest.raises(ValueError, match="run sequences"):
        check_steps([[((0, 1), (0, 1))]], 2, 3)


def test_the_model_fit_recovers_exact_coefficients() -> None:
    true = {"overhead": 2e-3, "linear": 3e-5, "quadratic": 4e-8, "cp_comm": 1e-5}
    design = [[128] * 4, [512], [1024], [256, 768], [2048], [64] * 8]
    rows = [(mb, c, group_seconds(true, mb, c)) for mb in design for c in (1, 2)]
    fit = fit_model(rows)
    for k, v in true.items():
        assert fit[k] == pytest.approx(v, rel=1e-6)
    units = in_units(fit)
    assert units["linear"] == 24576 and units["cp_comm_over_linear"] == pytest.approx(1 / 3)


def test_barrier_time_is_the_sum_of_each_steps_slowest_group() -> None:
    coef = {"overhead": 1.0, "linear": 0.0, "quadratic": 1.0, "cp_comm": 0.5}
    lengths = [4, 3, 3, 1, 1]
    s = reference_schedules()
    # seqpart: CP2 {4,1,1}: 1 + 18/2 + 0.5*6/2 = 11.5, then 3 | 3: 1 + 9 = 10
    assert barrier_seconds(coef, lengths, s["seqpart"]) == pytest.approx(21.5)
    # greedy: 4 | {3, 1}: 1 + 16, then 3 | 1: 1 + 9
    assert barrier_seconds(coef, lengths, s["megatron_greedy"]) == pytest.approx(27.0)


def test_written_out_schedules_agree_with_the_planner_module() -> None:
    dcp = pytest.importorskip("seqpart.solver.dynamic_cp")
    from seqpart.solver.measure.cp import CPU_CAP, CPU_LENGTHS

    s = reference_schedules()
    greedy = dcp.megatron_dynamic_cp_schedule(list(CPU_LENGTHS), 2, CPU_CAP)
    assert [[(tuple(r), tuple(i)) for r, i in step] for step in greedy] == s["megatron_greedy"]
    # the planner's exact cp_step_time and this module's float evaluation of the same formula
    coef = {"overhead": 512.0, "linear": 24576.0, "quadratic": 1.0, "cp_comm": 6144.0}
    for steps in s.values():
        exact = dcp.cp_step_time(list(CPU_LENGTHS), steps, cost=(24576, 1), cp_comm=6144, overhead=512)
        assert barrier_seconds(coef, list(CPU_LENGTHS), steps) == pytest.approx(float(exact), rel=1e-12)


def test_units_without_a_linear_term_still_give_a_planner_cost() -> None:
    quad = in_units({"overhead": 1e-3, "linear": 0.0, "quadratic": 2e-9, "cp_comm": 4e-9})
    assert quad["quadratic"] == 1 and quad["cp_comm"] == 2 and quad["cp_comm_over_linear"] is None
    flat = in_units({"overhead": 1e-3, "linear": 0.0, "quadratic": 0.0, "cp_comm": 0.0})
    assert flat["overhead"] == 24576 and flat["linear"] == 1
