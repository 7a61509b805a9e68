"""The context-parallel measurement in one call: :func:`cp_timing_report`.

1. Equivalence: micro-batches of the reference decoder (uneven lengths, sequences shorter than
   the zigzag's ``2c`` chunks) by a CP group of 2 processes with all-gather-KV attention,
   against the same micro-batches on one process: the loss and every gradient.
2. Fit: forward+backward of a design of micro-batches at degree 1 and 2, in paired interleaved
   rounds; the planner's coefficients (compute, ``overhead``, ``cp_comm``), per-degree compute
   and the collectives' own cost, each with its interval over the rounds (:mod:`.costfit`).
3. Replay: Megatron-LM's greedy schedule and seqpart's of one batch on 2 GPUs, run for real,
   the measured ratio (with its interval) next to the ratio the fitted model predicts. With the
   dynamic-CP planner installed (``seqpart.solver.dynamic_cp``) both schedules come from it
   (its greedy baseline, and ``plan_cp_step`` given the fitted cost) and its ``cp_step_time``
   predicts them too; without it, the two written-out schedules of :mod:`.replay` run.
"""

from __future__ import annotations

import importlib
import importlib.util
import platform
from typing import Any

from .costfit import fit_with_noise
from .procs import check_backend, run_ranks
from .replay import CLOCKS, CPU_CAP, CPU_LENGTHS, reference_schedules, replay_cp
from .tasks import equivalence_task, timing_task

#: float32 tolerance of the equivalence check: relative gradient error and absolute loss error.
TOLERANCE = 1e-5

EQUIVALENCE_BATCHES = ([1], [3, 1, 2], [7, 1, 12], [200, 5, 333, 1, 64], [1000, 24])

#: The fit's design: micro-batches (lengths), each timed at degree 1 and 2.
DESIGN = ([128] * 8, [256] * 4, [512], [384, 128], [768], [512, 512], [1024], [1024, 256, 256],
          [1536], [2048])
QUICK_DESIGN = ([64] * 8, [128] * 2, [256], [384], [512], [512, 256], [768], [1024])


#: A small transformers Llama (rotary positions, grouped-query attention) for the equivalence check.
LLAMA = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 172, "vocab_size": 256,
         "max_position_embeddings": 4096}


def _equivalence(batches: Any, world: int, backend: str, device: str) -> dict[str, Any]:
    models: dict[str, dict[str, Any] | None] = {"reference": None}
    skipped = None
    if importlib.util.find_spec("transformers") is not None:
        models["llama"] = LLAMA
    else:
        skipped = "the transformers Llama: transformers is not installed"
    per_model = run_ranks(equivalence_task, (batches, list(models.values()), 0), world=world,
                          backend=backend, device=device, timeout=600.0)[0]
    rows = [r for model in per_model for r in model]
    worst_loss = max(r["loss_abs_diff"] for r in rows)
    worst_grad = max(r["grad_rel_diff"] for r in rows)
    return {"degree": world, "split": "zigzag", "tolerance": TOLERANCE, "models": list(models),
            "skipped": skipped, "batches": dict(zip(models, per_model, strict=True)),
            "max_loss_abs_diff": worst_loss, "max_grad_rel_diff": worst_grad,
            "match": bool(worst_loss <= TOLERANCE and worst_grad <= TOLERANCE)}


def measure_fit(design: Any, *, world: int = 2, repeats: int = 7, warmup: int = 1, seed: int = 0,
                backend: str = "gloo", device: str = "cpu", timeout: float = 900.0) -> dict[str, Any]:
    """Time every micro-batch of ``design`` at degree 1 and ``world`` and fit :mod:`.costfit`'s
    models, per clock: ``"wall"``, and ``"cpu"`` (each process's CPU time, see :mod:`.runner`).
    A run's time is its slowest rank's, as a step's is under ``sync="barrier"``."""
    items = [(list(mb), c) for mb in design for c in (1, world)]
    per_rank = run_ranks(timing_task, (items, repeats, warmup, None, seed), world=world, backend=backend,
                         device=device, timeout=timeout)
    out = {}
    for col, clock in enumerate(CLOCKS):
        slowest: dict[tuple[int, int], tuple[float, float]] = {}
        for rows in per_rank:
            for r, i, *times, comm in rows:
                old = slowest.get((r, i), (0.0, 0.0))
                slowest[r, i] = (max(old[0], times[col]), max(old[1], comm))
        out[clock] = fit_with_noise(items, [(r, i, t, c) for (r, i), (t, c) in sorted(slowest.items())])
    return out


