"""Worker side of tests/integration/test_distributed.py: runs in spawned processes, one per rank.

Each rank joins a gloo group, runs every scenario in order and writes what happened (the plan's
fields, or the error's type, code and message) to ``<out_dir>/rank<r>.json`` after each one, so
a hang still leaves the finished scenarios on disk. Running all scenarios in one group keeps
the suite fast (one torch import per rank) and checks that after every error all ranks are
still in step: a rank left waiting would make the next scenario's collective hang or fail.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from typing import Any

CAP = 100

# Per-rank lengths (index = rank, world size 3). Alone, rank 0 needs 1 micro-batch, rank 1
# needs 3 and rank 2 needs 2: the seed issue's situation.
SEED_LENGTHS = [
    [30, 20, 10, 5],
    [90, 80, 70, 10, 5, 5],
    [60, 50, 40, 30],
]
# Rank 0 has 2 sequences but rank 1 needs 3 micro-batches.
TOO_FEW_LENGTHS = [
    [10, 10],
    [90, 80, 70],
    [40, 30, 20],
]
# Rank 2 holds a sequence over the cap.
OVER_CAP_LENGTHS = [
    [30, 20, 10],
    [50, 40],
    [60, 150, 10],
]
GLOBAL_LENGTHS = [
    [95, 90, 85, 80, 5, 5, 5],
    [10, 12, 14, 16, 18, 20],
    [50, 49, 48, 47, 3, 2, 1, 60],
]


def _plan_record(plan: Any) -> dict[str, Any]:
    return {"ok": True, **plan.to_dict()}


def _error_record(err: BaseException) -> dict[str, Any]:
    if not hasattr(err, "code"):  # a drop-in's own error: its type and message are the record
        return {"ok": False, "type": type(err).__name__, "code": None, "rank": None,
                "message": str(err)}
    return {
        "ok": False,
        "type": type(err).__name__,
        "code": getattr(err, "code", None),
        "rank": getattr(err, "rank", None),
        "message": str(err),
    }


def _scenarios(rank: int, world: int) -> dict[str, Any]:
    from seqpart.solver.distributed.planners import (
        partition_across_ranks,
        plan_global_across_ranks,
        plan_step_across_ranks,
    )

    def seed() -> Any:
        return partition_across_ranks(SEED_LENGTHS[rank], CAP, time_limit=0.2)

    def multiple_of() -> Any:
        return partition_across_ranks(SEED_LENGTHS[rank], CAP, multiple_of=2, time_limit=0.2)

    def too_few() -> Any:
        return partition_across_ranks(TOO_FEW_LENGTHS[rank], CAP, time_limit=0.2)

    def over_cap() -> Any:
        return partition_across_ranks(OVER_CAP_LENGTHS[rank], CAP, time_limit=0.2)

    def mismatched_cap() -> Any:
        return partition_across_ranks(SEED_LENGTHS[rank], CAP * 2 if rank == 1 else CAP)

    def mismatched_multiple_of() -> Any:
        return partition_across_ranks(SEED_LENGTHS[rank], CAP, multiple_of=1 + (rank == world - 1))

    def global_plan() -> Any:
        result = plan_global_across_ranks(GLOBAL_LENGTHS[rank], CAP, time_limit=0.5)
        return {
            "ok": True,
            "plans": [p.to_dict() for p in result.plans],
            "offsets": result.offsets,
            "lengths": result.lengths,
            "rank": result.rank,
            "owner_of_last": list(result.owner(len(result.lengths) - 1)),
        }

    def global_bad_input() -> Any:
        lengths = [10, -1] if rank == 1 else GLOBAL_LENGTHS[rank]
        return plan_global_across_ranks(lengths, CAP)

    def cap_over_int64() -> Any:
        # 2**63 cannot travel in the int64 status row: rank 1 must fail like any bad input.
        return partition_across_ranks(SEED_LENGTHS[rank], 2**63 if rank == 1 else CAP)

    def multiple_of_over_int64() -> Any:
        return plan_global_across_ranks(GLOBAL_LENGTHS[rank], CAP,
                                        multiple_of=2**70 if rank == 2 else 1)

    def mismatched_call() -> Any:
        if rank == 0:
            return plan_global_across_ranks(GLOBAL_LENGTHS[rank], CAP)
        return partition_across_ranks(SEED_LENGTHS[rank], CAP)

    def mismatched_step_call() -> Any:
        if rank == 2:
            return plan_step_across_ranks(GLOBAL_LENGTHS[rank], CAP)
        return plan_global_across_ranks(GLOBAL_LENGTHS[rank], CAP)

    def bad_timeout() -> Any:
        return partition_across_ranks(SEED_LENGTHS[rank], CAP, timeout=-1 if rank == 1 else 5.0)

    def step_plan() -> Any:
        result = plan_step_across_ranks(GLOBAL_LENGTHS[rank], CAP, time_limit=0.5, timeout=20)
        return {"ok": True, "schedule": repr(result.schedule), "offsets": result.offsets,
                "lengths": result.lengths, "rank": result.rank}

    def verl_rearrange() -> Any:
        import torch

        from seqpart.solver.dropins import rearrange_micro_batches

        # Rank r holds 6 + 3r sequences; the ranks agree on one count, each under the cap.
        gen = torch.Generator().manual_seed(rank)
        n = 6 + 3 * rank
        valid = torch.randint(20, 90, (n,), generator=gen)
        mask = (torch.arange(100)[None, :] < valid[:, None]).long()
        batch = {"input_ids": torch.zeros(n, 100, dtype=torch.long), "attention_mask": mask}
        micro, idx = rearrange_micro_batches(batch, max_token_len=150)
        return {"ok": True, "idx": idx, "valid": valid.tolist(),
                "tokens": [int(m["attention_mask"].sum()) for m in micro]}

    def verl_rearrange_bad_rank() -> Any:
        import torch

        from seqpart.solver.dropins import rearrange_micro_batches

        n = 5
        mask = torch.ones(n, 100, dtype=torch.long)
        if rank != 1:
            mask[:, 60:] = 0  # 60 tokens each; rank 1's 100 are over max_token_len=80
        batch = {"input_ids": torch.zeros(n, 100, dtype=torch.long), "attention_mask": mask}
        return rearrange_micro_batches(batch, max_token_len=80)

    def _verl_batch() -> dict[str, Any]:
        import torch

        mask = torch.ones(6, 100, dtype=torch.long)
        mask[:, 40:] = 0
        return {"input_ids": torch.zeros(6, 100, dtype=torch.long), "attention_mask": mask}

    def verl_mismatched_cap() -> Any:
        from seqpart.solver.dropins import rearrange_micro_batches

        return rearrange_micro_batches(_verl_batch(), max_token_len=120 if rank == 2 else 100,
                                       timeout=20)

    def verl_bad_timeout() -> Any:
        from seqpart.solver.dropins import rearrange_micro_batches

        return rearrange_micro_batches(_verl_batch(), 100, timeout=float("inf") if rank == 0 else 20)

    def verl_vs_partition() -> Any:
        from seqpart.solver.dropins import rearrange_micro_batches

        if rank == 1:
            return partition_across_ranks(SEED_LENGTHS[rank], CAP, timeout=20)
        return rearrange_micro_batches(_verl_batch(), 100, timeout=20)

    def verl_bad_profile() -> Any:
        from seqpart.solver import CostProfile
        from seqpart.solver.dropins import rearrange_micro_batches

        # Rank 2's profile file is missing; the others hold a good profile.
        good = CostProfile(overhead_s=1e-3, linear_s=1e-6, quadratic_s=1e-9, device="cpu",
                           dtype="float32", torch_version="", model={})
        profile = "/nonexistent/cost_profile.json" if rank == 2 else good
        return rearrange_micro_batches(_verl_batch(), 100, timeout=20, cost_profile=profile)

    def bad_group() -> Any:
        return partition_across_ranks(SEED_LENGTHS[rank], CAP, timeout=20,
                                      group=object() if rank == 2 else None)

    def mismatched_step_kwargs() -> Any:
        return plan_step_across_ranks(GLOBAL_LENGTHS[rank], CAP, timeout=20,
                                      pp=2 if rank == 1 else 1)

    def mismatched_partition_kwargs() -> Any:
        return partition_across_ranks(SEED_LENGTHS[rank], CAP, timeout=20,
                                      cost="attention" if rank == 0 else "tokens")

    return {
        "seed": seed,
        "multiple_of": multiple_of,
        "too_few": too_few,
        "over_cap": over_cap,
        "mismatched_cap": mismatched_cap,
        "mismatched_multiple_of": mismatched_multiple_of,
        "global_plan": global_plan,
        "global_bad_input": global_bad_input,
        "cap_over_int64": cap_over_int64,
        "multiple_of_over_int64": multiple_of_over_int64,
        "mismatched_call": mismatched_call,
        "mismatched_step_call": mismatched_step_call,
        "bad_timeout": bad_timeout,
        "step_plan": step_plan,
        "verl_rearrange": verl_rearrange,
        "verl_rearrange_bad_rank": verl_rearrange_bad_rank,
        "verl_mismatched_cap": verl_mismatched_cap,
        "verl_bad_timeout": verl_bad_timeout,
        "verl_vs_partition": verl_vs_partition,
        "verl_bad_profile": verl_bad_profile,
        "bad_group": bad_group,
        "mismatched_step_kwargs": mismatched_step_kwargs,
        "mismatched_partition_kwargs": mismatched_partition_kwargs,
    }


def run_worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    """Entry point of one spawned rank."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"file://{init_file}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=30),  # a mismatched collective errors instead of hanging
    )
    results: dict[str, Any] = {}
    path = os.path.join(out_dir, f"rank{rank}.json")
    try:
        for name, scenario in _scenarios(rank, world).items():
            try:
                out = scenario()
                results[name] = out if isinstance(out, dict) else _plan_record(out)
            except Exception as err:  # recorded; the test decides what was expected
                results[name] = _error_record(err)
            with open(path, "w") as f:
                json.dump(results, f)
        # Every rank reaches this only if no scenario left a rank behind.
        total = torch.tensor([1], dtype=torch.int64)
        dist.all_reduce(total)
        results["lockstep"] = int(total.item())
        with open(path, "w") as f:
            json.dump(results, f)
    finally:
        dist.destroy_process_group()


