"""Where patch() must run: in every worker process, not only in the driver.

Ray-based trainers balance batches inside worker processes, each a fresh interpreter with its own
copy of the trainer's modules. This test builds that shape with a stand-in trainer package and
spawned worker processes (as Ray starts them): a patch in the driver does not reach the workers,
and ``setup_worker`` run first in each worker (Ray's ``worker_process_setup_hook``) does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from seqpart.solver.dropins import get_seqlen_balanced_partitions

TRAINER = {
    "verl/__init__.py": "",
    "verl/utils/__init__.py": "",
    "verl/utils/seqlen_balancing.py": (
        "def get_seqlen_balanced_partitions(seqlen_list, k_partitions, equal_size):\n"
        "    return 'original'\n\n"
        "def rearrange_micro_batches(*args, **kwargs):\n"
        "    return 'original'\n"
    ),
    # A trainer module that imported the function by name, as verl's ray_trainer does.
    "verl/trainer_like.py": (
        "from verl.utils.seqlen_balancing import get_seqlen_balanced_partitions\n\n"
        "def balance(lengths, k):\n"
        "    return get_seqlen_balanced_partitions(lengths, k, False)\n"
    ),
}

DRIVER = """
import json
import multiprocessing as mp

def run_balance(_):
    import verl.trainer_like
    out = verl.trainer_like.balance([5, 4, 3, 2, 1], 2)
    return "original" if out == "original" else sorted(sorted(p) for p in out)

if __name__ == "__main__":
    from seqpart.solver.dropins import patch, setup_worker
    import verl.trainer_like
    patch("verl")  # in the driver only
    seen = {"driver": run_balance(0)}
    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as pool:
        seen["worker without hook"] = pool.map(run_balance, [0])[0]
    with ctx.Pool(1, initializer=setup_worker) as pool:
        seen["worker with hook"] = pool.map(run_balance, [0])[0]
    print(json.dumps(seen))
"""


def test_patch_reaches_a_worker_process_only_through_the_setup_hook(tmp_path: Path) -> None:
    for name, text in TRAINER.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "SEQPART_PATCH": "verl"}
    (tmp_path / "driver.py").write_text(DRIVER)  # a file: spawned workers re-import it
    out = subprocess.run([sys.executable, "driver.py"], capture_output=True, text=True, env=env,
                         timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    seqparts = get_seqlen_balanced_partitions([5, 4, 3, 2, 1], 2, False)
    assert seen["driver"] == sorted(sorted(p) for p in seqparts)
    assert seen["worker without hook"] == "original"
    assert seen["worker with hook"] == seen["driver"]
