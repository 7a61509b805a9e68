"""Step planning: ``plan_step`` against the trainers' own step schedulers.

    python benchmarks/bench_step.py [--quick] [--time-limit S] [--deterministic] [--out results.json]

Batches: seeded draws from the bundled real length files (``seqpart.solver.study.datasets``) and
generated long-tail RL batches (the three ``common.RL_SHAPES`` and GRPO groups from
``datasets.rl_batch``), n from 64 to 4096, dp from 2 to 64, pp from 1 to 8, vpp 1, 2 or 4 when
pp > 1, cost ``(24576, 1)`` and a per-micro-batch overhead of the linear cost of 512 tokens
(24576 * 512).

Every method's schedule is re-scored in this process with ``seqpart.solver.step.step_time``: the
exact makespan of Megatron-LM's schedule (1F1B, interleaved when vpp > 1; forward:backward 1:2)
in the schedule's own order, and in the order seqpart finds for it
(``seqpart.solver.step.order_schedule``), next to the closed formula's figure
(``formula_step_time``); and checked with ``find_schedule_violations``. An invalid schedule (a
micro-batch over the cap, unequal counts, an empty micro-batch, a count that is not a multiple of
pp when vpp > 1), or one whose count the interleaved schedule cannot run, does not count as a
baseline to beat. The trainers and ``plan_step`` get the same ``multiple_of`` (pp when vpp > 1:
Megatron-LM's interleaving rule, ``default_multiple_of``).
Methods: every ``seqpart.heuristics.TRAINER_SCHEDULERS`` entry, ``plan_global``, "seqpart per-rank
agreement" (each rank's ``partition(k=None)`` on its own contiguous chunk of the batch, the MAX
count, then ``partition(k=agreed)`` per rank) and ``plan_step``. Prints the tables, then
PASS/FAIL per target.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
from common import (
    RL_SHAPES,
    fmt_ms,
    machine_header,
    rl_batch,
    table,
    timed,
    verdict,
    write_json,
)

from seqpart.heuristics import TRAINER_SCHEDULERS
from seqpart.solver import InfeasibleError, SolverOptions
from seqpart.solver.step import (
    formula_step_time,
    order_schedule,
    plan_global,
    step_lower_bound,
    step_time,
)
from seqpart.solver.step import planner as step_mod
from seqpart.solver.step.model import default_multiple_of, find_schedule_violations
from seqpart.solver.study import datasets as ds
from seqpart.solver.study.step_study import per_rank_agreement

COST = (24576, 1)
OVERHEAD = 24576 * 512
SIZES = (64, 256, 1024, 4096)
QUICK_SIZES = (64, 1024)
DPS = (2, 4, 8, 16, 32, 64)
PPS = (1, 2, 4, 8)
VPPS = (1, 2, 4)
#: Real batches: the smallest of these caps that holds the longest sequence.
REAL_CAPS = (4096, 8192, 16384, 32768, 65536)
GRPO_CAP = 32768
PLAN_STEP = "plan_step"
PLAN_GLOBAL = "plan_global"
AGREEMENT = "seqpart_per_rank"
#: Budgets of the seqpart baselines (not the subject of a target).
GLOBAL_LIMIT = 0.5
AGREEMENT_LIMIT = 0.02
#: The online target: n=4096, dp=64, a useful plan within this.
FAST_LIMIT = 0.1
SLACK = 0.005

Schedule = list[list[list[int]]]


# --- batches ------------------------------------------------------------------------------


def sources() -> list[tuple[str, Callable[[int, np.random.Generator], tuple[list[int], int]]]]:
    """(name, draw(n, rng) -> (lengths, cap)) for every real file and generated shape."""
    out: list[tuple[str, Callable[[int, np.random.Generator], tuple[list[int], int]]]] = []
    for name in ds.list_datasets():
        pool = ds.load_dataset(name).lengths

        def real(n: int, rng: np.random.Generator, pool: Sequence[int] = pool) -> tuple[list[int], int]:
            lengths = ds.sample_batch(pool, n, rng)
            return lengths, next(c for c in REAL_CAPS if c >= max(lengths))

        out.append((f"real/{name}", real))
    for shape in RL_SHAPES:

        def gen(n: int, rng: np.random.Generator, shape: Any = shape) -> tuple[list[int], int]:
            return rl_batch(n, shape, rng), shape.max_tokens_per_gpu

        out.append((f"gen/{shape.name}", gen))

    def grpo(n: int, rng: np.random.Generator) -> tuple[list[int], int]:
        return ds.rl_batch(n, rng), GRPO_CAP

    out.append(("gen/grpo16@32k", grpo))
    return out


def cases(quick: bool) -> list[dict[str, Any]]:
    """The grid: each source x n with two (dp, pp) pairs rotated so every dp and pp appears;
    dp at most n/4 so every rank has sequences to spare."""
    out = []
    sizes = QUICK_SIZES if quick else SIZES
    for si, (src, draw) in enumerate(sources()):
        for ni, n in enumerate(sizes):
            for j in range(1 if quick else 2):
                dp = DPS[(si + 2 * ni + 3 * j) % len(DPS)]
                while dp > n // 4:
                    dp //= 2
                pp = PPS[(si + ni + 2 * j) % len(PPS)]
                vpp = 1 if pp == 1 else VPPS[(si + 2 * ni + j) % len(VPPS)]
                while vpp > 1 and dp * pp > n:  # interleaving needs pp micro-batches a rank
                    dp //= 2
                rng = np.random.default_rng([9, si, n, j])
                lengths, cap = draw(n, rng)
                out.append({"name": f"{src}/n{n}/dp{dp}/pp{pp}/vpp{vpp}", "source": src, "n": n,
                            "dp": dp, "pp": pp, "vpp": vpp, "cap": cap, "lengths": lengths})
    return out


def fast_cases() -> list[dict[str, Any]]:
    """The online target's instances: n=4096, dp=64, two generated shapes, pp 1 and 4."""
    out = []
    for shape in (RL_SHAPES[0], RL_SHAPES[2]):
        for pp in (1, 4):
            rng = np.random.default_rng([99, pp, shape.max_tokens_per_gpu])
            out.append({"name": f"fast/{shape.name}/n4096/dp64/pp{pp}", "source": shape.name,
                        "n": 4096, "dp": 64, "pp": pp, "vpp": 1, "cap": shape.max_tokens_per_gpu,
                        "lengths": rl_batch(4096, shape, rng)})
    return out


