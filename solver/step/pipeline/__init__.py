"""A rank's pipeline schedule: its exact makespan and lower bound (:mod:`._schedule`), and an
order search on it (:mod:`._order`). The model is described in :mod:`._schedule`."""

from __future__ import annotations

from ._order import ORDER_WORK, improve_order
from ._schedule import (
    BWD,
    DEFAULT_MODEL,
    FWD,
    MAX_SCHEDULE_OPERATIONS,
    MAX_VIRTUAL_STAGES,
    SCHEDULES,
    PipelineModel,
    count_error,
    device_orders,
    makespan,
    makespan_lower_bound,
    pipeline_sizes,
    scale,
    scaled_load_bound,
    scaled_lower_bound,
    scaled_makespan_of,
    scaled_makespans,
    schedule_error,
)

__all__ = [
    "BWD",
    "DEFAULT_MODEL",
    "FWD",
    "MAX_SCHEDULE_OPERATIONS",
    "MAX_VIRTUAL_STAGES",
    "ORDER_WORK",
    "SCHEDULES",
    "PipelineModel",
    "count_error",
    "device_orders",
    "improve_order",
    "makespan",
    "makespan_lower_bound",
    "pipeline_sizes",
    "scale",
    "scaled_load_bound",
    "scaled_lower_bound",
    "scaled_makespan_of",
    "scaled_makespans",
    "schedule_error",
]
