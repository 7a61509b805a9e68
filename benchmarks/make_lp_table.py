"""Writes ``solver/step/lp_certificates.json``: the pipeline LP's certificates for the default
schedule.

    python benchmarks/make_lp_table.py [--most-operations 8192] [--counts 256]

The step bound at pp > 1 (:func:`seqpart.solver.step.bound.exact_scaled_bounds`) raises each
count's bound by the least makespan of the schedule over every real-valued split of a rank's load
(:func:`seqpart.solver.step.makespan_optimum.lp_certificate`: an exact integer certificate from
the LP's dual, ``(C, L, S)``: ``S * makespan >= C * load + L * latency``). It depends only on the
schedule, pp, vpp and m, not on the batch, so for Megatron-LM's schedule with forward:backward
1:2 (``PipelineModel()``, whatever its p2p latency) the certificates are computed here once and
bundled; other schedules compute theirs within the call's LP budget. Takes a few minutes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from seqpart.solver.step.makespan_optimum import lp_certificate
from seqpart.solver.step.pipeline import DEFAULT_MODEL

OUT = Path(__file__).resolve().parent.parent / "solver" / "step" / "lp_certificates.json"
ABOUT = ("The pipeline LP's certificates (C, L, S) for Megatron-LM's schedule at forward:backward "
         "1:2 without its p2p latency: S * makespan >= C * load + L * latency, for every split of "
         "a rank's load into m micro-batches and every order. Each from seqpart.solver.step."
         "makespan_optimum.lp_certificate; written by benchmarks/make_lp_table.py, do not edit.")
SIZES = [(pp, vpp) for pp in (2, 3, 4, 6, 8) for vpp in (1, 2, 4)]


def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--most-operations", type=int, default=8192,
                    help="skip counts whose schedule has more operations (2*pp*vpp*m)")
    ap.add_argument("--counts", type=int, default=256, help="counts m = 1..this")
    args = ap.parse_args(argv)
    free = replace(DEFAULT_MODEL, p2p_latency=0)
    rows = []
    began = time.perf_counter()
    for pp, vpp in SIZES:
        for m in range(1, args.counts + 1):
            if 2 * pp * vpp * m > args.most_operations:
                break
            cost, crossed, flow = lp_certificate(pp, vpp, m, free)
            if cost > 0:
                rows.append([pp, vpp, m, cost, crossed, flow])
        print(f"pp={pp} vpp={vpp}: {len(rows)} certificates, {time.perf_counter() - began:.0f} s",
              flush=True)
    doc = {"about": ABOUT, "columns": ["pp", "vpp", "m", "C", "L", "S"], "certificates": rows}
    OUT.write_text(json.dumps(doc, separators=(",", ":")).replace("],[", "],\n["), encoding="utf-8")
    print(f"wrote {OUT} ({len(rows)} certificates)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
