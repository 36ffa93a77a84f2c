"""gunicorn's threaded worker, made safe against slow and stalled clients.

The API server keeps connections alive, so the worker is gunicorn's `gthread`: kept-alive connections wait
in a poller, not in a thread. Measured with gunicorn 27.0.1 (4 threads), it still lets a few clients starve
everybody:
- a new connection goes straight to a thread, which waits up to 5 s for a first byte, then does the TLS
  handshake blocking, with no timeout: 32 clients that connect and send nothing kept a good request
  waiting 40 s, and clients that send half a ClientHello hold their threads for ever;
- a request is read blocking, with no timeout: half a request holds a thread for ever;
- closing a connection "gracefully" lingers up to 2 s in the main loop, which then serves nobody.

Here the main loop does the TLS handshake (non-blocking, with a deadline) and reads the request
(non-blocking, with a deadline) before a thread sees the connection, so threads only ever run complete
requests. A small request that is certainly whole (every review the API server sends, up to
INLINE_MAX_BYTES) is answered by the main loop itself: handing it to a thread cost more CPU than the review;
but where GPU budgets are on, a Pod CREATE for /validate goes to a thread (`may_reserve`), since its reservation
waits for the API server.
Bodies beyond READ_AHEAD_BYTES are read by the thread, bounded by `tls.BoundedSSLSocket`. A
response the client does not read as fast as it is written is finished by the main loop too (with a
deadline), so a client that stops reading holds no thread either. A closing connection lingers in the poller.

A connection never waits to be accepted: when the worker holds `worker_connections`, a new one makes room by
closing another that has not sent a request. First the oldest accepted of those that are silent or whose TLS
ClientHello is not yet whole; then one whose hello was answered, waiting for the client's reply; then one waiting
for a first request; then a kept-alive one; else the oldest still sending a request. The listener is never switched
off. A client's new connection is the newest, so the next arrivals close older ones first, and once its hello is
answered (at once where it was there when accepted, as it is for a connection that waited to be accepted) it goes
only after every half-open one. A connection that has sent nothing gets SILENT_TIMEOUT, and its TLS handshake
HANDSHAKE_TIMEOUT from its first byte: so thousands of idle or half-open connections cost each other their places,
never a new connection its answer. The probe listener (`serve --probe-port`, plain HTTP) answers /healthz and
/readyz only, one request a connection.

On SIGTERM the listeners are closed at once (new connections are refused rather than queued until the worker
exits), and connections that have not sent a request yet, those still in their TLS handshake included, get
gunicorn's STOP_KEEPALIVE_LINGER to send one, like kept-alive connections.
"""

from __future__ import annotations

import contextlib
import errno
import json
import re
import selectors
import socket
import ssl
import time
from collections import OrderedDict, deque
from concurrent.futures import Future
from functools import partial
from typing import Any

from gunicorn import http, sock, util
from gunicorn.workers.gthread import STOP_KEEPALIVE_LINGER, TConn, ThreadWorker

from webhook.server.metrics import count_closed
from webhook.server.tls import BoundedSSLSocket

SILENT_TIMEOUT = 2.0  # seconds from accept to the first byte (of a ClientHello; of a request on the probe port)
HANDSHAKE_TIMEOUT = 3.0  # seconds from that first byte to a finished TLS handshake
FIRST_REQUEST_TIMEOUT = 5.0  # seconds from a finished handshake to the first byte of a request
PROBE_PATHS = frozenset({"/healthz", "/readyz"})  # all that the probe listener serves
READ_AHEAD_BYTES = 128 * 1024  # a request up to this size is read whole before a thread takes it
INLINE_MAX_BYTES = 32 * 1024  # a whole request up to this size is answered by the main loop (answerable_here)
LINGER_TIMEOUT = 2.0  # seconds a closing connection may take to send its FIN
LINGER_MAX_BYTES = 64 * 1024
MAX_LINGERING = 1024  # beyond this, connections are closed at once (the runner may set a lower cap)

_HEADERS_END = re.compile(rb"\r?\n\r?\n")
_CONTENT_LENGTH = re.compile(rb"\ncontent-length[ \t]*:[ \t]*(\d{1,12})[ \t]*\r?(?:\n|$)", re.IGNORECASE)
_CHUNKED = re.compile(rb"\ntransfer-encoding[ \t]*:[^\n]*chunked", re.IGNORECASE)