#: Per-rank lengths and groups (index = rank, up to 4 ranks): each rank's groups index its own
#: sequences, so they differ between ranks by nature.
GROUPED_LENGTHS = [
    [30, 20, 10, 5, 7, 9],
    [90, 80, 70, 10, 5, 5],
    [40, 40, 30, 20, 10, 5, 5],
    [60, 30, 25, 25, 10, 10],
]
GROUPED_GROUPS = [
    [[0, 1], [2, 3], [4, 5]],
    [[0, 3], [1, 4], [2, 5]],
    [[0, 6], [1, 5, 4]],
    [[2, 3]],
]


def run_groups_worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    """Per-rank groups: partition_across_ranks plans each rank's own at the agreed count, and
    plan_global_across_ranks offsets them into the global indices; a bad group on one rank
    fails on every rank."""
    import torch.distributed as dist

    from seqpart.solver.distributed.planners import partition_across_ranks, plan_global_across_ranks

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=30))
    lengths, groups = GROUPED_LENGTHS[rank], GROUPED_GROUPS[rank]
    results: dict[str, Any] = {}
    calls = {
        "local": lambda: _plan_record(partition_across_ranks(
            lengths, CAP, groups=groups, time_limit=0.1, timeout=20)),
        "global": lambda: {"ok": True, "bins": [p.bins for p in plan_global_across_ranks(
            lengths, CAP, groups=groups, time_limit=0.2, timeout=20).plans]},
        "bad_group": lambda: _plan_record(partition_across_ranks(
            lengths, CAP, groups=[[0, 99]] if rank == world - 1 else groups, time_limit=0.1,
            timeout=20)),
        "other_cost": lambda: _plan_record(partition_across_ranks(
            lengths, CAP, groups=groups, cost="attention" if rank == 0 else "tokens",
            time_limit=0.1, timeout=20)),
    }
    try:
        for name, call in calls.items():
            try:
                results[name] = call()
            except Exception as err:
                results[name] = _error_record(err)
        with open(os.path.join(out_dir, f"groups{rank}.json"), "w") as f:
            json.dump(results, f)
    finally:
        dist.destroy_process_group()


