"""One call puts seqpart's drop-ins into a trainer: ``patch("verl")``, ``patch_slime()``, ...

Why rebinding is not one ``setattr``: trainers import these functions *by name*
(``from verl.utils.seqlen_balancing import get_seqlen_balanced_partitions`` in
``verl/trainer/ppo/ray_trainer.py``), so each importing module holds its own reference and
patching the defining module alone leaves them on the original. :func:`patch` therefore

1. imports the defining module and rebinds the function there (so every module imported
   *later*, and every lazy ``from ... import`` inside a function body, gets seqpart's), and
2. scans ``sys.modules`` for every module already holding the original object (under any name)
   and rebinds it there too.

So one call is enough, before or after the trainer's own modules are imported (seqpart's own
modules are never rebound). A name a version does not define is skipped (and reported).

``patch(trainer, cost_profile=...)`` binds a calibrated cost profile into the replacements that
balance a cost (:data:`PROFILED`: verl's ``rearrange_micro_batches``, slime's
``build_dp_schedule``), so the trainer's unchanged calls plan with the measured cost and
overhead. The balancers and counters keep the values the trainer passes (verl's
``_balance_batch`` passes workloads, not lengths), so a trainer with none of :data:`PROFILED`
refuses a profile instead of ignoring it. Modules known to import these names, checked against
the sources named in :data:`TARGETS`, are listed in :data:`KNOWN_IMPORTERS`; the scan does not
depend on that list, which is documentation.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..measure.profile import CostProfile
from . import balance, megatron, openrlhf, slime, verl
from ._values import as_profile

__all__ = [
    "KNOWN_IMPORTERS",
    "PATCH_ENV",
    "PROFILED",
    "PROFILE_ENV",
    "TARGETS",
    "Patched",
    "patch",
    "patch_areal",
    "patch_megatron",
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
        ("verl.utils.dynamic_cp_scheduler", "get_megatron_dynamic_cp_scheduler_cls",
         megatron.get_megatron_dynamic_cp_scheduler_cls),
    ],
    # A method of a class: "Class.method" (Megatron-LM dev, 2026-08, default_dynamic_cp).
    "megatron": [
        ("megatron.core.datasets.data_schedule", "DefaultDynamicCPScheduler.get_groups_and_subsamples",
         megatron.dynamic_cp_groups),
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

#: The replacements that take ``cost_profile=``: :func:`patch` binds a profile into these.
PROFILED: tuple[Callable[..., Any], ...] = (verl.rearrange_micro_batches, slime.build_dp_schedule)

#: Modules that import the names above by name (so hold their own reference), per trainer.
KNOWN_IMPORTERS: dict[str, list[str]] = {
    "verl": [
        "verl.trainer.ppo.ray_trainer",  # get_seqlen_balanced_partitions (_balance_batch)
        "verl.experimental.transfer_queue.ray_trainer",  # get_seqlen_balanced_partitions
        "verl.workers.engine.utils",  # rearrange_micro_batches
        "verl.workers.actor.megatron_actor",  # rearrange_micro_batches
        "verl.workers.critic.megatron_critic",  # rearrange_micro_batches
        "verl.workers.reward_model.megatron.reward_model",  # rearrange_micro_batches
        # verl.utils.dynamic_cp_scheduler calls get_megatron_dynamic_cp_scheduler_cls through its
        # own globals.
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
    "megatron": [],  # a method, rebound on its class
}


@dataclass
class Patched:
    """What :func:`patch` changed: ``(module, attribute)`` pairs per function, and the names
    this trainer version does not define. :meth:`undo` puts the originals back."""

    trainer: str
    rebound: dict[str, list[str]] = field(default_factory=dict)  # function -> "module.attr"
    missing: list[str] = field(default_factory=list)
    cost_profile: CostProfile | None = None
    profiled: list[str] = field(default_factory=list)  # the functions that plan with it
    _undo: list[tuple[Any, str, Any]] = field(default_factory=list, repr=False)

    def undo(self) -> None:
        for module, attr, original in reversed(self._undo):
            setattr(module, attr, original)
        self._undo.clear()


def patch(trainer: str, *, cost_profile: Any = None) -> Patched:
    """Rebind ``trainer``'s balancing functions to seqpart's everywhere they are bound.

    ``trainer`` is "verl", "slime", "openrlhf", "areal" or "megatron". The trainer must be importable.
    ``cost_profile`` (a :class:`~seqpart.solver.CostProfile` or the path of one, read once here)
    is bound into the replacements in :data:`PROFILED`, so the trainer's calls plan with its
    cost and overhead; a trainer with none of them raises a ValueError. Idempotent: a second
    call with the same profile finds nothing left to rebind; one with another profile (or none)
    rebinds to that.
    """
    key = str(trainer).lower()
    if key not in TARGETS:
        raise ValueError(f"unknown trainer {trainer!r}: choose one of {', '.join(sorted(TARGETS))}")
    profile = None if cost_profile is None else as_profile(cost_profile)
    if profile is not None and not any(fn in PROFILED for _, _, fn in TARGETS[key]):
        raise ValueError(
            f"patch({trainer!r}, cost_profile=...): none of {key}'s replaced functions balances a "
            "cost (they balance the values the trainer passes, or count tokens under the cap), "
            "so the profile would change nothing: leave cost_profile out"
        )
    result = Patched(key, cost_profile=profile)
    for module_name, attr, replacement in TARGETS[key]:
        module = _import_target(trainer, module_name, result)
        if module is None:
            continue
        owner, name = _owner(module, attr)
        original = None if owner is None else getattr(owner, name, None)
        if original is None:
            result.missing.append(f"{module_name}.{attr}")
            continue
        if profile is not None and replacement in PROFILED:
            replacement = _with_profile(replacement, profile)
            result.profiled.append(f"{module_name}.{attr}")
        places = result.rebound.setdefault(f"{module_name}.{attr}", [])
        if original is replacement or _same_binding(original, replacement):
            continue
        if owner is not module:  # a method: the class holds it, once
            result._undo.append((owner, name, original))
            setattr(owner, name, replacement)
            places.append(f"{module_name}.{attr}")
            continue
        _rebind(original, replacement, result, places)
    return result


def _owner(module: Any, attr: str) -> tuple[Any, str]:
    """The object holding ``attr`` ("name" in the module, "Class.name" in its class)."""
    if "." not in attr:
        return module, attr
    cls_name, name = attr.split(".", 1)
    return getattr(module, cls_name, None), name


def _import_target(trainer: str, module_name: str, result: Patched) -> Any:
    """The trainer's module, or None (noted in ``result.missing``) when this version lacks it."""
    try:
        return importlib.import_module(module_name)
    except ImportError as err:
        top = module_name.split(".")[0]
        if top not in sys.modules and importlib.util.find_spec(top) is None:
            raise ImportError(
                f"patch({trainer!r}) needs {top} importable: install the trainer first"
            ) from err
        result.missing.append(f"{module_name} (import failed: {err})")
        return None


