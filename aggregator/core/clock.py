"""The clock the framework reads wherever it needs the time, injectable for tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

__all__ = ["Clock"]

Clock: TypeAlias = Callable[[], float]
"""Returns the current time in seconds since the Unix epoch, as :func:`time.time` does."""
