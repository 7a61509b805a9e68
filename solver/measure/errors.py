"""The measurement's own error: a run that failed, named by what it was running."""

from __future__ import annotations


class MeasureError(RuntimeError):
    """A timed run failed (the message names the micro-batch), or a profile cannot be used."""