# --- methods ------------------------------------------------------------------------------


def method_calls(time_limit: float, deterministic: bool = False
                 ) -> dict[str, Callable[[dict[str, Any]], Schedule]]:
    calls: dict[str, Callable[[dict[str, Any]], Schedule]] = {}
    for name, fn in TRAINER_SCHEDULERS.items():
        calls[name] = lambda c, fn=fn: fn(c["lengths"], c["dp"], c["cap"], costs=c["costs"],
                                          multiple_of=default_multiple_of(c["pp"], c["vpp"]))
    calls[PLAN_GLOBAL] = lambda c: [
        p.bins for p in plan_global(c["lengths"], c["dp"], c["cap"], cost=COST, time_limit=GLOBAL_LIMIT)
    ]
    calls[AGREEMENT] = lambda c: per_rank_agreement(
        c["lengths"], c["dp"], c["cap"], cost=COST, time_limit=AGREEMENT_LIMIT
    )
    plan_step = getattr(step_mod, "plan_step", None)
    if plan_step is not None:
        calls[PLAN_STEP] = lambda c: plan_step(
            c["lengths"], c["dp"], c["cap"], pp=c["pp"], vpp=c["vpp"], cost=COST, overhead=OVERHEAD,
            time_limit=c.get("time_limit", time_limit),
            options=SolverOptions(deterministic=deterministic),
        )  # a StepPlan: its status and bound (raised by CP-SAT proofs) are recorded too
    return calls


