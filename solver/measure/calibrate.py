"""Timing micro-batches and fitting the step cost: :func:`calibrate`, and in the step's own
context: :func:`calibrate_in_steps` (see :func:`~seqpart.solver.measure.fit.refit_in_steps`).

One code path for every device: a runner does a micro-batch's forward and backward and returns
when the device is done (the built-in runners synchronise CUDA), and this module only times it.
Repeats are *rounds*: every round times each micro-batch of the design once, in a fresh random
order, so a load change on a shared machine spreads over all micro-batches instead of biasing
the few timed while it lasted. The statistic is the median over rounds. Warm-up rounds (not
recorded) come first: allocator growth and one-time kernel selection land there. Short
micro-batches then get extra rounds until each has been timed for ``min_seconds`` in all (at
most ``max_rounds`` samples): a pause of a few milliseconds is noise on a large micro-batch but
a third of a small one's time, and small ones are cheap to repeat.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import MeasureError
from .checks import positive_int
from .design import Design, MicroBatch, make_design
from .fit import Fit, Run, refit_in_steps, select_and_fit
from .profile import CostProfile

if TYPE_CHECKING:
    from .replay import RunnerSpec, Schedule

Runner = Callable[[Sequence[int]], Any]


@dataclass(frozen=True)
class Timings:
    """Median seconds per micro-batch over the rounds, and the spread of the repeats."""

    micro_batches: tuple[MicroBatch, ...]
    seconds: np.ndarray  # median per micro-batch
    samples: np.ndarray  # [micro-batch, round]; NaN where a micro-batch had no extra round
    peak_bytes: np.ndarray | None = None  # CUDA only: peak memory of each micro-batch
    cpu_samples: np.ndarray | None = None  # the process's CPU seconds of the same runs

    @property
    def noise(self) -> float:
        """Median over micro-batches of (max - min) / median of their repeats."""
        if self.samples.shape[1] < 2:
            return float("nan")
        spread = (np.nanmax(self.samples, axis=1) - np.nanmin(self.samples, axis=1)) / self.seconds
        return float(np.median(spread))


def _call(run: Runner, mb: MicroBatch, what: str) -> None:
    try:
        run(list(mb))
    except Exception as exc:  # noqa: BLE001 - any failure of the user's code is re-raised with context
        raise MeasureError(
            f"the runner raised {type(exc).__name__} on {what} micro-batch of {len(mb)} sequences, "
            f"{sum(mb)} tokens, lengths={list(mb)}: {exc}"
        ) from exc


def time_micro_batches(run: Runner, micro_batches: Sequence[MicroBatch], *, repeats: int = 3,
                       warmup: int = 1, seed: int = 0, progress: bool = True,
                       memory: Callable[[], tuple[Callable[[], None], Callable[[], int]]] | None = None,
                       desc: str = "calibrate", clock: str | Callable[[], float] = "wall",
                       min_seconds: float = 0.0, max_rounds: int = 15) -> Timings:
    """Time every micro-batch ``repeats`` times in interleaved, shuffled rounds (after
    ``warmup`` rounds), then the short ones in extra shuffled rounds until each was timed for
    ``min_seconds`` in all or ``max_rounds`` times; ``memory`` (CUDA) gives a reset and a
    peak-bytes reader. ``clock``: "wall" (elapsed time) or "cpu" (this process's CPU time, which
    leaves out the time a shared CPU spends on other processes; meaningful for CPU runs only)."""
    from tqdm import tqdm

    timer = clock_function(clock)

    repeats = positive_int(repeats, "repeats")
    warmup = positive_int(warmup, "warmup", minimum=0)
    max_rounds = max(repeats, positive_int(max_rounds, "max_rounds"))
    if not min_seconds >= 0:
        raise ValueError(f"min_seconds must be >= 0, got {min_seconds!r}")
    mbs = [tuple(int(x) for x in mb) for mb in micro_batches]
    rng = np.random.default_rng(seed)
    samples = np.full((len(mbs), max_rounds), np.nan)
    cpu = np.full((len(mbs), max_rounds), np.nan)
    peaks = np.zeros(len(mbs)) if memory is not None else None

    def time_one(i: int, r: int) -> None:
        what = "a warm-up" if r < 0 else f"round {r + 1}'s"
        if memory is not None:
            memory()[0]()
        c0, t0 = time.process_time(), timer()
        _call(run, mbs[i], what)
        elapsed, cpu_elapsed = timer() - t0, time.process_time() - c0
        if r >= 0:
            samples[i, r], cpu[i, r] = elapsed, cpu_elapsed
            if peaks is not None and memory is not None:
                peaks[i] = max(peaks[i], memory()[1]())

    with tqdm(total=(warmup + repeats) * len(mbs), desc=desc, unit="mb", disable=not progress,
              leave=False) as bar:
        for r in range(-warmup, repeats):
            for i in rng.permutation(len(mbs)):
                time_one(int(i), r)
                bar.update()
        for r in range(repeats, max_rounds):  # the short micro-batches' extra rounds
            short = np.flatnonzero(np.nansum(samples, axis=1) < min_seconds)
            if not len(short):
                break
            bar.total += len(short)
            for i in rng.permutation(short):
                time_one(int(i), r)
                bar.update()
    used = int(np.max(np.sum(~np.isnan(samples), axis=1)))
    samples, cpu = samples[:, :used], cpu[:, :used]
    return Timings(tuple(mbs), np.nanmedian(samples, axis=1), samples, peaks, cpu)


def clock_function(clock: str | Callable[[], float]) -> Callable[[], float]:
    """"wall", "cpu", or a callable returning seconds (e.g. a simulated clock in tests)."""
    if callable(clock):
        return clock
    if clock == "wall":
        return time.perf_counter
    if clock == "cpu":
        return time.process_time
    raise ValueError(f"clock={clock!r} is not understood: use 'wall' or 'cpu'")


def _cuda_memory(device: Any) -> Callable[[], tuple[Callable[[], None], Callable[[], int]]]:
    import torch

    def hooks() -> tuple[Callable[[], None], Callable[[], int]]:
        return (lambda: torch.cuda.reset_peak_memory_stats(device),
                lambda: int(torch.cuda.max_memory_allocated(device)))

    return hooks


def memory_fit(timings: Timings) -> dict[str, Any]:
    """Peak bytes ~ base + per_token * T + per_pair * sum(l^2) (non-negative least squares)."""
    from scipy.optimize import nnls

    assert timings.peak_bytes is not None
    x = np.array([[1.0, sum(mb), sum(v * v for v in mb)] for mb in timings.micro_batches])
    scale = x.max(axis=0)
    coef, _ = nnls(x / scale, timings.peak_bytes)
    base, per_token, per_pair = (coef / scale).tolist()
    return {"measured": True, "base_bytes": base, "per_token_bytes": per_token,
            "per_pair_bytes": per_pair, "max_peak_bytes": float(timings.peak_bytes.max())}


def largest_cap(memory: dict[str, Any], budget_bytes: float) -> int | None:
    """The largest token cap whose worst micro-batch (one sequence of ``cap`` tokens) fits
    ``budget_bytes`` under the memory fit; None when memory was not measured."""
    if not memory.get("measured"):
        return None
    base, tok, pair = memory["base_bytes"], memory["per_token_bytes"], memory["per_pair_bytes"]
    room = budget_bytes - base
    if room <= 0:
        return 0
    if pair > 0:
        return int((-tok + (tok * tok + 4 * pair * room) ** 0.5) / (2 * pair))
    return int(room / tok) if tok > 0 else None


def _timings_records(t: Timings, held_out: int) -> list[dict[str, Any]]:
    n_train = len(t.micro_batches) - held_out
    return [{"lengths": list(mb), "seconds": float(s), "held_out": i >= n_train}
            for i, (mb, s) in enumerate(zip(t.micro_batches, t.seconds, strict=True))]


def fit_timings(design: Design, t: Timings) -> tuple[Fit, Fit]:
    n = len(design.train)
    return select_and_fit(design.train, t.seconds[:n], design.held_out, t.seconds[n:], design.max_tokens)


def calibrate(run: Runner | None = None, *, device: str = "cpu", dtype: str = "float32",
              hf_config: dict[str, Any] | None = None, reference: Any = None,
              design: Design | None = None, repeats: int = 3, warmup: int = 1, threads: int | None = 1,
              seed: int = 0, progress: bool = True, model: dict[str, Any] | None = None,
              clock: str | Callable[[], float] = "wall", min_seconds: float = 0.3) -> CostProfile:
    """Time forward+backward of the design's micro-batches and fit the step cost.

    What runs: ``run`` (any callable ``run(lengths)``, e.g. a trainer's own model step; it must
    return when the device is done), else a transformers model from ``hf_config`` (random
    weights), else the reference decoder (``reference``: a ``ReferenceConfig``). ``threads``
    sets torch's CPU threads for the built-in models (None: leave it). ``clock``, ``min_seconds``
    (the short micro-batches' extra rounds): see :func:`time_micro_batches` ("cpu" only with a
    CPU device).
    """
    clock_function(clock)
    if isinstance(clock, str) and clock == "cpu" and str(device) != "cpu":
        raise ValueError(f"clock='cpu' measures CPU time, which is meaningless on device={device!r}: "
                         "use clock='wall'")
    design = design or make_design(seed=seed)
    meta: dict[str, Any] = {"torch_version": "", "transformers_version": None}
    memory = None
    if run is None:
        import torch

        from .allocator import keep_freed_memory
        from .models import dtype_of, hf_runner, reference_runner, resolve_device

        dev = resolve_device(device)
        if threads is not None:
            torch.set_num_threads(positive_int(threads, "threads"))
        if dev.type == "cpu":
            keep_freed_memory()
        if hf_config is not None:
            run = hf_runner(hf_config, device=device, dtype=dtype_of(dtype), seed=seed)
            model = model or {"kind": "transformers", "config": hf_config}
        else:
            run = reference_runner(reference, device=device, dtype=dtype_of(dtype), seed=seed)
            model = model or (run.model_config if hasattr(run, "model_config") else {"kind": "reference"})
        meta = {"torch_version": torch.__version__,
                "transformers_version": getattr(run, "transformers_version", None)}
        if dev.type == "cuda":
            memory = _cuda_memory(dev)
    else:
        if not callable(run):
            raise TypeError(f"run must be a callable run(lengths), got {type(run).__name__}")
        try:
            import torch

            meta["torch_version"] = torch.__version__
        except ImportError:
            meta["torch_version"] = "none"
    timings = time_micro_batches(run, design.all, repeats=repeats, warmup=warmup, seed=seed,
                                 progress=progress, memory=memory, clock=clock,
                                 min_seconds=min_seconds)
    return profile_from_timings(design, timings, device=str(device), dtype=dtype,
                                model=model or {"kind": "callable"}, meta=meta,
                                threads=threads, repeats=repeats, warmup=warmup,
                                clock=clock if isinstance(clock, str) else "custom")


def profile_from_timings(design: Design, timings: Timings, *, device: str, dtype: str,
                         model: dict[str, Any], meta: dict[str, Any], threads: int | None,
                         repeats: int, warmup: int, clock: str = "wall") -> CostProfile:
    base, ext = fit_timings(design, timings)

    def err(fit: Fit) -> dict[str, Any]:
        return {"held_out": fit.held_out_error.as_dict() if fit.held_out_error else None,
                "train": fit.train_error.as_dict() if fit.train_error else None,
                "cv_mean_rel": fit.cv_error}

    extended = None if ext.terms == base.terms else {"coefficients": ext.coef, **err(ext)}
    if timings.peak_bytes is not None:
        mem = memory_fit(timings)
    else:
        mem = {"measured": False, "reason": f"peak memory is measured on CUDA only, not on {device}"}
    return CostProfile(
        overhead_s=max(0.0, base.coef["overhead"]), linear_s=max(0.0, base.coef["linear"]),
        quadratic_s=max(0.0, base.coef["quadratic"]),
        device=device, dtype=dtype, torch_version=str(meta.get("torch_version", "")),
        model={**model, "transformers_version": meta.get("transformers_version")},
        fit_error={**err(base), "noise": timings.noise},
        extended=extended, memory=mem,
        design={"max_tokens": design.max_tokens, "max_count": design.max_count,
                "min_length": design.min_length, "random_train": design.random_train,
                "train": len(design.train), "held_out": len(design.held_out), "repeats": repeats,
                "warmup": warmup, "threads": threads, "statistic": "median", "clock": clock,
                "context": "alone"},
        measurements=_timings_records(timings, len(design.held_out)),
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    )


def calibrate_in_steps(steps: Mapping[str, Schedule], spec: RunnerSpec, prior: CostProfile, *,
                       repeats: int = 3, warmup: int = 1, seed: int = 0, hold_out: int = 4,
                       clock: str = "cpu", timeout: float = 1800.0) -> CostProfile:
    """Run every step of ``steps`` (name -> [rank][micro-batch] = lengths, one dp size) on the
    model of ``spec``, ``repeats`` times, paired and interleaved after ``warmup`` rounds, time
    each micro-batch inside them (its median over the repeats, on ``clock``: "cpu" or "wall"),
    and :func:`refit_in_steps` ``prior`` (the same model's :func:`calibrate` profile). Every
    ``hold_out``-th step (in the mapping's order; 0: none) is held out whole.

    Give steps like those the profile will plan and predict (the same kinds of batches and
    schedulers, other draws)."""
    if clock not in ("cpu", "wall"):
        raise ValueError(f"clock={clock!r} is not understood: use 'cpu' or 'wall'")
    positive_int(hold_out, "hold_out", minimum=0)
    if not steps:
        raise ValueError("steps is empty: pass name -> [rank][micro-batch] = lengths")
    from .replay import run_trials

    names = list(steps)
    trials = run_trials(dict(steps), spec, repeats=repeats, warmup=warmup,
                        seed=seed, timeout=timeout, micro_cpu=True)
    col = 1 if clock == "cpu" else 0
    times: dict[tuple[str, int, int], list[float]] = {}
    for trial in trials:
        for r, rank in enumerate(trial.micro):
            for j, pair in enumerate(rank):
                times.setdefault((trial.schedule, r, j), []).append(pair[col])
    split: dict[bool, tuple[list[Run], list[list[float]]]] = {False: ([], []), True: ([], [])}
    for i, name in enumerate(names):
        held = hold_out > 0 and i % hold_out == hold_out - 1
        for r, rank in enumerate(steps[name]):
            if rank:
                split[held][0].append(rank)
                split[held][1].append([float(np.median(times[(name, r, j)])) for j in range(len(rank))])
    return refit_in_steps(prior, *split[False], held_out=split[True][0],
                          held_out_seconds=split[True][1])