def run_absent_rank_worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    """Rank ``world - 1`` never calls: the others must raise code "timeout" within ``timeout``."""
    _run_absent(rank, world, init_file, out_dir, "partition")


def run_absent_rank_verl_worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    """The same with the verl drop-in, whose ranks agree on a count through the same protocol."""
    _run_absent(rank, world, init_file, out_dir, "verl")


def _run_absent(rank: int, world: int, init_file: str, out_dir: str, call: str) -> None:
    import time

    import torch
    import torch.distributed as dist

    from seqpart.solver.distributed.planners import partition_across_ranks
    from seqpart.solver.dropins import rearrange_micro_batches  # loaded before the clock starts

    dist.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
        timeout=timedelta(seconds=60),  # the group's own timeout: far longer than the call's
    )
    record: dict[str, Any]
    if rank == world - 1:
        time.sleep(1.8)  # alive past the others' 1 s timeout, but never joins the collective
        record = {"absent": True}
    else:
        t0 = time.monotonic()
        try:
            if call == "verl":
                batch = {"input_ids": torch.zeros(4, 50, dtype=torch.long),
                         "attention_mask": torch.ones(4, 50, dtype=torch.long)}
                rearrange_micro_batches(batch, 100, timeout=1.0)
            else:
                partition_across_ranks(SEED_LENGTHS[rank], CAP, timeout=1.0)
            record = {"ok": True}
        except Exception as err:
            record = _error_record(err)
        record["seconds"] = time.monotonic() - t0
    with open(os.path.join(out_dir, f"absent{rank}.json"), "w") as f:
        json.dump(record, f)
    # No destroy_process_group: the group is unusable after the timeout (documented).
    os._exit(0)
