"""JSON log lines: one object per line on stderr, for the server's events and one per review.

Log collectors in a cluster parse JSON lines; gunicorn's own messages go through the same formatter so the
stream stays one format. Review lines carry metadata and the engine's lines only: never env values or specs.
The webhook's own lines are written in batches by a thread of each process (`BatchingStreamHandler`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import sys
import threading
import time
from typing import Any

LOGGER = "gpu_admission"
REVIEW_LOGGER = "gpu_admission.review"


# One line per review: made once, not per call (json.dumps with options builds an encoder each time).
_ENCODER = json.JSONEncoder(ensure_ascii=False, default=str)
# Characters that JSON leaves as they are but that many line readers (Python's splitlines, some collectors)
# take as line breaks. A container name is the user's, and admission comes before the API server checks it:
# left raw, a name could end the review's line and start a forged one.
_LINE_BREAKS = {0x85: "\\u0085", 0x2028: "\\u2028", 0x2029: "\\u2029"}


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
        text = _ENCODER.encode(line)
        return text if text.isascii() else text.translate(_LINE_BREAKS)


class BatchingStreamHandler(logging.Handler):
    """Formats each line on the caller's thread and queues it; a writer thread writes what has gathered.

    With a line per review, a write of its own per line (and the handler's lock around it) cost about a tenth
    of the server's CPU at saturation: every write lets go of the GIL, and the server's threads then wake one
    another. Here a review's thread only formats and queues its line; the writer wakes when lines wait,
    gathers them for `linger` seconds and writes them in one go, in the order they were queued.

    - `flush()` writes what is queued; logging calls it at exit, so a worker that ends normally loses nothing.
      A process killed outright loses the lines of its last `linger` seconds.
    - A stream that does not take lines (a stuck pipe) stops the writer, not the reviews: past `max_queued`
      lines, new ones are counted and dropped, and a line saying how many is written once the stream moves.
    - Forking (gunicorn's workers) waits for a write in progress; the child starts with an empty queue and
      starts its own writer on its first line (threads do not survive a fork).
    """

    def __init__(self, stream: Any = None, linger: float = 0.1, max_queued: int = 10_000) -> None:
        super().__init__()
        self.stream = stream or sys.stderr
        self.linger = linger
        self.max_queued = max_queued
        self._reset()
        os.register_at_fork(before=self._before_fork, after_in_parent=self._after_fork, after_in_child=self._reset)

    def _before_fork(self) -> None:
        self._write_lock.acquire()  # no write in progress: the child's copy of the stream is whole

    def _after_fork(self) -> None:
        self._write_lock.release()

    def _reset(self) -> None:
        self._queue: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._waiting = threading.Event()  # set when lines are queued and the writer has not taken them yet
        self._write_lock = threading.Lock()  # held while taking lines out and writing them
        self._writer: threading.Thread | None = None
        self._dropped = 0

    def handle(self, record: logging.LogRecord) -> bool | logging.LogRecord:  # type: ignore[override]  # 3.12's
        """As logging's, without the handler's lock around `emit`: queueing needs none, and under that lock a
        thread switch in the middle of formatting would hold every other thread's line up. (From Python 3.12 a
        filter may return a record to log instead, as there.)"""
        passed = self.filter(record)
        if isinstance(passed, logging.LogRecord):
            record = passed
        if passed:
            self.emit(record)
        return passed

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:
            self.handleError(record)
            return
        if self._queue.qsize() >= self.max_queued:
            self._dropped += 1  # (under the GIL; an undercount in a race matters less than a lock here)
            return
        self._queue.put(line)
        if not self._waiting.is_set():
            self._waiting.set()
            if self._writer is None:
                self._start_writer()

    def _start_writer(self) -> None:
        with self._write_lock:
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_forever, name="log-writer", daemon=True)
                self._writer.start()

    def _write_forever(self) -> None:
        while True:
            self._waiting.wait()
            time.sleep(self.linger)  # let the lines of other reviews gather
            self._waiting.clear()  # before taking lines out: a line queued after this sets it again
            with contextlib.suppress(Exception):  # never let the writer die: lines would pile up unwritten
                self.flush()

    def _dropped_record(self) -> logging.LogRecord:
        dropped, self._dropped = self._dropped, 0
        message = f"{dropped} log line(s) dropped: the log stream did not take them ({self.max_queued} were waiting)"
        record = logging.LogRecord(LOGGER, logging.WARNING, "", 0, message, (), None)
        record.fields = {"event": "log-lines-dropped", "dropped": dropped}
        return record

    def flush(self) -> None:
        """Write every queued line now (logging's shutdown calls this at exit)."""
        with self._write_lock:
            lines = []
            while True:
                try:
                    lines.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            if self._dropped:
                lines.append(self.format(self._dropped_record()))
            if not lines:
                return
            with contextlib.suppress(Exception):  # a closed or broken stream: as logging's handlers, never raise
                self.stream.write("\n".join(lines) + "\n")
                self.stream.flush()


def json_handler(stream: Any = None) -> logging.Handler:
    handler = BatchingStreamHandler(stream)
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
