"""One command for a machine with one CUDA GPU: calibrate, check peak memory and replay, in
under 8 minutes, with everything written to one folder.

    python benchmarks/gpu_check.py --out gpu_check_out            # on a GPU machine
    python benchmarks/gpu_check.py --smoke --out /tmp/gc          # the same code path on CPU

Steps, in order; the record is saved after each one (and marked "running" before it), so a run
stopped by a timeout keeps every finished step:

1. **Environment:** GPU name and memory, driver, torch, CUDA and transformers versions.
2. **Calibration** of two decoders built from transformers configs with random weights (nothing
   is downloaded): a 0.49B one (Qwen2.5-0.5B's shape) and a 1.5B one (Qwen2.5-1.5B's shape), as
   Llama blocks. bf16, packed micro-batches with attention per sequence (torch SDPA), forward and
   backward. A probe micro-batch sizes seqpart's calibration design (1 to 32 sequences per
   micro-batch, up to 32,768 tokens or what the memory and the step's time share allow). Reports
   the fit, the held-out error, the repeat noise, and a/b and the overhead against the
   ``attention`` default and the FLOP count (``Cost.from_hf_config``).
3. **Peak memory** of every calibration micro-batch against its tokens and ``sum l^2``: the fit
   (scored on the held-out micro-batches), the largest cap for 50% and 80% of the GPU's memory,
   and a check that micro-batches at that cap (1, 4 and 32 sequences) stay within the budget.
4. **Replay** of plan_step (with the 0.49B model's profile) against every trainer scheduler on
   bundled long-CoT, math and chat lengths at real size, dp=2. One GPU runs the dp ranks' micro-
   batches one rank after another; a step is the slowest rank plus a MODELLED ring all-reduce
   (100 GB/s). Paired, interleaved rounds; the measured ratio to the best trainer with its exact
   interval, next to the predicted ratio.
5. **Context-parallel micro-batch timing** when 2 or more GPUs are visible; skipped otherwise.

Written to ``--out``: ``record.json`` (everything), ``report.md`` (a short summary), the cost
profiles and the plots. ``--budget-seconds`` (default 450) is shared between the steps; each
step sizes its work to what is left of its share. Prints PASS/FAIL per target and exits 1 if
one fails.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from common import machine_header
from gpu_replay import allreduce_seconds, cp_step, replay_workload
from gpu_report import render, write_plots
from gpu_steps import Settings, Workload, build, calibrate_model, environment, memory_step, release

#: Qwen2.5-0.5B's and Qwen2.5-1.5B's shapes (tied embeddings), as Llama blocks.
DECODER_0_5B = {"model_type": "llama", "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
                "max_position_embeddings": 131072, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
                "tie_word_embeddings": True, "hidden_act": "silu"}
DECODER_1_5B = {**DECODER_0_5B, "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
                "num_attention_heads": 12}
TINY = {"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
        "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 64, "max_position_embeddings": 4096,
        "hidden_act": "silu"}
WORKLOADS = (
    Workload("long-CoT", "reasoning_short_cot_sky_t1_short_qwen25_32k", 64, 32768),
    Workload("math", "math_sft_gsm8k_train", 256, 4096),
    Workload("chat", "sft_chat_alpaca_eval_4models", 128, 4096),
)
GPU = Settings(device="cuda", dtype="bfloat16", models={"0.5B": DECODER_0_5B, "1.5B": DECODER_1_5B},
               max_tokens=(32768, 16384, 8192, 4096, 2048), workloads=WORKLOADS)
#: The same code path on CPU in seconds: tiny models, tiny lengths, few repeats.
SMOKE = Settings(device="cpu", dtype="float32", models={"0.5B": TINY, "1.5B": {**TINY, "hidden_size": 48}},
                 max_tokens=(128,), max_count=4, held_out=3, min_length=16, repeats=2, min_seconds=0.0,
                 max_rounds=2, probe_tokens=128, workloads=tuple(Workload(w.kind, w.dataset, 8, w.cap)
                                                                for w in WORKLOADS),
                 length_divisor=64, replay_repeats=(3, 3), plan_time_limit=0.05)
#: Each step's share of the budget, in the order they run; a step may use what earlier ones left.
SHARES = (("calibration:0.5B", 0.20), ("memory:0.5B", 0.04), ("calibration:1.5B", 0.25),
          ("memory:1.5B", 0.04), ("replay", 0.42), ("cp", 0.05))
LIMIT_S = {"gpu": 480.0, "smoke": 60.0}


class Record:
    """The run's record: ``record.json`` and ``report.md`` in ``out``, rewritten after each step."""

    def __init__(self, out: Path, payload: dict[str, Any]) -> None:
        self.out, self.data = out, payload
        out.mkdir(parents=True, exist_ok=True)

    def set(self, path: tuple[str, ...], value: Any) -> None:
        node = self.data["steps"]
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
        self.save()

    def save(self) -> None:
        self.data["elapsed_s"] = time.perf_counter() - self.data["_t0"]
        text = json.dumps(_clean({k: v for k, v in self.data.items() if k != "_t0"}), indent=1)
        _write(self.out / "record.json", text + "\n")
        try:
            report = render(json.loads(text))
        except Exception as exc:  # noqa: BLE001 - the JSON is what counts: the report must not stop the run
            report = (f"# seqpart GPU check\n\nthe report could not be written ({type(exc).__name__}: "
                      f"{exc}): see record.json\n")
        _write(self.out / "report.md", report)