def _planner() -> Any:
    try:
        return importlib.import_module("seqpart.solver.dynamic_cp")
    except ImportError:
        return None


def planned_schedules(lengths: Any, cap: int, units: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """Megatron's greedy and seqpart's schedule for ``lengths`` on 2 GPUs: from the planner when
    it is installed (planned with the fitted cost ``units``), else the written-out ones."""
    planner = _planner()
    if planner is None or not hasattr(planner, "plan_cp_step"):
        return reference_schedules(), "written out (planner not installed)"
    from ...problem import Cost

    cost = Cost(linear=units["linear"], quadratic=units["quadratic"])
    try:
        plan = planner.plan_cp_step(list(lengths), 2, cap, cost=cost, cp_comm=units["cp_comm"],
                                    overhead=units["overhead"], sync="barrier", time_limit=1.0)
        greedy = planner.megatron_dynamic_cp_schedule(list(lengths), 2, cap)
    except (ValueError, TypeError) as exc:  # the measurement still replays the written-out pair
        return reference_schedules(), f"written out (the planner refused: {type(exc).__name__}: {exc})"
    return {"seqpart": plan.steps, "megatron_greedy": greedy}, "seqpart.solver.dynamic_cp"


def _planner_prediction(lengths: Any, schedules: dict[str, Any], units: dict[str, Any]) -> float | None:
    planner = _planner()
    if planner is None or not hasattr(planner, "cp_step_time"):
        return None
    from ...problem import Cost

    cost = Cost(linear=units["linear"], quadratic=units["quadratic"])
    t = {n: planner.cp_step_time(list(lengths), s, cost=cost, cp_comm=units["cp_comm"],
                                 overhead=units["overhead"], sync="barrier") for n, s in schedules.items()}
    return float(t["seqpart"] / t["megatron_greedy"])


def _machine(device: str) -> dict[str, Any]:
    import torch

    out = {"python": platform.python_version(), "torch": torch.__version__, "machine": platform.machine(),
           "processor": platform.processor() or platform.machine(), "device": device}
    if device.startswith("cuda") and torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name(0)
    return out


def cp_timing_report(device: str = "cpu", backend: str | None = None, quick: bool = False) -> dict[str, Any]:
    """Equivalence, fit with noise, and replay of two schedules on 2 processes (see the module).

    ``device``: "cpu" or "cuda" (each rank on its own CUDA device where there are two);
    ``backend``: "gloo" or "nccl" (None: nccl on CUDA, gloo on CPU); ``quick``: a smaller
    design, lengths and repeat count (for a smoke test). The fit and the replay are reported
    per clock: ``"wall"`` (what a step takes), and ``"cpu"`` (each process's CPU time: on a
    machine shared with other work it leaves out waiting for a core, and also waiting for a peer
    inside a collective; meaningful on CPU devices only). The schedules are planned with the
    wall clock's fit. JSON-able."""
    world = 2
    chosen = check_backend(backend, device, world)
    repeats = 3 if quick else 7
    equivalence = _equivalence([list(b) for b in EQUIVALENCE_BATCHES], world, chosen, device)
    fits = measure_fit(QUICK_DESIGN if quick else DESIGN, world=world, repeats=repeats,
                       backend=chosen, device=device)
    lengths, cap = list(CPU_LENGTHS), CPU_CAP
    schedules, source = planned_schedules(lengths, cap, fits["wall"]["units"])
    replay = replay_cp(lengths, schedules, n_gpus=world, coef={c: f["model"] for c, f in fits.items()},
                       repeats=repeats + 2, device=device, backend=chosen)
    replay["schedules_from"] = source
    replay["max_tokens_per_gpu"] = cap
    replay["planner_predicted_ratio"] = _planner_prediction(lengths, schedules, fits["wall"]["units"])
    return {"machine": _machine(device), "backend": chosen, "quick": quick,
            "equivalence": equivalence, "fit": fits, "replay": replay}
