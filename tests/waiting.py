"""Waiting in tests for what happens in another thread or process: one helper, one message."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def eventually(condition: Callable[[], T], timeout: float = 5.0, what: str = "the condition") -> T:
    """Poll `condition` until it returns something true, and return that; fail once `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout:g} s: {what}")
        time.sleep(0.02)
