"""The Flask app: `/mutate`, `/validate`, `/healthz`, `/readyz`. A thin shell over `webhook.admission`.

Every answer is JSON, errors included. A review that is not one gets 400 saying what is wrong; an engine
failure gets 500 with the uid, whose traceback goes to the log and never into the body.

`POST /mutate` and `POST /validate` are answered by a plain WSGI function in front of Flask (`ReviewRoutes`):
Flask's routing, request and response objects and context cost about 0.1 ms a request, as much as the
engine's decision on a typical pod (see bench/server.py). Everything else (the probes, wrong methods and
paths, errors) is Flask's.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import struct
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge
from werkzeug.http import parse_options_header
from werkzeug.wsgi import get_content_length

from webhook.admission.base.violation import cut
from webhook.admission.policyreview import is_policy_review, policy_problems, policy_response
from webhook.admission.review import AdmissionRequest, ReviewError, WebhookMode, build_response, parse_review
from webhook.server import metrics
from webhook.server.logs import LOGGER, REVIEW_LOGGER, log
from webhook.server.state import ServerState

# An UPDATE review carries the object twice (object and oldObject), each up to the API server's own 3 MiB
# request limit, and the review around them.
MAX_BODY_BYTES = 7 * 1024 * 1024
# Parsed, a review takes about 7 times its size in memory, and one of 2 MB of GPU containers takes a core for
# half a second: larger ones go through LargeReviews (below), so that a burst of them stays within the pod's
# memory limit and leaves the CPU, and the worker's interpreter lock, to the small reviews.
LARGE_BODY_BYTES = 1024 * 1024
LARGE_SHARE = 0.25  # of the time, at most, that the pod spends on reviews over LARGE_BODY_BYTES
LARGE_WAIT_SECONDS = 3.0  # a large review waits this long for its turn, then gets a 503 (the API server waits 5 s)
LARGE_SWITCH_INTERVAL = 0.0005  # seconds: the interpreter's switch interval while a large review runs
# An oversized body up to this size is read and discarded before the 413: closing a connection with unread
# data makes TCP reset it, and the client may lose the answer. Larger ones are refused without reading, and
# the 413 says `Connection: close`: the rest of the body is still coming, so the connection is done.
DRAIN_LIMIT_BYTES = 16 * 1024 * 1024
BODY_UNREAD = "gpu_admission.body_unread"  # set in the WSGI environ when the body was refused unread
JSON_TYPES = ("application/json",)

_log = logging.getLogger(f"{LOGGER}.app")
_review_log = logging.getLogger(REVIEW_LOGGER)


Answer = tuple[int, dict[str, Any]]  # (HTTP status, JSON body)
WEBHOOK_PATHS: dict[str, WebhookMode] = {"/mutate": "mutate", "/validate": "validate"}
_STATUS_LINES = {
    200: "200 OK",
    400: "400 Bad Request",
    413: "413 Content Too Large",
    500: "500 Internal Server Error",
    503: "503 Service Unavailable",
}
_CRASH: Answer = (500, {"error": "internal error; see the webhook's log", "code": 500})
# json.dumps's output, made by one encoder (not one per call); answers are built here, never circular.
_ENCODER = json.JSONEncoder(check_circular=False)


def _json(status: int, payload: dict[str, Any]) -> Response:
    return Response(json.dumps(payload), status=status, mimetype="application/json")


def _error(status: int, message: str) -> Response:
    return _json(status, {"error": message, "code": status})


def _error_answer(status: int, message: str) -> Answer:
    return status, {"error": message, "code": status}


class ReviewRoutes:
    """WSGI middleware: the two webhooks without Flask's per-request machinery; the rest goes to `app`."""

    def __init__(self, app: Any, state: ServerState) -> None:
        self.app = app
        self.state = state

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        webhook = WEBHOOK_PATHS.get(environ.get("PATH_INFO", ""))
        if webhook is None or environ.get("REQUEST_METHOD") != "POST":
            return self.app(environ, start_response)
        try:
            status, payload = _review(self.state, webhook, environ)
        except Exception:  # what Flask's crash handler does for the other routes
            _log.exception("unhandled error on POST %s", environ.get("PATH_INFO"))
            status, payload = _CRASH
        body = _ENCODER.encode(payload).encode("utf-8")
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        if environ.get(BODY_UNREAD):
            headers.append(("Connection", "close"))  # the rest of the body is still coming: the connection is done
        start_response(_STATUS_LINES.get(status) or f"{status} Error", headers)
        return [body]