def _rebind(original: Any, replacement: Any, result: Patched, places: list[str]) -> None:
    """``replacement`` wherever a module outside seqpart holds ``original``, under any name."""
    for name, mod in list(sys.modules.items()):
        namespace = getattr(mod, "__dict__", None)
        # seqpart's own modules keep their functions: re-patching would else rebind the drop-in
        # itself (it is the "original" then) in seqpart.solver.dropins.
        if not isinstance(namespace, dict) or name == "seqpart" or name.startswith("seqpart."):
            continue
        for held_as, value in list(namespace.items()):
            if value is original:
                result._undo.append((mod, held_as, value))
                setattr(mod, held_as, replacement)
                places.append(f"{name}.{held_as}")


def _with_profile(fn: Callable[..., Any], profile: CostProfile) -> Callable[..., Any]:
    """``fn`` with ``cost_profile=profile``, under ``fn``'s name and signature text."""

    @functools.wraps(fn)
    def bound(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, cost_profile=profile, **kwargs)

    bound.seqpart_cost_profile = profile  # type: ignore[attr-defined]
    return bound


def _same_binding(held: Any, replacement: Any) -> bool:
    """Whether ``held`` is already ``replacement``'s function bound to an equal profile."""
    return (getattr(held, "__wrapped__", None) is getattr(replacement, "__wrapped__", False)
            and getattr(held, "seqpart_cost_profile", None) == getattr(
                replacement, "seqpart_cost_profile", False))


def patch_verl(*, cost_profile: Any = None) -> Patched:
    """``patch("verl")``: ``get_seqlen_balanced_partitions`` and ``rearrange_micro_batches``
    (which plans with ``cost_profile`` when given)."""
    return patch("verl", cost_profile=cost_profile)


def patch_slime(*, cost_profile: Any = None) -> Patched:
    """``patch("slime")``: ``get_seqlen_balanced_partitions``, ``get_minimum_num_micro_batch_size``
    (v0.2/v0.3) and ``build_dp_schedule`` (main; it plans with ``cost_profile`` when given)."""
    return patch("slime", cost_profile=cost_profile)


def patch_megatron() -> Patched:
    """``patch("megatron")``: ``DefaultDynamicCPScheduler.get_groups_and_subsamples`` (the
    dynamic-CP schedule; the class's ``run`` stays Megatron-LM's)."""
    return patch("megatron")


def patch_openrlhf() -> Patched:
    """``patch("openrlhf")``: the balancer and the 4-argument counter."""
    return patch("openrlhf")


def patch_areal() -> Patched:
    """``patch("areal")``: ``areal.utils.seqpack._kk_partition`` (used by ``kk_allocate``)."""
    return patch("areal")


#: The environment variable :func:`setup_worker` reads: trainer names, comma-separated.
PATCH_ENV = "SEQPART_PATCH"
#: ... and the path of a cost profile for :func:`patch`'s ``cost_profile`` (optional).
PROFILE_ENV = "SEQPART_COST_PROFILE"


def setup_worker() -> list[Patched]:
    """Patch the trainers named in ``$SEQPART_PATCH`` (e.g. ``"verl"``) in this process, with
    the cost profile at ``$SEQPART_COST_PROFILE`` when that is set (read once, here).

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
    or unset variable patches nothing. Every process reads the profile from its own path: give
    each node the same file, or ranks plan with different costs. A profile without a trainer,
    or one that cannot be read, raises a ValueError that names the variable.
    """
    import os

    names = [name.strip() for name in os.environ.get(PATCH_ENV, "").split(",") if name.strip()]
    path = os.environ.get(PROFILE_ENV, "").strip()
    if path and not names:
        raise ValueError(f"{PROFILE_ENV}={path!r} is set but {PATCH_ENV} names no trainer, so "
                         f"nothing would use the profile: set {PATCH_ENV} (e.g. verl) or unset "
                         f"{PROFILE_ENV}")
    try:
        profile = as_profile(path) if path else None
    except ValueError as err:
        raise ValueError(f"{PROFILE_ENV}: {err}") from None
    return [patch(name, cost_profile=profile) for name in names]