def score(c: dict[str, Any], sched: Schedule) -> dict[str, Any]:
    """Step time (exact, own order and seqpart's order), the formula's, validity and why not."""
    lengths, cap = c["lengths"], c["cap"]
    counts = [len(r) for r in sched]
    over = sum(
        1 for r in sched for mb in r if len(mb) > 1 and sum(lengths[i] for i in mb) > cap
    )
    msgs = find_schedule_violations(sched, lengths, c["dp"], max(max(counts), 1), cap,
                                    default_multiple_of(c["pp"], c["vpp"]))
    kw = {"cost": COST, "overhead": OVERHEAD, "pp": c["pp"], "vpp": c["vpp"]}
    formula = formula_step_time(sched, lengths, **kw)
    try:
        t: Any = step_time(sched, lengths, **kw)
        ordered: Any = order_schedule(sched, lengths, **kw)[1]
    except ValueError as err:  # a count the interleaved schedule cannot run
        t = ordered = None
        msgs = [*msgs, str(err)]
    return {"step": t, "ordered": ordered, "formula": formula, "valid": not msgs,
            "over_cap": over, "unequal": len(set(counts)) > 1, "m": max(counts), "why": msgs[:2]}


def run_case(c: dict[str, Any], calls: dict[str, Callable[[dict[str, Any]], Schedule]]) -> dict[str, Any]:
    c["costs"] = [COST[0] * x + COST[1] * x * x for x in c["lengths"]]
    lb = step_lower_bound(c["lengths"], c["dp"], c["cap"], cost=COST, overhead=OVERHEAD,
                          pp=c["pp"], vpp=c["vpp"])
    res: dict[str, Any] = {"case": c["name"], "n": c["n"], "dp": c["dp"], "pp": c["pp"],
                           "vpp": c["vpp"], "cap": c["cap"], "lb": lb, "methods": {}}
    for name, call in calls.items():
        sched, secs, err = timed(lambda call=call: call(c))
        if err is not None:
            kind = "infeasible" if isinstance(err, InfeasibleError) else "error"
            res["methods"][name] = {"error": f"{kind}: {err}", "seconds": secs, "valid": False}
            continue
        extra = {}
        if hasattr(sched, "ranks"):
            extra = {"status": sched.status, "own_lb": sched.lower_bound,
                     "reported": sched.step_time}
            sched = sched.ranks
        res["methods"][name] = {**score(c, sched), "seconds": secs, **extra}
    trainers = [res["methods"][t] for t in TRAINER_SCHEDULERS]
    valid = [m for m in trainers if m.get("valid")]
    res["best_trainer"] = min((m["step"] for m in valid), default=None)
    res["best_trainer_ordered"] = min((m["ordered"] for m in valid), default=None)
    res["best_trainer_any"] = min((m["step"] for m in trainers if m.get("step") is not None),
                                  default=None)
    return res


# --- report -------------------------------------------------------------------------------


def ratio(a: Any, b: Any) -> float:
    return float(Fraction(a) / Fraction(b)) if a is not None and b else float("nan")


def mean(xs: Sequence[float]) -> float:
    xs = [x for x in xs if x == x]
    return sum(xs) / len(xs) if xs else float("nan")


def method_table(results: list[dict[str, Any]], names: Sequence[str]) -> str:
    rows = []
    for name in names:
        got = [r["methods"][name] for r in results if name in r["methods"]]
        ok = [m for m in got if m.get("valid")]
        over_lb = [ratio(r["methods"][name]["step"], r["lb"]) for r in results
                   if r["methods"].get(name, {}).get("valid")]
        rows.append([
            name,
            f"{len(ok)}/{len(got)}",
            str(sum(1 for m in got if m.get("over_cap"))),
            str(sum(1 for m in got if m.get("unequal"))),
            str(sum(1 for m in got if "error" in m)),
            f"{mean(over_lb):.4f}",
            f"{mean([m['m'] for m in got if 'm' in m]):.1f}",
            fmt_ms(float(np.median([m["seconds"] for m in got]))) if got else "-",
            fmt_ms(max((m["seconds"] for m in got), default=float("nan"))),
        ])
    return table(
        ["method", "valid", "over cap", "unequal m", "failed", "step/LB (valid)", "mean m",
         "median ms", "max ms"],
        rows,
    )


