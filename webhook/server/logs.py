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


class JsonFormatter(logging.Formatter):
    """`{"time", "level", "logger", "message", ...fields}`; fields come from `extra={"fields": {...}}`."""

    def format(self, record: logging.LogRecord) -> str:
        seconds = time.gmtime(record.created)
        line: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", seconds) + f".{int(record.msecs):03d}Z",
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
        return json.dumps(line, ensure_ascii=False, default=str)


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
    """`logger.log` with structured fields (skipped cheaply when the level is off)."""
    if logger.isEnabledFor(level):
        logger.log(level, message, extra={"fields": fields})