def _framing(data: bytes | bytearray) -> tuple[int, int | None, bool] | None:
    """How the request in `data` is framed: where its body starts, the Content-Length its headers announce,
    and whether the body is chunked; None while the headers have not all arrived."""
    end = _HEADERS_END.search(data)
    if end is None:
        return None
    head = bytes(data[: end.start() + 1])
    length = _CONTENT_LENGTH.search(head)
    return end.end(), int(length.group(1)) if length else None, _CHUNKED.search(head) is not None


def request_complete(data: bytes | bytearray) -> bool:
    """Whether `data` holds a whole HTTP/1.x request (headers, and the body they announce).

    Only decides when to hand the connection over: if it guesses wrong, the thread reads the rest (bounded
    by the request timeout), so it errs towards "complete" for anything unusual.
    """
    framing = _framing(data)
    if framing is None:
        return len(data) >= READ_AHEAD_BYTES
    body_start, length, chunked = framing
    if length is not None:
        return len(data) - body_start >= length or len(data) >= READ_AHEAD_BYTES
    if chunked:
        return data.endswith(b"0\r\n\r\n") or len(data) >= READ_AHEAD_BYTES
    return True


def answerable_here(data: bytes | bytearray) -> bool:
    """Whether the main loop may answer the request in `data` itself: a small one that is certainly whole.

    That is a request of at most INLINE_MAX_BYTES whose body has a Content-Length and is all here, or that
    has no body (the API server sends every review with a Content-Length). A chunked body is never certain
    (a chunk's data may end like the last chunk), and a larger one may cost the engine more than the loop
    should spend away from its other connections: those go to a thread.
    """
    if len(data) > INLINE_MAX_BYTES:
        return False
    framing = _framing(data)
    if framing is None:
        return False
    body_start, length, chunked = framing
    return not chunked and len(data) - body_start == (length or 0)


def may_reserve(data: bytes | bytearray) -> bool:
    """Whether the request in `data` may be a Pod CREATE sent to /validate, which reserves its GPUs in the
    namespace's budget ledger (budgets.py): API calls, bounded by the ledger's deadline but far longer than a
    review, that the main loop must not wait for. Read from the raw bytes; a wrong guess only changes who
    answers the request (a thread or this loop), never the answer."""
    return data.startswith(b"POST /validate") and b'"CREATE"' in data and b'"Pod"' in data


def probes_only(app: Any) -> Any:
    """`app`, with requests from the probe listener (a plain socket, not TLS) kept to /healthz and /readyz, one a
    connection: the kubelet opens a new connection for each probe, and nobody else needs that port."""

    def wsgi(environ: dict[str, Any], start_response: Any) -> Any:
        if isinstance(environ.get("gunicorn.socket"), ssl.SSLSocket):
            return app(environ, start_response)
        start_response.__self__.force_close()  # gthread passes its Response's bound method
        path = environ.get("PATH_INFO", "")
        if path in PROBE_PATHS and environ.get("REQUEST_METHOD") in ("GET", "HEAD"):
            return app(environ, start_response)
        body = json.dumps({"error": f"the probe port serves GET /healthz and /readyz only, not "
                           f"{environ.get('REQUEST_METHOD')} {path[:100]}; reviews go to the HTTPS port",
                           "code": 404}).encode()  # fmt: skip
        start_response("404 Not Found", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]

    return wsgi


class ProbeSocket(socket.socket):
    """A plain socket whose blocking mode has the request deadline (see tls.BoundedSSLSocket)."""

    request_timeout: float | None = None  # None: BoundedSSLSocket.request_timeout

    def setblocking(self, flag: bool) -> None:
        if flag:
            timeout = BoundedSSLSocket.request_timeout if self.request_timeout is None else self.request_timeout
            super().settimeout(timeout)
        else:
            super().setblocking(False)


def obey_connection_close(app: Any) -> Any:
    """`app`, with its `Connection: close` obeyed.

    gunicorn drops a `Connection` header the app gives (hop-by-hop) and decides keep-alive by itself, so an app
    that did not read the request body (a 413 for 20 MiB) would answer "keep-alive" and then see the connection
    closed by gunicorn's bounded drain: a client could send its next request on it. Here the app's
    `Connection: close` makes gunicorn say it, and close.
    """

    def wsgi(environ: dict[str, Any], start_response: Any) -> Any:
        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            for name, value in headers:
                if name.lower() == "connection" and value.lower() == "close":
                    start_response.__self__.force_close()  # gthread passes its Response's bound method
            return start_response(status, headers, exc_info)

        return app(environ, start)

    return wsgi