def _write(path: Path, text: str) -> None:
    """Write through a temporary file: a kill leaves the old file or the new one, never half."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _clean(x: Any) -> Any:
    """JSON without NaN/inf (null instead), tuples as lists."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        return _clean(x.item())
    return x


class Budget:
    """Cumulative deadlines: step i may run until ``t0 + budget * (shares up to i)``."""

    def __init__(self, seconds: float, shares: tuple[tuple[str, float], ...]) -> None:
        self.t0, self.seconds = time.perf_counter(), seconds
        total, self.ends = 0.0, {}
        for name, share in shares:
            total += share
            self.ends[name] = total

    def left(self, step: str) -> float:
        return self.t0 + self.seconds * self.ends[step] - time.perf_counter()


def _guarded(rec: Record, path: tuple[str, ...], fn: Any, *args: Any) -> Any:
    """Mark the step running, run it, record its result or its error (the run goes on)."""
    rec.set(path, {"status": "running", "started_s": time.perf_counter() - rec.data["_t0"]})
    t0 = time.perf_counter()
    try:
        result = fn(*args)
    except Exception as exc:  # noqa: BLE001 - one failed step must not lose the others
        rec.set(path, {"status": "error", "error": f"{type(exc).__name__}: {exc}",
                       "traceback": traceback.format_exc()[-3000:], "seconds": time.perf_counter() - t0})
        return None
    value = result[0] if isinstance(result, tuple) else result
    value.setdefault("seconds", time.perf_counter() - t0)
    rec.set(path, value)
    return result


def run_all(s: Settings, rec: Record, budget: Budget, smoke: bool) -> None:
    _guarded(rec, ("env",), environment, s.device)
    profiles: dict[str, Any] = {}
    for name, config in s.models.items():
        got = _guarded(rec, ("calibration", name), _calibration, rec, name, config, s, budget)
        run, design, timings, profile = got[1] if got else (None, None, None, None)
        _guarded(rec, ("memory", name), memory_step, run, design, timings, profile, s,
                 max(0.0, budget.left(f"memory:{name}")))
        del got, run, design, timings  # the model's memory goes back before the next one is built
        release()
        profiles[name] = profile
        write_plots(rec.out, rec.data)
    _guarded(rec, ("replay",), _replay, profiles.get("0.5B"), s, budget, rec)
    release()  # the replay's model is gone with _replay's frame
    write_plots(rec.out, rec.data)
    # The CP report's own size is not budgeted here: its quick form when little time is left.
    _guarded(rec, ("cp",), cp_step, smoke or budget.left("cp") < 60)


def _calibration(rec: Record, name: str, config: dict[str, Any], s: Settings, budget: Budget
                 ) -> tuple[dict[str, Any], tuple[Any, Any, Any, Any]]:
    left = budget.left(f"calibration:{name}")
    if left <= 0:
        why = f"budget spent ({-left:.0f} s over its share)"
        return {"model": name, "status": "skipped", "reason": why}, (None, None, None, None)
    record, design, profile, timings, run = calibrate_model(name, config, s, left)
    if profile is not None:
        profile.save(rec.out / f"profile_{name}.json")
        record["profile_file"] = f"profile_{name}.json"
    return record, (run, design, timings, profile)