def create_app(state: ServerState) -> Flask:
    """The WSGI app serving `state` (built once, before gunicorn forks its workers)."""
    app = Flask("gpu_admission")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    app.config["PROVIDE_AUTOMATIC_OPTIONS"] = False  # OPTIONS gets a JSON 405, like every other wrong method

    # Served by ReviewRoutes; declared here too so that Flask answers other methods on them with 405.
    @app.post("/mutate")
    def mutate() -> Response:
        return _json(*_review(state, "mutate", request.environ))

    @app.post("/validate")
    def validate() -> Response:
        return _json(*_review(state, "validate", request.environ))

    @app.get("/healthz")
    def healthz() -> Response:
        return _json(200, {"alive": True})

    @app.get("/readyz")
    def readyz() -> Response:
        ready, details = state.readiness()
        return _json(200 if ready else 503, details)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        status = exc.code or 500
        if status == 405:
            if request.path in WEBHOOK_PATHS:
                takes = "the webhooks take POST"
            else:
                takes = f"{request.path} takes {' or '.join(sorted(getattr(exc, 'valid_methods', None) or ()))}"
            message = f"{request.method} is not allowed on {request.path}; {takes}"
        elif status == 404:
            message = f"no such endpoint {request.path}; use /mutate, /validate, /healthz or /readyz"
        else:
            message = exc.description or exc.name
        answer = _error(status, message)
        for name, value in exc.get_headers():  # 405's Allow (RFC 9110: a 405 must say what is allowed)
            if name.lower() != "content-type":
                answer.headers[name] = value
        return answer

    @app.errorhandler(Exception)
    def crash(exc: Exception) -> Response:
        _log.exception("unhandled error on %s %s", request.method, request.path)
        return _error(500, "internal error; see the webhook's log")

    app.wsgi_app = ReviewRoutes(app.wsgi_app, state)  # type: ignore[method-assign]
    return app


class LargeReviews:
    """Large reviews take turns, one at a time in the whole pod, and at most LARGE_SHARE of the time.

    Six clients sending 2 MB reviews back to back raised small reviews' p90 from 5 ms to 0.75 s on 2 cores: both
    workers spent all their time on large ones, and a worker's main loop, which answers the small ones, waited
    for the interpreter lock behind the large review's thread. So a large review takes a lock shared by the
    workers (flock on a file in the metrics directory: released if its worker dies), and the next one starts only
    after a pause that keeps large reviews to LARGE_SHARE of the time (written in the file by the last one); while
    it runs, the worker's threads switch every LARGE_SWITCH_INTERVAL rather than 5 ms, so that the main loop waits
    less for the lock. A large review that cannot start within LARGE_WAIT_SECONDS is refused with a 503.
    """

    def __init__(self) -> None:
        self._local = threading.Lock()  # flock is per open file: threads of one worker share it
        self._file: int | None = None
        self._pid = 0

    def _lock_file(self) -> int | None:
        directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")  # one per server, made by `serve`
        if not directory:
            return None
        if self._file is None or self._pid != os.getpid():  # opened after the fork: a lock of its own
            self._file = os.open(os.path.join(directory, "large-reviews.lock"), os.O_RDWR | os.O_CREAT, 0o600)
            self._pid = os.getpid()
        return self._file

    @contextlib.contextmanager
    def turn(self) -> Iterator[bool]:
        """Wait for this review's turn and run it (True), or give up after LARGE_WAIT_SECONDS (False)."""
        deadline = time.monotonic() + LARGE_WAIT_SECONDS
        if not self._local.acquire(timeout=LARGE_WAIT_SECONDS):
            yield False
            return
        try:
            shared = self._lock_file()
            if shared is not None and not self._lock(shared, deadline):
                yield False
                return
            try:
                if shared is not None and not self._pause(shared, deadline):
                    yield False
                    return
                interval = sys.getswitchinterval()  # the process's: one large review a worker at a time
                sys.setswitchinterval(LARGE_SWITCH_INTERVAL)
                started = time.monotonic()
                try:
                    yield True
                finally:
                    sys.setswitchinterval(interval)
                    if shared is not None:  # when the next may start (CLOCK_MONOTONIC: the same in every worker)
                        ended = time.monotonic()
                        os.pwrite(shared, struct.pack("d", ended + (ended - started) * (1 / LARGE_SHARE - 1)), 0)
            finally:
                if shared is not None:
                    fcntl.flock(shared, fcntl.LOCK_UN)
        finally:
            self._local.release()

    @staticmethod
    def _lock(shared: int, deadline: float) -> bool:
        while True:
            try:
                fcntl.flock(shared, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.005)

    @staticmethod
    def _pause(shared: int, deadline: float) -> bool:
        """Sleep until the time the last large review set; False if that is past `deadline`."""
        stored = os.pread(shared, 8, 0)
        not_before = struct.unpack("d", stored)[0] if len(stored) == 8 else 0.0
        if not_before > deadline:
            return False
        time.sleep(max(0.0, not_before - time.monotonic()))
        return True