def combos(results: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return sorted({(r["pp"], r["vpp"]) for r in results})


def pp_table(results: list[dict[str, Any]], names: Sequence[str]) -> str:
    rows = []
    for pp, vpp in combos(results):
        sub = [r for r in results if r["pp"] == pp and r["vpp"] == vpp]
        row = [f"pp={pp} vpp={vpp}", str(len(sub))]
        for name in names:
            vals = [ratio(r["methods"][name]["step"], r["lb"]) for r in sub
                    if r["methods"].get(name, {}).get("valid")]
            row.append(f"{mean(vals):.4f}" if vals else "-")
        vs = [ratio(r["methods"][PLAN_STEP]["step"], r["best_trainer"]) for r in sub
              if r["methods"].get(PLAN_STEP, {}).get("valid") and r["best_trainer"] is not None]
        row.append(f"{mean(vs):.3f}" if vs else "-")
        rows.append(row)
    return table(["pp, vpp", "batches", *[f"{n}/LB" for n in names], "plan_step/best trainer"],
                 rows)


def formula_table(results: list[dict[str, Any]]) -> str:
    """The closed formula's step over the exact makespan (own order), per pp and vpp: for
    plan_step's schedules and for every valid trainer schedule."""
    rows = []
    for pp, vpp in combos(results):
        if pp == 1:
            continue
        sub = [r for r in results if r["pp"] == pp and r["vpp"] == vpp]
        row = [f"pp={pp} vpp={vpp}", str(len(sub))]
        for names in ([PLAN_STEP], list(TRAINER_SCHEDULERS)):
            xs = [ratio(m["formula"], m["step"]) for r in sub for n in names
                  if (m := r["methods"].get(n, {})).get("valid")]
            row += [f"{mean(xs):.4f}", f"{min(xs, default=float('nan')):.4f}..."
                    f"{max(xs, default=float('nan')):.4f}",
                    str(sum(1 for x in xs if x < 0.98))]
        rows.append(row)
    return table(["pp, vpp", "batches", "plan_step formula/exact", "range", "< 0.98",
                  "trainers formula/exact", "range", "< 0.98"], rows)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer batches (smoke test)")
    ap.add_argument("--time-limit", type=float, default=0.5, help="plan_step's time_limit")
    ap.add_argument("--out", help="write every raw result as JSON")
    ap.add_argument("--deterministic", action="store_true",
                    help="plan_step without its clock safety net (the work budget only): the "
                         "same plans whatever the machine's load; its times may then overrun")
    args = ap.parse_args(argv)
    print(machine_header(sys.argv))
    print(f"cost {COST}, overhead {OVERHEAD} (24576 * 512), plan_step time_limit "
          f"{args.time_limit}s{' (deterministic: no clock)' if args.deterministic else ''}, "
          f"plan_global {GLOBAL_LIMIT}s, per-rank partition {AGREEMENT_LIMIT}s")
    calls = method_calls(args.time_limit, args.deterministic)
    if PLAN_STEP not in calls:
        print("plan_step is not in seqpart.solver.step.planner yet: baselines only")
    warm = {"name": "warm", "n": 64, "dp": 2, "pp": 2, "vpp": 1, "cap": 16384,
            "lengths": rl_batch(64, RL_SHAPES[0], np.random.default_rng(0))}
    run_case(warm, calls)

    results = []
    grid = cases(args.quick)
    for i, c in enumerate(grid):
        results.append(run_case(c, calls))
        print(f"\r{i + 1}/{len(grid)} batches", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    fast = []
    if PLAN_STEP in calls:
        for c in fast_cases():
            c["time_limit"] = FAST_LIMIT
            fast.append(run_case(c, {**{t: calls[t] for t in TRAINER_SCHEDULERS},
                                     PLAN_STEP: calls[PLAN_STEP]}))

    names = [*TRAINER_SCHEDULERS, PLAN_GLOBAL, AGREEMENT] + ([PLAN_STEP] if PLAN_STEP in calls else [])
    print(f"\n{len(results)} batches (n {min(r['n'] for r in results)}..{max(r['n'] for r in results)}, "
          f"dp {min(r['dp'] for r in results)}..{max(r['dp'] for r in results)}, pp 1..8). "
          "step/LB: step time over the step lower bound, mean over valid schedules.\n")
    print(method_table(results, names))
    print("\nMean step time over the lower bound, per pp and vpp (valid schedules only):\n")
    print(pp_table(results, [*TRAINER_SCHEDULERS, PLAN_GLOBAL, AGREEMENT, PLAN_STEP]
                   if PLAN_STEP in calls else names))

    print("\nThe closed formula's step time over the exact makespan (each schedule in its own "
          "order; < 0.98: the formula is optimistic by more than 2%):\n")
    print(formula_table(results))
    code = 0
    if PLAN_STEP in calls:
        code = report_targets(results, fast, args.time_limit)
        code |= report_exact(results, calls)
    if args.out:
        write_json(args.out, {"results": results, "fast": fast})
    return code


def report_targets(results: list[dict[str, Any]], fast: list[dict[str, Any]], limit: float) -> int:
    ps = [r["methods"][PLAN_STEP] for r in results]
    valid = all(m.get("valid") for m in ps)
    behind = [r["case"] for r in results if r["best_trainer"] is not None
              and (not r["methods"][PLAN_STEP].get("valid")
                   or r["methods"][PLAN_STEP]["step"] > r["best_trainer"])]
    ratios = [ratio(r["methods"][PLAN_STEP]["step"], r["best_trainer"]) for r in results
              if r["best_trainer"] is not None and r["methods"][PLAN_STEP].get("valid")]
    faster_invalid = sum(1 for r in results if r["best_trainer_any"] is not None
                         and r["methods"][PLAN_STEP].get("valid")
                         and r["best_trainer_any"] < r["methods"][PLAN_STEP]["step"])
    late = sorted(((r["case"], m["seconds"]) for r, m in zip(results, ps, strict=True)
                   if m["seconds"] > limit + SLACK), key=lambda x: -x[1])
    optimal = sum(1 for m in ps if m.get("status") == "optimal")
    print(f"\nplan_step vs the best valid trainer schedule: mean {mean(ratios):.3f}x, worst "
          f"{max(ratios, default=float('nan')):.3f}x, best {min(ratios, default=float('nan')):.3f}x "
          f"over {len(ratios)} batches; an invalid trainer schedule was faster on {faster_invalid}")
    floor = [ratio(r["lb"], r["best_trainer"]) for r in results if r["best_trainer"] is not None]
    print(f"INFO  no valid schedule can beat the step lower bound, so the best mean ratio any "
          f"planner could reach on these batches is {mean(floor):.3f}x (mean lower bound / best "
          "trainer)")
    print(f"plan_step proves its plan optimal (status 'optimal': it meets step_lower_bound or a "
          f"CP-SAT bound) on {optimal}/{len(results)} batches")
    for pp, vpp in combos(results):
        sub = [r for r in results if r["pp"] == pp and r["vpp"] == vpp
               and r["methods"][PLAN_STEP].get("valid")]
        if sub:
            gaps = [ratio(r["methods"][PLAN_STEP]["step"], r["lb"]) - 1 for r in sub]
            own = [ratio(r["methods"][PLAN_STEP]["step"], r["methods"][PLAN_STEP]["own_lb"]) - 1
                   for r in sub]
            print(f"  pp={pp} vpp={vpp}: mean gap to step_lower_bound {mean(gaps):.2%} (max "
                  f"{max(gaps):.2%}), to plan_step's own bound {mean(own):.2%} ({len(gaps)} "
                  "batches)")
    if behind:
        worst = max((ratio(r["methods"][PLAN_STEP]["step"], r["best_trainer"]) for r in results
                     if r["case"] in behind and r["methods"][PLAN_STEP].get("valid")), default=1.0)
        print(f"  behind a trainer on {len(behind)} batches (worst by {worst - 1:.4%}): "
              + ", ".join(behind[:8]) + (" ..." if len(behind) > 8 else ""))
    if late:
        print(f"  over time on {len(late)} batches, worst: "
              + ", ".join(f"{n} {s * 1000:.1f}ms" for n, s in late[:8]))

    print("\nOnline: n=4096, dp=64, time_limit=0.1s")
    rows, fast_ok = [], True
    for r in fast:
        m = r["methods"][PLAN_STEP]
        useful = m.get("valid") and (r["best_trainer"] is None or m["step"] <= r["best_trainer"])
        fast_ok &= bool(useful) and m["seconds"] <= FAST_LIMIT + SLACK
        rows.append([r["case"], fmt_ms(m["seconds"]), str(m.get("valid")),
                     f"{ratio(m.get('step'), r['best_trainer']):.3f}" if m.get("valid") else "-",
                     f"{ratio(m.get('step'), r['lb']):.4f}" if m.get("valid") else "-"])
    print(table(["batch", "ms", "valid", "vs best trainer", "step/LB"], rows))

    checks = [
        ("every plan_step schedule valid", valid),
        ("plan_step never slower than a valid trainer schedule", not behind),
        (f"mean plan_step / best trainer <= 0.88 (got {mean(ratios):.3f})", mean(ratios) <= 0.88),
        (f"plan_step within time_limit + 5 ms on every batch (max "
         f"{max(m['seconds'] for m in ps) * 1000:.1f} ms)", not late),
        ("n=4096, dp=64: a valid plan, not behind the trainers, within 0.1 s + 5 ms", fast_ok),
    ]
    print()
    for text, ok in checks:
        print(f"{verdict(ok)}  {text}")
    return 0 if all(ok for _, ok in checks) else 1


def alone_case(calls: dict[str, Callable[[dict[str, Any]], Schedule]]) -> dict[str, Any]:
    """A 32k-token sequence alone in its micro-batch among short ones, pp=8, vpp=2: the closed
    formula charges that micro-batch t*(1 + 7/2), the schedule runs it through all 16 virtual
    stages one after another (8*t)."""
    rng = np.random.default_rng(24)
    lengths = [32768, *rng.integers(200, 3000, 255).tolist()]
    c = {"name": "alone/n256/dp2/pp8/vpp2", "n": 256, "dp": 2, "pp": 8, "vpp": 2,
         "cap": 32768, "lengths": lengths}
    return run_case(c, {t: calls[t] for t in (*TRAINER_SCHEDULERS, PLAN_STEP)})


def report_exact(results: list[dict[str, Any]], calls: dict[str, Any]) -> int:
    """The exact-makespan targets."""
    alone = alone_case(calls)
    everything = [*results, alone]
    ps = [(r, r["methods"][PLAN_STEP]) for r in everything if r["methods"][PLAN_STEP].get("valid")]
    reported = [r["case"] for r, m in ps if m["reported"] != m["step"]]
    over_lb = [(r["case"], n) for r in everything for n, m in r["methods"].items()
               if m.get("valid") and (r["lb"] > m["step"] or r["lb"] > m["ordered"])]
    behind_ordered = [r["case"] for r, m in ps if r["best_trainer_ordered"] is not None
                      and m["step"] > r["best_trainer_ordered"]]
    scored = sum(1 for r in everything for m in r["methods"].values() if m.get("valid"))
    big = [r for r in results if r["pp"] > 1]
    m = alone["methods"][PLAN_STEP]
    print(f"\nA 32k-token sequence alone in its micro-batch (n=256, dp=2, pp=8, vpp=2): plan_step "
          f"reports {float(m['reported']):.6g}, the exact makespan of its schedule is "
          f"{float(m['step']):.6g}, the closed formula says {float(m['formula']):.6g} "
          f"({ratio(m['formula'], m['step']) - 1:+.1%}); lower bound {float(alone['lb']):.6g}")
    for name in TRAINER_SCHEDULERS:
        t = alone["methods"][name]
        if t.get("step") is not None:
            print(f"  {name}: exact {float(t['step']):.6g} (seqpart's order "
                  f"{float(t['ordered']):.6g}), formula {float(t['formula']):.6g} "
                  f"({ratio(t['formula'], t['step']) - 1:+.1%}){'' if t['valid'] else ' invalid'}")
    if behind_ordered:
        print("  behind a trainer's schedule in seqpart's order on: " + ", ".join(behind_ordered[:8]))
    checks = [
        (f"reported step_time == exact makespan of the returned schedule on all {len(ps)} "
         f"batches ({len(big)} with pp > 1, vpp 1/2/4)", not reported),
        (f"step_lower_bound <= the exact makespan of every one of {scored} valid schedules (own "
         "order and seqpart's order)", not over_lb),
        ("plan_step never slower than a valid trainer schedule in the order seqpart finds for it",
         not behind_ordered),
        ("pp=8, vpp=2, a 32k sequence alone: reported step == exact makespan", m["reported"] ==
         m["step"]),
    ]
    print()
    for text, ok in checks:
        print(f"{verdict(ok)}  {text}")
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