def _has_sent(client: socket.socket) -> bool:
    """Whether a just-accepted connection has sent something (or closed), without reading it.

    A TLS client sends its ClientHello as soon as it is connected, so a connection that waited to be accepted
    has it here already: taken into its handshake at once, its hello is answered before the next arrival, and
    a full worker then closes it only after every half-open connection.
    """
    try:
        client.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)  # a byte, or b"" for a closed connection
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        pass  # reset already: the first read says so and drops it
    return True


class _Conn(TConn):
    """A connection that remembers what the main loop read of its next request."""

    worker: WebhookWorker
    received: bytearray
    accepted: float  # time.monotonic() when accepted
    deadline: float
    probe: bool = False  # from the probe listener: plain HTTP

    def close(self, graceful: bool = False) -> None:
        if graceful:
            self.worker.linger(self.sock)
        else:
            util.close(self.sock)


class WebhookWorker(ThreadWorker):
    """gthread whose threads only ever see connections with a whole request waiting (see module doc)."""

    probe_port: int = 0  # the plain-HTTP probe listener's port (0: none); set by the runner
    ledger_in_threads: bool = False  # GPU budgets on (the server has credentials): set by the runner
    wsgi: Any  # the application, set by gunicorn's load_wsgi (which the base class leaves untyped)
    max_lingering: int = MAX_LINGERING

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Each sorted by deadline (insertion order, all with the same timeout), for expiry and eviction alike.
        self.silent: OrderedDict[_Conn, None] = OrderedDict()  # accepted, nothing received yet
        self.handshaking: OrderedDict[_Conn, None] = OrderedDict()  # TLS handshake under way, hello not answered
        self.answered: OrderedDict[_Conn, None] = OrderedDict()  # hello answered, the client's reply awaited
        self.reading: OrderedDict[_Conn, None] = OrderedDict()  # part of a request read
        self.lingering: deque[tuple[float, socket.socket]] = deque()
        self.writing: dict[_Conn, Any] = {}  # connection -> its thread's future, while the main loop writes
        self._stop_deadline: float | None = None

    def load_wsgi(self) -> None:
        super().load_wsgi()
        self.wsgi = probes_only(obey_connection_close(self.wsgi))

    # -------------------------------------------------------------------------- accept and handshake

    def set_accept_enabled(self, enabled: bool) -> None:
        """Stopping, also close the listeners, rather than at exit (up to `graceful_timeout` later).

        Every process holding the listening socket keeps it listening: until the last one closes it, the kernel
        completes new connections into a queue nobody reads any more, and they hang until they are reset at
        the worker's exit. Closed by every process as soon as it stops, new connections are refused at once.
        Only when disabling: gthread's loop may still enable accepting after `alive` turned False (a signal or
        max_requests between its check and this call), and a listener closed while registered in the poller
        would stay in epoll (the arbiter holds the socket too) and be accepted from once closed.
        """
        if not enabled and self.alive:
            return  # full: a new connection makes room for itself (accept), so the listener stays on
        super().set_accept_enabled(enabled)
        if not enabled and not self.alive:
            for listener in self.sockets:
                listener.close()  # gunicorn's listener: closing it again at exit does nothing

    def accept(self, listener: Any) -> None:
        try:
            client, address = listener.accept()
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE):  # out of descriptors: make room, accept next time
                self.log.warning("accept failed (%s): closing the oldest idle connection", exc)
                self._make_room()
                return
            if exc.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        if self.nr_conns >= self.worker_connections and not self._make_room():
            util.close(client)  # every connection is in a thread or being answered: nothing to give way
            return
        self.nr_conns += 1
        server = listener.getsockname()
        probe = bool(self.probe_port) and server[1] == self.probe_port
        if probe:
            client = ProbeSocket(client.family, client.type, client.proto, fileno=client.detach())
        conn = _Conn(self.cfg, client, address, server)  # non-blocking from here
        conn.worker, conn.received, conn.probe = self, bytearray(), probe
        conn.accepted = time.monotonic()
        conn.deadline = conn.accepted + SILENT_TIMEOUT
        if self._stop_deadline is not None:
            conn.deadline = min(conn.deadline, self._stop_deadline)
        sent = _has_sent(client)
        if probe:
            conn.parser = http.get_parser(self.cfg, conn.sock, conn.client)
        else:
            try:
                conn.sock = sock.ssl_context(self.cfg).wrap_socket(
                    client,
                    server_side=True,
                    do_handshake_on_connect=False,
                    suppress_ragged_eofs=self.cfg.suppress_ragged_eofs,
                )
            except (OSError, ValueError) as exc:
                self.log.debug("TLS wrap failed for %s: %s", address, exc)
                self.nr_conns -= 1
                util.close(client)
                return
        self.silent[conn] = None
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_first_bytes, conn))
        if sent:  # its first bytes are here already: its handshake starts now, not after the next arrivals
            self._on_first_bytes(conn)

    def _on_first_bytes(self, conn: _Conn, _fileobj: Any = None) -> None:
        """A new connection sent something: a TLS handshake starts, with its own deadline; a probe is read."""
        self.silent.pop(conn, None)
        if conn.probe:
            self.poller.unregister(conn.sock)
            self._read(conn)
            return
        conn.deadline = time.monotonic() + HANDSHAKE_TIMEOUT
        if self._stop_deadline is not None:
            conn.deadline = min(conn.deadline, self._stop_deadline)
        self.handshaking[conn] = None
        self._handshake(conn)

    def _make_room(self) -> bool:
        """Close the connection that can best give way to a new one; False when none can."""
        unfinished = [next(iter(waiting)) for waiting in (self.silent, self.handshaking) if waiting]
        if unfinished or self.answered:
            self._close_early(
                min(unfinished, key=lambda c: c.accepted) if unfinished else next(iter(self.answered)), "full"
            )
            return True
        for idle in (self.pending_conns, self.keepalived_conns):
            if idle:
                self._close_early(idle.popleft(), "full")
                return True
        if self.reading:
            self._close_early(next(iter(self.reading)), "full")
            return True
        return False

    def _handshake(self, conn: _Conn, _fileobj: Any = None) -> None:
        """One non-blocking step of the TLS handshake."""
        try:
            conn.sock.do_handshake()
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError) as want:
            if conn in self.handshaking and conn.sock.shared_ciphers() is not None:  # TLS 1.2 and 1.3 alike
                self._hello_answered(conn)
            event = selectors.EVENT_READ if isinstance(want, ssl.SSLWantReadError) else selectors.EVENT_WRITE
            self.poller.modify(conn.sock, event, partial(self._handshake, conn))
            return
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError: a bad hello, a reset
            self.log.debug("TLS handshake failed for %s: %s", conn.client, exc)
            self._forget_handshake(conn)
            self._drop(conn)
            return
        self.poller.unregister(conn.sock)
        self._forget_handshake(conn)
        # Parser on the TLS socket, so TConn.init() in the thread only switches to blocking mode.
        conn.parser = http.get_parser(self.cfg, conn.sock, conn.client)
        if self._read(conn, idle_ok=True):
            return
        # Nothing yet: wait among gunicorn's pending connections (sorted: all get this same timeout).
        conn.timeout = time.monotonic() + FIRST_REQUEST_TIMEOUT
        if self._stop_deadline is not None:
            conn.timeout = min(conn.timeout, self._stop_deadline)
        self.pending_conns.append(conn)
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self.on_pending_socket_readable, conn))

    def _hello_answered(self, conn: _Conn) -> None:
        """The client's whole ClientHello was read and answered (OpenSSL holds its ciphers): a client that goes on with
        its handshake, which a full worker closes only after every connection that never finished its hello.
        Its deadline stays that of its first byte, so this list is in deadline order but for the few moments
        between a hello's first byte and its last."""
        del self.handshaking[conn]
        self.answered[conn] = None

    def _forget_handshake(self, conn: _Conn) -> None:
        self.handshaking.pop(conn, None)
        self.answered.pop(conn, None)

    # ------------------------------------------------------------------------------- reading requests

    def on_client_socket_readable(self, conn: _Conn, client: Any) -> None:
        """A kept-alive connection has bytes: read them here, not in a thread."""
        self.poller.unregister(client)
        self.keepalived_conns.remove(conn)
        self._read(conn)

    def on_pending_socket_readable(self, conn: _Conn, client: Any) -> None:
        self.poller.unregister(client)
        self.pending_conns.remove(conn)
        self._read(conn)

    def _on_reading_readable(self, conn: _Conn, client: Any) -> None:
        self.poller.unregister(client)
        self._read(conn)

    def _read(self, conn: _Conn, *, idle_ok: bool = False) -> bool:
        """Read what the connection has; hand it to a thread once the request is whole.

        With `idle_ok` (a handshake just finished), returns False when nothing was there yet, and the caller
        decides where the connection waits. Otherwise the connection always ends up somewhere: in a thread,
        waiting for the rest of its request (even if this wake-up brought no request bytes), or closed.
        """
        got = False
        while len(conn.received) < READ_AHEAD_BYTES:
            try:
                data = conn.sock.recv(65536)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                break
            except OSError:  # reset, or a TLS error
                self._drop(conn)
                return True
            if not data:  # the client closed
                self._drop(conn)
                return True
            if not conn.received:
                conn.deadline = time.monotonic() + BoundedSSLSocket.request_timeout
            conn.received += data
            got = True
        if not conn.received:
            if idle_ok:
                return False
            if not got:  # readable, but no request bytes (a TLS control record): a request must follow
                conn.deadline = time.monotonic() + BoundedSSLSocket.request_timeout
        here = answerable_here(conn.received)  # the usual review: its headers are read once, here
        if here and self.ledger_in_threads and may_reserve(conn.received):
            here = False  # its budget reservation calls the API server: a thread waits for it, not this loop
        if here or (conn.received and request_complete(conn.received)):
            self.reading.pop(conn, None)
            self._dispatch(conn, here)
        else:
            if conn not in self.reading:
                self.reading[conn] = None  # the deadline was set on its first bytes: the order stays sorted
            self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_reading_readable, conn))
        return True

    def _dispatch(self, conn: _Conn, here: bool) -> None:
        """Give the bytes read to the parser; answer the request here when it is small and whole (`here`, of
        what the loop read) and the parser held nothing before it, else give the connection to a thread."""
        unreader = conn.parser.unreader
        buffered = unreader.take_buffered()
        unreader.unread(buffered + bytes(conn.received))
        conn.received = bytearray()
        conn.data_ready = True
        if here and not buffered and BoundedSSLSocket.unsent_room():
            self._answer_here(conn)
        else:
            self.enqueue_req(conn)

    def _answer_here(self, conn: _Conn) -> None:
        """Run gthread's handler on the request in this thread, as a pool thread would, with no wait allowed.

        Handing a review to a thread costs more than the review: the thread wakes, takes the interpreter from
        this loop, and wakes the loop again to take the connection back (measured at 800 reviews/s: 1,495 µs
        of server CPU per review through threads, 1,260 here; p99 12.1 ms against 5.2 ms). The request is all
        in the parser's buffer, and a response the socket does not take at once is left for this loop to
        write, so nothing here waits for the client; should anything try, a deadline of 0 makes it fail at
        once rather than hold up every other connection.
        """
        future: Future = Future()
        conn.sock.request_timeout = 0.0  # this socket's deadlines, while the loop answers it
        try:
            future.set_result(self.handle(conn))
        except Exception as exc:  # as the pool would: finish_request then closes the connection
            future.set_exception(exc)
        finally:
            with contextlib.suppress(AttributeError):
                del conn.sock.request_timeout  # the class's again, for a thread
        self.finish_request(conn, future)

    def _close_early(self, conn: _Conn, reason: str) -> None:
        """Close a connection the worker gave up on, counted first: a client that sees it closed finds it counted."""
        count_closed(reason)
        self._drop(conn)

    def _drop(self, conn: _Conn) -> None:
        """Close a connection no thread has (it may still be in the poller, and in a waiting list)."""
        for waiting in (self.silent, self.handshaking, self.answered, self.reading):
            waiting.pop(conn, None)
        with contextlib.suppress(KeyError, ValueError, OSError):
            self.poller.unregister(conn.sock)
        self.nr_conns -= 1
        util.close(conn.sock)

    # ------------------------------------------------------------------------------- writing responses

    def finish_request(self, conn: _Conn, fs: Any) -> None:
        """A thread is done with `conn`; first write out what its response left unsent, if anything."""
        unsent = getattr(conn.sock, "unsent", None)
        if unsent and conn.sock.fileno() != -1:
            conn.sock.setblocking(False)
            conn.deadline = time.monotonic() + BoundedSSLSocket.request_timeout
            self.writing[conn] = fs
            try:
                self.poller.register(conn.sock, selectors.EVENT_WRITE, partial(self._on_writable, conn))
            except (KeyError, ValueError, OSError):
                self._drop_writing(conn)
            return
        if unsent is not None:
            conn.sock.discard_unsent()
        super().finish_request(conn, fs)

    def _on_writable(self, conn: _Conn, _fileobj: Any = None) -> None:
        before = len(conn.sock.unsent or b"")
        try:
            done = conn.sock.flush_unsent()
        except OSError:  # reset, or a TLS error
            self._drop_writing(conn)
            return
        if done:
            self.poller.unregister(conn.sock)
            super().finish_request(conn, self.writing.pop(conn))
        elif len(conn.sock.unsent or b"") < before:  # the client reads: the deadline is for a stalled one
            conn.deadline = time.monotonic() + BoundedSSLSocket.request_timeout

    def _drop_writing(self, conn: _Conn) -> None:
        self.writing.pop(conn, None)
        conn.sock.discard_unsent()
        self._drop(conn)

    # ------------------------------------------------------------------------------------------ timeouts

    def murder_pending(self) -> None:
        """Also expire handshakes, half-read requests and lingering closes; stopping, stop waiting soon."""
        now = time.monotonic()
        if not self.alive and self._stop_deadline is None:
            # A connection still in its handshake, or with nothing sent yet, has a review coming (the client
            # connected before the signal): like a kept-alive one, it gets STOP_KEEPALIVE_LINGER to send it,
            # and is answered with "Connection: close". Each deque stays sorted: all get the same cap.
            self._stop_deadline = now + STOP_KEEPALIVE_LINGER
            for conn in self.pending_conns:
                conn.timeout = min(conn.timeout, self._stop_deadline)
            for conn in (*self.silent, *self.handshaking, *self.answered):
                conn.deadline = min(conn.deadline, self._stop_deadline)
        while self.silent and (conn := next(iter(self.silent))).deadline <= now:
            self.log.debug("closed %s: nothing sent within %.0f s", conn.client, SILENT_TIMEOUT)
            self._close_early(conn, "silent")
        for handshaking in (self.handshaking, self.answered):
            while handshaking and (conn := next(iter(handshaking))).deadline <= now:
                self.log.debug("TLS handshake timed out for %s", conn.client)
                self._close_early(conn, "handshake")
        while self.reading and (conn := next(iter(self.reading))).deadline <= now:
            self.log.info("closed %s: request incomplete after %.0f s", conn.client, BoundedSSLSocket.request_timeout)
            self._close_early(conn, "incomplete")
        if self.writing:
            for conn in [c for c in self.writing if c.deadline <= now]:
                self.log.info(
                    "closed %s: nothing of the response read for %.0f s", conn.client, BoundedSSLSocket.request_timeout
                )
                self._drop_writing(conn)
        while self.lingering and self.lingering[0][0] <= now:
            self._close_lingering(self.lingering[0][1])
        super().murder_pending()

    # ------------------------------------------------------------------------------------------ closing

    def linger(self, conn_sock: socket.socket) -> None:
        """Half-close and let the peer finish sending, so our last response is not cut by a reset."""
        try:
            conn_sock.shutdown(socket.SHUT_WR)  # on a TLS socket: drops TLS, sends FIN
            conn_sock.setblocking(False)
        except OSError:
            util.close(conn_sock)
            return
        if len(self.lingering) >= min(MAX_LINGERING, self.max_lingering):
            util.close(conn_sock)
            return
        try:
            self.poller.register(conn_sock, selectors.EVENT_READ, partial(self._drain, [0]))
        except (KeyError, ValueError, OSError):
            util.close(conn_sock)
            return
        self.lingering.append((time.monotonic() + LINGER_TIMEOUT, conn_sock))

    def _drain(self, drained: list[int], conn_sock: socket.socket) -> None:
        try:
            data = socket.socket.recv(conn_sock, 65536)  # TLS is gone: the raw bytes
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        drained[0] += len(data)
        if not data or drained[0] >= LINGER_MAX_BYTES:
            self._close_lingering(conn_sock)

    def _close_lingering(self, conn_sock: socket.socket) -> None:
        with contextlib.suppress(KeyError, ValueError, OSError):
            self.poller.unregister(conn_sock)
        for index, (_, item) in enumerate(self.lingering):
            if item is conn_sock:
                del self.lingering[index]
                break
        util.close(conn_sock)

    def run(self) -> None:
        try:
            super().run()
        finally:
            while self.lingering:
                self._close_lingering(self.lingering[0][1])