_large_reviews = LargeReviews()


def _reject(webhook: str, status: int, message: str, started: float, uid: str = "") -> Answer:
    """A review answered without an AdmissionReview: counted as an error, logged, JSON body."""
    metrics.observe_review(webhook, "error", time.perf_counter() - started)
    log(_review_log, logging.WARNING, "review rejected", webhook=webhook, uid=_cut(uid), status=status,
        error=_cut(message, LOG_LINE_MAX))  # fmt: skip
    return _error_answer(status, message)


def _read(stream: Any, limit: int) -> bytes:
    parts, size = [], 0
    while size < limit:
        part = stream.read(limit - size)
        if not part:
            break
        parts.append(part)
        size += len(part)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _body(environ: dict[str, Any]) -> bytes:
    """The request body, at most MAX_BODY_BYTES, from gunicorn's stream (which ends where the body ends).

    Content-Length is checked before reading; a chunked body is read up to one byte past the limit.
    (werkzeug's own limit cannot tell a body of exactly the limit from a longer one.)
    """
    stream = environ["wsgi.input"]
    length = get_content_length(environ)
    if length is not None:
        if length > MAX_BODY_BYTES:
            _leave_body(environ, length)
            raise RequestEntityTooLarge()
        return _read(stream, length)
    if not environ.get("wsgi.input_terminated"):
        return b""  # a server that cannot end a chunked body: read nothing rather than hang
    body = _read(stream, MAX_BODY_BYTES + 1)
    if len(body) > MAX_BODY_BYTES:
        environ[BODY_UNREAD] = True  # the rest of the chunks is still coming
        raise RequestEntityTooLarge()
    return body


def _leave_body(environ: dict[str, Any], length: int | None) -> None:
    """Before an answer that does not use the body: read it away if its Content-Length (`length`) is within
    DRAIN_LIMIT_BYTES, so the connection serves the next request and the client is not reset before it sees
    the answer; otherwise (larger, chunked, or the client stopped sending) record it unread, and the answer
    closes the connection."""
    if length is None and "chunked" not in environ.get("HTTP_TRANSFER_ENCODING", "").lower():
        return  # no body
    if length is None or length > DRAIN_LIMIT_BYTES:
        environ[BODY_UNREAD] = True
        return
    stream = environ["wsgi.input"]
    try:
        while length > 0 and (part := stream.read(min(length, 256 * 1024))):
            length -= len(part)
    except OSError:
        environ[BODY_UNREAD] = True


def _mimetype(content_type: str) -> str:
    """What werkzeug's `request.mimetype` says: the type without parameters, lower case."""
    if content_type == "application/json":
        return content_type
    return parse_options_header(content_type)[0].lower()


def _review(state: ServerState, webhook: WebhookMode, environ: dict[str, Any]) -> Answer:
    started = time.perf_counter()
    content_type = environ.get("CONTENT_TYPE") or ""
    if _mimetype(content_type) not in JSON_TYPES:
        _leave_body(environ, get_content_length(environ))
        got = content_type or "none"
        return _reject(webhook, 400, f"Content-Type must be application/json, got {got[:100]!r}", started)
    try:
        body = _body(environ)
    except RequestEntityTooLarge:
        return _reject(
            webhook,
            413,
            f"body larger than {MAX_BODY_BYTES} bytes (7 MiB): an AdmissionReview "
            "holds at most two objects (an UPDATE's), each within the API server's 3 MiB limit",
            started,
        )
    except OSError as exc:  # the client stopped sending (see tls.BoundedSSLSocket)
        return _reject(webhook, 400, f"body not received completely: {exc}", started)
    if len(body) > LARGE_BODY_BYTES:
        with _large_reviews.turn() as turn:
            if not turn:
                return _reject(webhook, 503, f"busy with other reviews over {LARGE_BODY_BYTES // 1024 // 1024} MiB, "
                               f"which take turns; retry", started)  # fmt: skip
            return _decide(state, webhook, body, started)
    return _decide(state, webhook, body, started)