def _replay(profile: Any, s: Settings, budget: Budget, rec: Record) -> dict[str, Any]:
    if profile is None:
        return {"status": "skipped", "reason": "the 0.5B model's calibration did not run"}
    run, built = build(s.models["0.5B"], s)
    allreduce = allreduce_seconds(built["parameters"], 2 if s.dtype == "bfloat16" else 4, s)
    out: dict[str, Any] = {"status": "running", "model": "0.5B", **built, "allreduce_s": allreduce,
                           "method": (f"one device runs the {s.dp} dp ranks' micro-batches one rank after "
                                      "another; a step is the slowest rank's compute plus a modelled ring "
                                      f"all-reduce of the gradients ({s.allreduce_gbps:g} GB/s, "
                                      f"{s.allreduce_latency_s * 1e6:g} us): not a multi-GPU run"),
                           "workloads": []}
    stop = "replay" if _gpus() >= 2 else "cp"  # with no CP step to run, its share is the replay's
    for i, w in enumerate(s.workloads):
        share = budget.left(stop) / (len(s.workloads) - i)
        out["workloads"].append(replay_workload(run, profile, w, s, allreduce, share, 1000 + i))
        rec.set(("replay",), out)
    out["status"] = "done"
    return out


def _gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def targets(data: dict[str, Any], limit: float) -> dict[str, bool | None]:
    """PASS/FAIL per target; None where a target does not apply here (no GPU)."""
    steps = data["steps"]
    flat = [steps.get("env", {}), steps.get("replay", {}), steps.get("cp", {}),
            *steps.get("calibration", {}).values(), *steps.get("memory", {}).values()]
    cal = list(steps.get("calibration", {}).values())
    mem = [m for m in steps.get("memory", {}).values() if m.get("status") == "done"]
    rows = [w for w in steps.get("replay", {}).get("workloads", []) if w.get("status") == "done"]
    return {
        f"end to end within {limit:.0f} s": data["elapsed_s"] <= limit,
        "no step failed": all(x.get("status") in ("done", "skipped") for x in flat),
        "calibration: held-out median error and repeat noise reported": bool(cal) and all(
            c.get("status") == "done" and c["held_out"]["median_rel"] is not None and c["noise"] is not None
            for c in cal),
        "replay: measured ratio, interval and predicted ratio per workload": len(rows) == len(
            steps.get("replay", {}).get("workloads", [])) > 0 and all(len(w["ratio"]) == 3 for w in rows),
        "memory: peak-memory error reported and no micro-batch at the cap exceeds its budget":
            None if not mem else all(m["held_out_error"] is not None and m["cap_protects"] for m in mem),
    }


def main(argv: list[str] | None = None) -> int:
    t0 = time.perf_counter()  # "end to end" counts from here: torch's import included
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="gpu_check_out", help="folder for record.json, report.md and the plots")
    ap.add_argument("--smoke", action="store_true", help="the same code path on CPU with tiny models")
    ap.add_argument("--budget-seconds", type=float, default=None,
                    help="time shared between the steps (default 450 on a GPU, 300 with --smoke)")
    args = ap.parse_args(argv)
    s = SMOKE if args.smoke else GPU
    if not args.smoke and _gpus() == 0:
        raise SystemExit("gpu_check: no CUDA device visible; run with --smoke for the CPU code path")
    seconds = args.budget_seconds if args.budget_seconds is not None else (300.0 if args.smoke else 450.0)
    if not seconds >= 0:
        raise SystemExit(f"gpu_check: --budget-seconds {seconds}: give a number of seconds >= 0")
    import torch  # noqa: F401 - imported before the budget's clock starts, inside the record's
    import transformers  # noqa: F401

    print(machine_header(sys.argv), flush=True)
    rec = Record(Path(args.out), {
        "kind": "seqpart.gpu_check", "version": 1, "smoke": args.smoke, "device": s.device, "dtype": s.dtype,
        "budget_s": seconds, "shares": dict(SHARES), "header": machine_header(sys.argv).splitlines(),
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "_t0": t0, "done": False, "steps": {}})
    run_all(s, rec, Budget(seconds, SHARES), args.smoke)
    rec.data["done"] = True
    rec.save()
    result = targets(rec.data, LIMIT_S["smoke" if args.smoke else "gpu"])
    rec.data["targets"] = result
    rec.save()
    print(render(json.loads((rec.out / "record.json").read_text())))
    for name, ok in result.items():
        print(f"{'SKIP' if ok is None else 'PASS' if ok else 'FAIL'} {name}")
    print(f"written to {rec.out}/: record.json, report.md, plots", flush=True)
    return 0 if all(ok is not False for ok in result.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
