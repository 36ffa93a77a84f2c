"""JSON log lines: one object per line on stderr, for the server's events and one per review.

Log collectors in a cluster parse JSON lines; gunicorn's own messages go through the same formatter so the
stream stays one format. Review lines carry metadata and the engine's lines only: never env values or specs.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

LOGGER = "gpu_admission"
REVIEW_LOGGER = "gpu_admission.review"


# One line per review: made once, not per call (json.dumps with options builds an encoder each time).
_ENCODER = json.JSONEncoder(ensure_ascii=False, default=str)


class JsonFormatter(logging.Formatter):
    """`{"time", "level", "logger", "message", ...fields}`; fields come from `extra={"fields": {...}}`."""

    _second: tuple[int, str] = (-1, "")  # the last second formatted, and its text (one assignment)

    def _time(self, created: float, msecs: float) -> str:
        second, text = self._second
        if int(created) != second:  # strftime once a second, not once a line
            second = int(created)
            text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._second = (second, text)
        return f"{text}.{int(msecs):03d}Z"

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": self._time(record.created, record.msecs),
            "level": record.levelname.lower(),
            "logger": record.name,
            "pid": record.process,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if fields:
            line.update(fields)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return _ENCODER.encode(line)


def json_handler(stream: Any = None) -> logging.Handler:
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    return handler


def configure(level: int = logging.INFO) -> None:
    """Send the `gpu_admission` loggers to stderr as JSON lines (idempotent)."""
    logger = logging.getLogger(LOGGER)
    for handler in list(logger.handlers):
        if getattr(handler, "_gpu_admission", False):
            logger.removeHandler(handler)
    handler = json_handler()
    handler._gpu_admission = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False


def log(logger: logging.Logger, level: int, message: str, **fields: Any) -> None:
    """`logger.log` with structured fields (skipped cheaply when the level is off).

    The record is made directly: the lines never show the caller's file and line, so the stack walk
    `logger.log` does to find them is skipped (it is a fifth of a review's log line).
    """
    if logger.isEnabledFor(level):
        logger.handle(logger.makeRecord(logger.name, level, "", 0, message, (), None, extra={"fields": fields}))