def _decide(state: ServerState, webhook: WebhookMode, body: bytes, started: float) -> Answer:
    try:
        review = parse_review(body)
    except ReviewError as exc:
        return _reject(webhook, 400, str(exc), started)

    waiting = state.policies_not_ready()
    if waiting:  # no set listed yet: neither the built-in defaults nor a GPUPolicy judged among nothing
        return _reject(webhook, 503, f"{waiting}; this worker judges no review before it has listed them: retry",
                       started, review.uid)  # fmt: skip
    if is_policy_review(review):
        return _policy_review(state, webhook, review, started)

    decision = None
    if review.evaluates:
        policies = state.policies.current  # read once: a reload mid-review cannot mix two sets
        try:
            old = review.old_object if review.operation == "UPDATE" else None
            nodes = state.cluster_view()  # the inventory's snapshot, or None: never waits
            obj = review.engine_object
            assert obj is not None  # review.evaluates: there is an object to judge
            budgets = state.budgets if webhook == "validate" and _reserves(review) else None
            if budgets is not None and budgets.may_hold(review.engine_namespace):
                # The pod's ask is worked out (an empty budget); the ledger judges and reserves it (budgets.py).
                decision = state.evaluate(obj, review.engine_namespace, policies, old, nodes, state.claims, budget=[])
                if decision.allowed:
                    rejudge = state.rejudge(obj, review, policies, nodes)
                    decision = budgets.admit(review, decision, policies, rejudge)
            else:
                decision = state.evaluate(obj, review.engine_namespace, policies, old, nodes, state.claims)
        except RecursionError:
            return _reject(webhook, 400, "request.object: nested too deeply to evaluate", started, review.uid)
        except Exception:
            metrics.observe_review(webhook, "error", time.perf_counter() - started)
            _log.exception(
                "engine failed on review uid=%s (%s %s/%s)",
                review.uid,
                review.kind.get("kind"),
                review.engine_namespace,
                review.object_name,
                extra={"fields": {"uid": review.uid, "webhook": webhook}},
            )
            return _error_answer(500, f"internal error evaluating review {review.uid}; see the webhook's log")

    answer = build_response(review, decision, mode=webhook)
    elapsed = time.perf_counter() - started
    verdict = decision.verdict if decision is not None else "allow"
    kinds = decision.mutation_kinds if decision is not None and webhook == "mutate" else ()
    metrics.observe_review(webhook, verdict, elapsed, kinds)
    _log_review(webhook, review, decision, answer["response"], verdict, elapsed)
    return 200, answer


def _policy_review(state: ServerState, webhook: WebhookMode, review: AdmissionRequest, started: float) -> Answer:
    """A GPUPolicy CREATE or UPDATE at /validate, judged by the loader among the objects this worker's watch holds
    (none with `--policy-source files`); allowed unchanged otherwise. The engine never sees it."""
    problems = policy_problems(review, state.policy_objects(), webhook)
    answer = policy_response(review, problems)
    elapsed = time.perf_counter() - started
    verdict = "deny" if problems else "allow"
    metrics.observe_review(webhook, verdict, elapsed)
    _log_review(webhook, review, None, answer["response"], verdict, elapsed, problems)
    return 200, answer


def _reserves(review: AdmissionRequest) -> bool:
    """A Pod CREATE: the one review that reserves GPUs in its namespace's budget (budgets.py)."""
    return review.operation == "CREATE" and review.kind.get("kind") == "Pod" and not review.sub_resource


# A review's log line stays small whatever the review holds (a 2 MiB name, 10,000 warnings).
LOG_TEXT_MAX = 253  # a Kubernetes name's longest
LOG_LINES_MAX = 20
LOG_LINE_MAX = 300


def _cut(text: str, limit: int = LOG_TEXT_MAX) -> str:
    return cut(text, limit)


def _lines(lines: list[str]) -> list[str]:
    kept = [_cut(line, LOG_LINE_MAX) for line in lines[:LOG_LINES_MAX]]
    if len(lines) > LOG_LINES_MAX:
        kept.append(f"... and {len(lines) - LOG_LINES_MAX} more")
    return kept


def _log_review(
    webhook: str,
    review: AdmissionRequest,
    decision: Any,
    response: dict[str, Any],
    verdict: str,
    elapsed: float,
    problems: list[str] | None = None,
) -> None:
    """One line per review: who, what, which policy, what was decided. No specs, no env values."""
    if not _review_log.isEnabledFor(logging.INFO):
        return
    fields: dict[str, Any] = {
        "webhook": webhook,
        "uid": review.uid,
        "namespace": _cut(review.engine_namespace),
        "name": _cut(review.object_name),
        "kind": _cut(str(review.kind.get("kind", ""))),
        "operation": review.operation,
        "policy": decision.policy if decision is not None else "",
        "decision": verdict,
        "allowed": response["allowed"],
        "mutations": len(decision.mutation_kinds) if decision is not None and webhook == "mutate" else 0,
        "duration_ms": round(elapsed * 1000, 3),
    }
    if review.dry_run:
        fields["dry_run"] = True
    if problems:  # a GPUPolicy's lines (the engine decides nothing about one)
        fields["violations"] = _lines(problems)
    if decision is not None and decision.skip_reason:
        fields["untouched"] = decision.skip_reason
    if decision is not None:
        if decision.violations and verdict in ("deny", "warn", "audit"):
            fields["violations"] = _lines(decision.violations)
        if decision.warnings:
            fields["warnings"] = _lines(decision.warnings)
    log(_review_log, logging.INFO, "review", **fields)
