"""One call puts seqpart's drop-ins into a trainer: ``patch("verl")``, ``patch_slime()``, ...

Why rebinding is not one ``setattr``: trainers import these functions *by name*
(``from verl.utils.seqlen_balancing import get_seqlen_balanced_partitions`` in
``verl/trainer/ppo/ray_trainer.py``), so each importing module holds its own reference and
patching the defining module alone leaves them on the original. :func:`patch` therefore

1. imports the defining module and rebinds the function there (so every module imported
   *later*, and every lazy ``from ... import`` inside a function body, gets seqpart's), and
2. scans ``sys.modules`` for every module already holding the original object (under any name)
   and rebinds it there too.

So one call is enough, before or after the trainer's own modules are imported. A name a version
does not define is skipped (and reported). Modules known to import these names, checked against
the sources named in :data:`TARGETS`, are listed in :data:`KNOWN_IMPORTERS`; the scan does not
depend on that list, which is documentation.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from seqpart.solver.dropins import balance, openrlhf, slime, verl

__all__ = [
    "KNOWN_IMPORTERS",
    "PATCH_ENV",
    "TARGETS",
    "Patched",
    "patch",
    "patch_areal",
    "patch_openrlhf",
    "patch_slime",
    "patch_verl",
    "setup_worker",
]


def _areal_kk_partition(values: Any, k: Any, equal_size: Any = False) -> list[list[int]]:
    """AReaL's ``_kk_partition(values, k, equal_size=False)``, on seqpart's balancer."""
    return balance.get_seqlen_balanced_partitions(values, k, equal_size)


#: trainer -> (defining module, function name, seqpart's replacement). Sources read: verl main
#: (2026-01), slime main (2026-08, ``dp_schedule``) and v0.2/v0.3 (``megatron_utils/data.py``),
#: OpenRLHF main (2026-08), AReaL main (2026-05).
TARGETS: dict[str, list[tuple[str, str, Callable[..., Any]]]] = {
    "verl": [
        ("verl.utils.seqlen_balancing", "get_seqlen_balanced_partitions",
         balance.get_seqlen_balanced_partitions),
        ("verl.utils.seqlen_balancing", "rearrange_micro_batches", verl.rearrange_micro_batches),
    ],
    "slime": [
        ("slime.utils.seqlen_balancing", "get_seqlen_balanced_partitions",
         balance.get_seqlen_balanced_partitions),
        ("slime.utils.seqlen_balancing", "get_minimum_num_micro_batch_size",
         balance.get_minimum_num_micro_batch_size),
        ("slime.utils.dp_schedule", "build_dp_schedule", slime.build_dp_schedule),
    ],
    "openrlhf": [
        ("openrlhf.utils.seqlen_balancing", "get_seqlen_balanced_partitions",
         balance.get_seqlen_balanced_partitions),
        ("openrlhf.utils.seqlen_balancing", "get_minimum_num_micro_batch_size",
         openrlhf.get_minimum_num_micro_batch_size),
    ],
    "areal": [
        ("areal.utils.seqpack", "_kk_partition", _areal_kk_partition),
    ],
}

#: Modules that import the names above by name (so hold their own reference), per trainer.
KNOWN_IMPORTERS: dict[str, list[str]] = {
    "verl": [
        "verl.trainer.ppo.ray_trainer",  # get_seqlen_balanced_partitions (_balance_batch)
        "verl.experimental.transfer_queue.ray_trainer",  # get_seqlen_balanced_partitions
        "verl.workers.engine.utils",  # rearrange_micro_batches
        "verl.workers.actor.megatron_actor",  # rearrange_micro_batches
        "verl.workers.critic.megatron_critic",  # rearrange_micro_batches
        "verl.workers.reward_model.megatron.reward_model",  # rearrange_micro_batches
        # verl.workers.fsdp_workers imports rearrange_micro_batches inside a method (lazy).
    ],
    "slime": [
        "slime.utils.dp_schedule",  # get_seqlen_balanced_partitions (main)
        "slime.ray.rollout",  # build_dp_schedule (main)
        "slime.backends.megatron_utils.data",  # both leaf functions (v0.2.x, v0.3.0)
    ],
    "openrlhf": [
        "openrlhf.trainer.ppo_utils.replay_buffer",  # both
        "openrlhf.trainer.ppo_utils.experience_maker",  # both
    ],
    "areal": [],  # kk_allocate calls _kk_partition through its module's globals
}


@dataclass
class Patched:
    """What :func:`patch` changed: ``(module, attribute)`` pairs per function, and the names
    this trainer version does not define. :meth:`undo` puts the originals back."""

    trainer: str
    rebound: dict[str, list[str]] = field(default_factory=dict)  # function -> "module.attr"
    missing: list[str] = field(default_factory=list)
    _undo: list[tuple[Any, str, Any]] = field(default_factory=list, repr=False)

    def undo(self) -> None:
        for module, attr, original in reversed(self._undo):
            setattr(module, attr, original)
        self._undo.clear()


def patch(trainer: str) -> Patched:
    """Rebind ``trainer``'s balancing functions to seqpart's everywhere they are bound.

    ``trainer`` is "verl", "slime", "openrlhf" or "areal". The trainer must be importable.
    Idempotent: a second call finds nothing left to rebind.
    """
    key = str(trainer).lower()
    if key not in TARGETS:
        raise ValueError(f"unknown trainer {trainer!r}: choose one of {', '.join(sorted(TARGETS))}")
    result = Patched(key)
    for module_name, attr, replacement in TARGETS[key]:
        try:
            module = importlib.import_module(module_name)
        except ImportError as err:
            if module_name.split(".")[0] not in sys.modules and importlib.util.find_spec(
                module_name.split(".")[0]
            ) is None:
                raise ImportError(
                    f"patch({trainer!r}) needs {module_name.split('.')[0]} importable: install "
                    "the trainer first"
                ) from err
            result.missing.append(f"{module_name} (import failed: {err})")
            continue
        original = getattr(module, attr, None)
        if original is None:
            result.missing.append(f"{module_name}.{attr}")
            continue
        places = result.rebound.setdefault(f"{module_name}.{attr}", [])
        if original is replacement:
            continue
        for name, mod in list(sys.modules.items()):
            namespace = getattr(mod, "__dict__", None)
            if not isinstance(namespace, dict):
                continue
            for held_as, value in list(namespace.items()):
                if value is original:
                    result._undo.append((mod, held_as, value))
                    setattr(mod, held_as, replacement)
                    places.append(f"{name}.{held_as}")
    return result


def patch_verl() -> Patched:
    """``patch("verl")``: ``get_seqlen_balanced_partitions`` and ``rearrange_micro_batches``."""
    return patch("verl")


def patch_slime() -> Patched:
    """``patch("slime")``: ``get_seqlen_balanced_partitions``, ``get_minimum_num_micro_batch_size``
    (v0.2/v0.3) and ``build_dp_schedule`` (main)."""
    return patch("slime")


def patch_openrlhf() -> Patched:
    """``patch("openrlhf")``: the balancer and the 4-argument counter."""
    return patch("openrlhf")


def patch_areal() -> Patched:
    """``patch("areal")``: ``areal.utils.seqpack._kk_partition`` (used by ``kk_allocate``)."""
    return patch("areal")


#: The environment variable :func:`setup_worker` reads: trainer names, comma-separated.
PATCH_ENV = "SEQPART_PATCH"


def setup_worker() -> list[Patched]:
    """Patch the trainers named in ``$SEQPART_PATCH`` (e.g. ``"verl"``) in this process.

    Why a hook: a patch rebinds names in the process that calls it. Ray-based trainers (verl,
    slime, OpenRLHF, AReaL) balance and split batches inside worker processes (the trainer's
    driver and its actor workers), each with its own copy of the trainer's modules, so a
    ``patch()`` in the driver script leaves every worker on the original. Ray runs this function
    first in every worker process it starts::

        ray.init(runtime_env={
            "env_vars": {"SEQPART_PATCH": "verl"},
            "worker_process_setup_hook": "seqpart.solver.dropins.setup_worker",
        })

    Outside Ray, call it (or :func:`patch`) at the top of whatever each process runs. An empty
    or unset variable patches nothing.
    """
    import os

    names = [name.strip() for name in os.environ.get(PATCH_ENV, "").split(",") if name.strip()]
    return [patch(name) for name in names]
