"""refit_in_steps: the design's fit, its terms chosen and its level set on in-step times.

Simulated: timed alone, a micro-batch pays a size term (1 ns * T^2, as a CPU's caches make it
when micro-batches of every size alternate); inside steps it does not, and everything runs 10%
faster. The refit must drop the size term and find the 0.9 factor."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("scipy")

from seqpart.solver.measure import calibrate, make_design  # noqa: E402
from seqpart.solver.measure.fit import refit_in_steps  # noqa: E402
from seqpart.solver.measure.profile import CostProfile, profile_from_json  # noqa: E402


def _core(mb: list[int]) -> float:
    return 2e-3 + 40e-6 * sum(mb) + 20e-9 * sum(x * x for x in mb)


class Alone:
    """The isolated context: the core cost plus a size term, on a simulated clock."""

    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def __call__(self, lengths: list[int]) -> None:
        self.now += _core(lengths) + 1e-9 * sum(lengths) ** 2


@pytest.fixture(scope="module")
def prior() -> CostProfile:
    model = Alone()
    return calibrate(model, design=make_design(max_tokens=4096, max_count=16, held_out=8),
                     repeats=1, warmup=0, progress=False, clock=model.clock, min_seconds=0,
                     model={"kind": "simulated"})


def _steps(seed: int, count: int) -> tuple[list[list[list[int]]], list[list[float]]]:
    """Ranks of 2-5 micro-batches of 1-6 sequences, timed in the step context."""
    rng = np.random.default_rng(seed)
    runs = [[[int(x) for x in rng.integers(16, 1200, size=int(rng.integers(1, 7)))]
             for _ in range(int(rng.integers(2, 6)))] for _ in range(count)]
    return runs, [[0.9 * _core(mb) for mb in run] for run in runs]


def test_the_size_term_is_dropped_and_the_step_level_found(prior: CostProfile) -> None:
    assert "total_sq" in prior.extended["coefficients"]  # the design alone keeps the size term
    runs, secs = _steps(0, 24)
    held, held_s = _steps(1, 8)
    p = refit_in_steps(prior, runs, secs, held_out=held, held_out_seconds=held_s)
    assert p.planning_fit == "base" and p.extended is None
    assert p.design["context"] == "steps" and p.design["step_runs"] == 24
    # the base fit of the design (no size term) absorbs part of T^2 in b; the level then puts the
    # steps' times right within a few percent, and every step's total within 5%
    assert 0.8 < p.design["step_level"] < 0.95
    assert p.fit_error["held_out_steps"]["max_rel"] < 0.05
    assert p.fit_error["held_out"]["count"] == sum(len(r) for r in held)
    # the refit round-trips through the file, which keeps to the documented schema
    again = profile_from_json(p.to_json())
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((Path(__file__).parents[3] / "docs" / "cost_profile.schema.json").read_text())
    jsonschema.validate(json.loads(json.dumps(p.to_json())), schema)
    assert again.seconds([100, 300]) == pytest.approx(p.seconds([100, 300]))


def test_a_context_that_keeps_the_size_term_keeps_it(prior: CostProfile) -> None:
    runs, _ = _steps(2, 24)
    secs = [[0.9 * (_core(mb) + 1e-9 * sum(mb) ** 2) for mb in run] for run in runs]
    p = refit_in_steps(prior, runs, secs)
    assert p.planning_fit == "extended" and "total_sq" in p.extended["coefficients"]
    assert p.design["step_level"] == pytest.approx(0.9, rel=1e-3)
    assert p.seconds([500, 700]) == pytest.approx(0.9 * (_core([500, 700]) + 1e-9 * 1200 ** 2), rel=1e-3)


def test_bad_records_are_named(prior: CostProfile) -> None:
    runs, secs = _steps(0, 6)
    with pytest.raises(ValueError, match="runs has 6 runs but 5 rows of seconds"):
        refit_in_steps(prior, runs, secs[:5])
    with pytest.raises(ValueError, match="too few to refit on"):
        refit_in_steps(prior, runs[:3], secs[:3])
    bad = [list(row) for row in secs]
    bad[2][0] = float("nan")
    with pytest.raises(ValueError, match=r"runs\[2\]'s seconds must be finite"):
        refit_in_steps(prior, runs, bad)
    with pytest.raises(ValueError, match=r"runs\[1\] has 2 micro-batches and 1 seconds"):
        refit_in_steps(prior, [runs[0], runs[1][:2], *runs[2:]], [secs[0], [1.0], *secs[2:]])
    with pytest.raises(ValueError, match=r"runs\[0\]\[0\] must be a non-empty sequence"):
        refit_in_steps(prior, [[[]], *runs[1:]], [[1.0], *secs[1:]])
    empty = CostProfile(overhead_s=1e-3, linear_s=1e-6, quadratic_s=1e-9, device="cpu",
                        dtype="float32", torch_version="x", model={"kind": "x"})
    with pytest.raises(ValueError, match="too few design measurements"):
        refit_in_steps(empty, runs, secs)


def test_a_design_fit_that_prices_steps_at_zero_is_refused(prior: CostProfile,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import seqpart.solver.measure.fit as fit

    monkeypatch.setattr(fit, "fit_terms", lambda mbs, secs, terms: fit.Fit(coef=dict.fromkeys(terms, 0.0)))
    runs, secs = _steps(0, 6)
    with pytest.raises(ValueError, match="prices some of runs at 0 s"):
        refit_in_steps(prior, runs, secs)


def test_a_refitted_profile_plots_and_says_so(prior: CostProfile, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.figure

    from seqpart.solver.measure.plot import plot_profile

    titles: list[str] = []
    real = matplotlib.figure.Figure.suptitle
    monkeypatch.setattr(matplotlib.figure.Figure, "suptitle",
                        lambda fig, text, **kw: titles.append(text) or real(fig, text, **kw))
    runs, secs = _steps(0, 24)
    refit = refit_in_steps(prior, runs, secs)
    picture = plot_profile(refit, tmp_path / "refit.png")
    assert picture.stat().st_size > 0
    assert f"refitted in the step context (factor {refit.design['step_level']:.3f})" in titles[0]
    plot_profile(prior, tmp_path / "alone.png")
    assert "refitted" not in titles[1]
