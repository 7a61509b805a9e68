"""Reproduce the two counterexamples behind seqpart and print a short account of each.

    python examples/counterexamples.py

1. Karmarkar-Karp balancing, given the micro-batch count first-fit proved enough, still puts a
   micro-batch over the token cap ([8, 7, 6, 5, 4], cap 15), plus the smallest such case found by
   exhaustive search and a hunt in the bundled real length files.
2. After the micro-batch count is all-reduced across data-parallel ranks, capped first-fit on the
   rank that needed fewer leaves micro-batches empty (the trainer's torch.cat([]) crash).
"""

from __future__ import annotations

import sys

from seqpart.solver.study.datasets import list_datasets, load_dataset
from seqpart.solver.study.repro import run_all


def main() -> int:
    datasets = {name: load_dataset(name).lengths for name in list_datasets()}
    print(run_all(datasets))
    return 0


if __name__ == "__main__":
    sys.exit(main())
