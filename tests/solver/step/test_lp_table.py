"""The bundled pipeline LP certificates (solver/step/lp_certificates.json) are the LP's own, and
sound."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from seqpart.solver.step import bound, step_lower_bound
from seqpart.solver.step.makespan_optimum import lp_certificate
from seqpart.solver.step.pipeline import DEFAULT_MODEL, scaled_makespans

FREE = replace(DEFAULT_MODEL, p2p_latency=0)
CERTIFICATES = bound.bundled_certificates()


def test_the_table_covers_the_common_pipelines() -> None:
    for pp, vpp, m in [(2, 1, 256), (4, 1, 64), (8, 1, 128), (4, 2, 64), (8, 2, 64), (8, 4, 32)]:
        assert (pp, vpp, m) in CERTIFICATES


@pytest.mark.parametrize("key", [(2, 1, 7), (4, 1, 13), (8, 1, 9), (4, 2, 8), (3, 1, 5)])
def test_a_bundled_certificate_is_the_one_the_lp_gives(key: tuple[int, int, int]) -> None:
    assert CERTIFICATES[key] == lp_certificate(*key, FREE)


@pytest.mark.parametrize("key", [(2, 1, 5), (4, 1, 9), (8, 1, 12), (4, 2, 8), (8, 2, 16)])
def test_no_split_of_a_load_runs_faster_than_its_certificate(key: tuple[int, int, int]) -> None:
    pp, vpp, m = key
    cost, _, flow = CERTIFICATES[key]
    rng = random.Random(sum(key))
    rows = [[rng.randint(1, 50) for _ in range(m)] for _ in range(200)]
    rows += [[10] * m, [1] * (m - 1) + [100], [100] * (m - 1) + [1]]
    for row, value in zip(rows, scaled_makespans(rows, pp, vpp, DEFAULT_MODEL), strict=True):
        assert flow * value >= cost * sum(row)


def test_the_table_raises_the_bound_of_the_default_schedule(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(7)
    lengths = [rng.randint(100, 4000) for _ in range(256)]
    args = {"pp": 8, "overhead": 640}
    with_table = step_lower_bound(lengths, 2, 8000, **args)
    monkeypatch.setattr(bound, "bundled_certificates", dict)
    assert step_lower_bound(lengths, 2, 8000, **args) < with_table
