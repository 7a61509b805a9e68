"""Local search alone: final load and time from each start, against another implementation.

    python benchmarks/bench_local_search.py [--against OLD.py] [--sizes 256,1024,2048]

The batches are the online ones of bench_cpsat.py (generated long-tail RL batches and real-data
draws, k = the trainers' first-fit count). From each start (LPT, which may break the cap;
Karmarkar-Karp, which may too; the capped balancer) ``improve_lists`` runs to completion.
``--against`` loads a ``local_search.py`` from elsewhere, e.g. an older commit:

    git show 67e47e2:heuristics/local_search.py > /tmp/local_search_old.py
    python benchmarks/bench_local_search.py --against /tmp/local_search_old.py

and prints both, with time ratios in the same process. Gap is against the bin-packing bound.
The other file is imported inside ``seqpart.heuristics``, so it runs on this tree's shared
helpers (``_common``): the comparison is of the search itself.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import sys
from types import ModuleType

from common import (
    DEFAULT_DATA_DIR,
    generated_instances,
    machine_header,
    median,
    real_instances,
    table,
    timed,
)

from seqpart.heuristics import load_lower_bound
from seqpart.heuristics.bounds import load_lower_bound_packing
from seqpart.heuristics.kernels import capped_balance_lists, karmarkar_karp_lists, lpt_lists, prepare


def load_module(path: str) -> ModuleType:
    """A local_search.py from elsewhere, imported inside the seqpart.heuristics package (it uses
    relative imports)."""
    name = "seqpart.heuristics._against"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"--against {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default=None, help="another local_search.py to compare")
    parser.add_argument("--sizes", default="256,1024,2048", help="batch sizes n")
    parser.add_argument("--seeds", type=int, default=5, help="batches per (shape or file, n)")
    args = parser.parse_args()
    print(machine_header(["benchmarks/bench_local_search.py", *sys.argv[1:]]))
    sizes = [int(x) for x in args.sizes.split(",")]
    batches = generated_instances(sizes, args.seeds) + real_instances(
        DEFAULT_DATA_DIR, sizes, args.seeds)
    impls = {"this": importlib.import_module("seqpart.heuristics._local_search")}
    if args.against:
        impls["against"] = load_module(args.against)
    # (impl, start) -> per batch: (valid, gap, at the bound, seconds)
    results: dict[tuple[str, str], list[tuple[bool, float, bool, float]]] = {}
    for inst in batches:
        tokens, cost, count, k, cap = prepare(inst.lengths, inst.k, inst.cap, None, None)
        assert k is not None
        bound = load_lower_bound_packing(cost, k, load_lower_bound(cost, k), sum(cost))
        starts = {
            "lpt": [sorted(b) for b in lpt_lists(tokens, cost, count, k, cap, None)],
            "karmarkar_karp": karmarkar_karp_lists(cost, count, k, None),
            "capped_balance": capped_balance_lists(tokens, cost, count, k, cap, None).bins,
        }
        for impl_name, impl in impls.items():
            for start_name, start in starts.items():
                found, seconds, err = timed(functools.partial(
                    impl.improve_lists, tokens, cost, count, start, cap, None))
                if err is not None:
                    raise err
                # Another version's improve_lists may return the bins alone.
                bins = getattr(found, "bins", found)
                top = max(sum(cost[i] for i in b) for b in bins)
                ok = all(bins) and all(sum(tokens[i] for i in b) <= (cap or top) for b in bins)
                results.setdefault((impl_name, start_name), []).append(
                    (ok, top / bound - 1, top == bound, seconds))
    rows = []
    for (impl_name, start_name), rs in sorted(results.items(), key=lambda x: (x[0][1], x[0][0])):
        valid = [r for r in rs if r[0]]
        total = sum(r[3] for r in rs)
        base = results.get(("against", start_name))
        ratio = f"{total / sum(r[3] for r in base):.2f}x" if base else "-"
        rows.append([
            start_name, impl_name, f"{len(valid)}/{len(rs)}",
            f"{sum(r[1] for r in valid) / max(1, len(valid)):.4%}",
            str(sum(r[2] for r in valid)), f"{median([r[3] for r in rs]) * 1e3:.2f}",
            f"{max(r[3] for r in rs) * 1e3:.1f}", f"{total * 1e3:.0f}", ratio,
        ])
    print(f"\n{len(batches)} batches, n in {sizes}; local search run to completion from each start")
    print(table(["start", "implementation", "valid", "mean gap", "at bound", "median ms",
                 "max ms", "total ms", "time vs against"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
