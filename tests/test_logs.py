"""The server's log lines: JSON, one per line, written in batches by a thread of each process."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

from tests.conftest import ROOT
from tests.waiting import eventually
from webhook.server.logs import BatchingStreamHandler, JsonFormatter, json_handler, log


class Recorder:
    """A stream that keeps each write apart (to see the batches) and can be made to hang or fail."""

    def __init__(self) -> None:
        self.writes: list[str] = []
        self.open = threading.Event()
        self.open.set()
        self.entered = threading.Event()  # a write has begun
        self.failing = False
        self.failed = 0

    def write(self, text: str) -> int:
        self.entered.set()
        self.open.wait()
        if self.failing:
            self.failed += 1
            raise OSError("stream broken")
        self.writes.append(text)
        return len(text)

    def flush(self) -> None:
        pass

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in "".join(self.writes).splitlines()]


def logger_for(handler: logging.Handler, name: str) -> logging.Logger:
    logger = logging.getLogger(f"gpu_admission.test.{name}")
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return logger


def batching(stream: Recorder, **options: Any) -> BatchingStreamHandler:
    handler = BatchingStreamHandler(stream, **options)
    handler.setFormatter(JsonFormatter())
    return handler


def test_lines_of_many_threads_arrive_whole_in_order_and_in_few_writes():
    stream = Recorder()
    logger = logger_for(batching(stream, linger=0.05), "threads")

    def reviews(thread: int) -> None:
        for i in range(200):
            log(logger, logging.INFO, "review", thread=thread, n=i, text='ü\u2028"quoted"')

    threads = [threading.Thread(target=reviews, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    eventually(lambda: len(stream.records()) == 1600)
    records = stream.records()
    for t in range(8):
        assert [r["n"] for r in records if r["thread"] == t] == list(range(200)), "each thread's lines in order"
    assert all(r["text"] == 'ü\u2028"quoted"' and r["message"] == "review" for r in records)
    assert len(stream.writes) < 100, f"1,600 lines in {len(stream.writes)} writes"


def test_a_line_is_written_within_the_linger_without_any_flush():
    stream = Recorder()
    logger = logger_for(batching(stream, linger=0.05), "linger")
    started = time.monotonic()
    log(logger, logging.INFO, "one line")
    eventually(lambda: stream.writes)
    assert time.monotonic() - started < 1.0
    assert stream.records()[0]["message"] == "one line"


def test_flush_writes_what_is_queued_at_once():
    stream = Recorder()
    handler = batching(stream, linger=60)
    logger = logger_for(handler, "flush")
    log(logger, logging.INFO, "first")
    log(logger, logging.WARNING, "second")
    assert stream.writes == [], "the writer lingers"
    handler.flush()
    assert [r["message"] for r in stream.records()] == ["first", "second"]
    assert len(stream.writes) == 1


def test_a_stream_that_hangs_holds_up_no_review_and_the_dropped_lines_are_counted():
    stream = Recorder()
    logger = logger_for(batching(stream, linger=0.01, max_queued=5), "stuck")
    stream.open.clear()  # the log collector stops reading
    log(logger, logging.INFO, "taken by the writer, which then hangs")
    eventually(stream.entered.is_set)
    started = time.monotonic()
    for i in range(20):
        log(logger, logging.INFO, "review", n=i)
    assert time.monotonic() - started < 0.5, "logging does not wait for the stream"
    stream.open.set()
    eventually(lambda: any(r.get("event") == "log-lines-dropped" for r in stream.records()))
    records = stream.records()
    assert [r.get("n") for r in records if r["message"] == "review"] == [0, 1, 2, 3, 4]
    dropped = records[-1]
    assert dropped["dropped"] == 15 and dropped["level"] == "warning"
    assert dropped["message"] == "15 log line(s) dropped: the log stream did not take them (5 were waiting)"


def test_a_broken_stream_does_not_stop_the_writer():
    stream = Recorder()
    logger = logger_for(batching(stream, linger=0.01), "broken")
    stream.failing = True
    log(logger, logging.INFO, "lost: the stream is broken")
    eventually(lambda: stream.failed)
    stream.failing = False
    log(logger, logging.INFO, "written")
    eventually(lambda: stream.writes)
    assert [r["message"] for r in stream.records()] == ["written"]


def run_python(code: str, tmp_path: Any) -> str:
    """Run `code` in a fresh interpreter (its own exit, its own forks); its log file's text."""
    log_file = tmp_path / "log.jsonl"
    script = "import logging, os, sys\n" + textwrap.dedent(code)
    done = subprocess.run(
        [sys.executable, "-c", script, str(log_file)], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return log_file.read_text()


def test_a_process_that_exits_normally_loses_no_line(tmp_path):
    text = run_python(
        """
        from webhook.server.logs import json_handler, log
        stream = open(sys.argv[1], "w")
        logger = logging.getLogger("gpu_admission.exit")
        logger.addHandler(json_handler(stream))
        logger.setLevel(logging.INFO)
        for i in range(1000):
            log(logger, logging.INFO, "review", n=i)
        sys.exit(0)  # as a gunicorn worker ends: logging's shutdown flushes the queue
        """,
        tmp_path,
    )
    assert [json.loads(line)["n"] for line in text.splitlines()] == list(range(1000))


def test_a_forked_child_writes_its_own_lines_and_not_its_parents(tmp_path):
    text = run_python(
        """
        from webhook.server.logs import json_handler, log
        stream = open(sys.argv[1], "w", buffering=1)
        logger = logging.getLogger("gpu_admission.fork")
        logger.addHandler(json_handler(stream))
        logger.setLevel(logging.INFO)
        log(logger, logging.INFO, "parent, before the fork")  # queued, not yet written
        pid = os.fork()
        if pid == 0:
            log(logger, logging.INFO, "child")
            sys.exit(0)
        os.waitpid(pid, 0)
        log(logger, logging.INFO, "parent, after the fork")
        """,
        tmp_path,
    )
    messages = [json.loads(line)["message"] for line in text.splitlines()]
    assert sorted(messages) == ["child", "parent, after the fork", "parent, before the fork"]
    assert messages.index("parent, before the fork") < messages.index("parent, after the fork")


def test_the_server_handler_is_the_batching_one():
    assert isinstance(json_handler(Recorder()), BatchingStreamHandler)


def test_a_name_with_unicode_line_breaks_stays_on_its_line():
    """Admission comes before the API server checks names: a container name may hold U+2028, and a reader that
    splits on it (Python's splitlines, some collectors) would see a second, forged line."""
    stream = Recorder()
    handler = batching(stream, linger=60)
    logger = logger_for(handler, "breaks")
    forged = 'x\u2028{"level": "info", "message": "review", "allowed": true}\x85\u2029ü'
    log(logger, logging.INFO, "review", name=forged)
    handler.flush()
    text = "".join(stream.writes)
    assert len(text.splitlines()) == 1 and "\\u2028" in text and "ü" in text
    assert stream.records()[0]["name"] == forged
