"""TLS for the webhook: the server's SSLContext, rebuilt when the certificate files change.

The API server speaks TLS to the webhook and checks the certificate against caBundle. Kubernetes updates a
mounted Secret by swapping a symlink, so the files are watched by fingerprint (what `stat` says of the
files the paths resolve to) and a new context is built off the request path; new connections get it,
connections already open keep theirs, so no review in flight is dropped.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import os
import shlex
import ssl
import threading
import time
from pathlib import Path
from typing import Any

from webhook.certs import ChainValidity, chain_validity
from webhook.server.logs import LOGGER, log

# TLS 1.2 suites with forward secrecy and AEAD only (TLS 1.3's suites are all of that kind).
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"
# This close to expiry the log says what to run (hourly), and by default readiness fails, so that somebody
# renews before the API server starts failing (`serve --unready-before-expiry` changes the latter).
EXPIRY_MARGIN = dt.timedelta(days=7)

_log = logging.getLogger(f"{LOGGER}.tls")

Fingerprint = tuple[tuple[int, int, int, int] | None, ...]


class BoundedSSLSocket(ssl.SSLSocket):
    """An SSL socket whose "blocking" mode has a deadline, and whose writes never wait for the client.

    gunicorn's threaded worker reads a request on a socket it puts in blocking mode with no timeout, so a
    client that sends half a request and stops would hold a worker thread forever. Here blocking mode
    means: the whole request must arrive within `request_timeout` seconds of the worker starting on it.

    Writing is the mirror case: a client that reads nothing holds the thread writing it a response larger
    than the socket buffers (measured: 8 such clients of a 5 MB answer kept a good review waiting 22 s).
    So in a thread, `sendall` sends what the socket takes at once and keeps the rest in `unsent`; the worker's
    main loop writes that out as the socket drains (`flush_unsent`), with a deadline, and the thread is free.
    Above MAX_UNSENT_TOTAL bytes kept in the process, a thread waits as before, bounded by the deadline.
    """

    request_timeout: float = 10.0
    _deadline: float | None = None
    unsent: bytearray | None = None  # what a thread's sendall left for the main loop to write
    _attempt = 0  # length of a TLS write that would have blocked: OpenSSL wants it retried with the same bytes

    SEND_CHUNK = 16 * 1024  # one TLS record
    MAX_UNSENT_TOTAL = 64 * 1024 * 1024
    _unsent_total = 0  # bytes in `unsent` buffers in this process (one worker)
    _unsent_lock = threading.Lock()

    def setblocking(self, flag: bool) -> None:
        if flag:
            self._deadline = time.monotonic() + self.request_timeout
            super().settimeout(self.request_timeout)
        else:
            self._deadline = None
            super().setblocking(False)

    def recv(self, buflen: int = 1024, flags: int = 0) -> bytes:
        deadline = self._deadline
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"request not received within {self.request_timeout:g} s")
            current = self.gettimeout()
            if current is None or current > remaining:
                super().settimeout(remaining)
        return super().recv(buflen, flags)

    # ------------------------------------------------------------------------------------------- writing

    def sendall(self, data: Any, flags: int = 0) -> None:
        if self._deadline is None or flags:  # not a worker thread's write
            super().sendall(data, flags)
            return
        with memoryview(data) as view, view.cast("B") as octets:
            rest = octets if self.unsent else octets[self._send_now(octets) :]
            if not rest:
                return
            if not self._reserve(len(rest)):  # too much kept already: wait here, bounded by the deadline
                self._flush_blocking()
                super().sendall(rest)  # starts with the bytes of any write that would have blocked
                self._attempt = 0
                return
            if self.unsent is None:
                self.unsent = bytearray()
            self.unsent += rest

    def _send_now(self, data: memoryview | bytearray) -> int:
        """Send without waiting; returns how many bytes went."""
        timeout = self.gettimeout()
        super().settimeout(0.0)
        try:
            return self._send_available(data)
        finally:
            super().settimeout(timeout)

    def _send_available(self, data: memoryview | bytearray) -> int:
        sent = 0
        while sent < len(data):
            length = self._attempt or min(len(data) - sent, self.SEND_CHUNK)
            try:
                sent += super().send(bytes(data[sent : sent + length]))
            except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError, InterruptedError):
                self._attempt = length
                break
            self._attempt = 0
        return sent

    def _flush_blocking(self) -> None:
        if self.unsent:
            pending, self.unsent = self.unsent, None
            self._release(len(pending))
            super().sendall(pending)

    def flush_unsent(self) -> bool:
        """Write what the socket takes now (main loop, non-blocking); True once nothing is left."""
        if not self.unsent:
            return True
        sent = 0
        try:
            sent = self._send_available(self.unsent)
        finally:
            del self.unsent[:sent]
            self._release(sent)
        return not self.unsent

    def discard_unsent(self) -> None:
        """Forget what was not written (the connection is being dropped)."""
        if self.unsent:
            self._release(len(self.unsent))
        self.unsent = None

    @classmethod
    def unsent_room(cls) -> bool:
        """Whether this process keeps well under MAX_UNSENT_TOTAL unsent: a write is sure not to wait."""
        return cls._unsent_total < cls.MAX_UNSENT_TOTAL // 2

    @classmethod
    def _reserve(cls, size: int) -> bool:
        with cls._unsent_lock:
            if cls._unsent_total + size > cls.MAX_UNSENT_TOTAL:
                return False
            cls._unsent_total += size
            return True

    @classmethod
    def _release(cls, size: int) -> None:
        with cls._unsent_lock:
            cls._unsent_total -= size


def build_context(cert_file: Path | str, key_file: Path | str) -> ssl.SSLContext:
    """A server context: TLS 1.2 minimum, forward-secret AEAD suites, the given key pair."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(TLS12_CIPHERS)
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE | ssl.OP_NO_RENEGOTIATION
    # The API server's client does not resume sessions: tickets would be work for nothing, and a ticket is the
    # session's secret sealed under a key that lives as long as the process. num_tickets covers TLS 1.3 only;
    # OP_NO_TICKET stops TLS 1.2's (RFC 5077).
    context.options |= ssl.OP_NO_TICKET
    context.num_tickets = 0
    context.load_cert_chain(str(cert_file), str(key_file))
    context.sslsocket_class = BoundedSSLSocket
    return context


def _stat(path: Path) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(path)  # follows symlinks: a Secret's files are links through `..data`
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


class CertStore:
    """The certificate and key the server presents; `context` is replaced whole when they change."""

    def __init__(
        self, cert_file: Path | str, key_file: Path | str, unready_before: dt.timedelta = EXPIRY_MARGIN
    ) -> None:
        self.unready_before = unready_before  # readiness fails this long before expiry (0: once expired)
        self.cert_file = Path(cert_file)
        self.key_file = Path(key_file)
        self._fingerprint = self.fingerprint()
        self.context = build_context(self.cert_file, self.key_file)
        self.validity = chain_validity(self.cert_file)
        self._failed: Fingerprint | None = None

    @property
    def not_after(self) -> dt.datetime:
        """When the served chain stops working: the certificate's expiry, or an earlier intermediate's."""
        return self.validity.not_after

    def fingerprint(self) -> Fingerprint:
        return (_stat(self.cert_file), _stat(self.key_file))

    def check(self, *, quiet: bool = False) -> bool:
        """Rebuild the context if the files changed; True when a new certificate was taken.

        A half-written pair (key replaced, certificate not yet) fails to load and is retried at the next
        check; the last good context stays meanwhile. So does a valid certificate against a replacement that
        is expired or not yet valid: clients would refuse every handshake. `quiet`: nothing logged (gunicorn's
        arbiter keeping its copy fresh; its workers report).
        """
        fingerprint = self.fingerprint()
        if fingerprint == self._fingerprint or fingerprint == self._failed:
            return False
        try:
            context = build_context(self.cert_file, self.key_file)
            validity = chain_validity(self.cert_file)
            now = dt.datetime.now(dt.UTC)
            if self.not_after > now and not validity.not_before <= now < validity.not_after:
                what = "the new certificate"
                if validity.expiring is not None:
                    what += f"'s chain ({validity.expiring})"
                raise ValueError(
                    f"{what} is valid from {validity.not_before:%Y-%m-%d %H:%M} to {validity.not_after:%Y-%m-%d %H:%M}"
                    f" UTC, not now (the current one is valid until {self.not_after:%Y-%m-%d %H:%M} UTC)"
                )
        except Exception as exc:  # ssl.SSLError, CertError, OSError, ValueError: not a usable pair
            if self.fingerprint() == fingerprint:  # stable, so really broken: say it once
                self._failed = fingerprint
                if not quiet:
                    log(
                        _log,
                        logging.ERROR,
                        f"certificate reload failed, still serving the previous one: {exc}",
                        event="certificate-reload",
                        result="error",
                        cert_file=str(self.cert_file),
                        key_file=str(self.key_file),
                    )
            return False
        if self.fingerprint() != fingerprint:  # changed while reading: take it next time
            return False
        self.context, self.validity, self._fingerprint = context, validity, fingerprint
        self._failed = None
        if not quiet:
            log(
                _log,
                logging.INFO,
                "certificate reloaded",
                event="certificate-reload",
                result="ok",
                cert_file=str(self.cert_file),
                not_after=validity.not_after.isoformat(),
            )
        return True

    def problem(self, now: dt.datetime | None = None) -> str | None:
        """Why the certificate makes the server unready (expired, or within `unready_before` of it), or None."""
        now = now or dt.datetime.now(dt.UTC)
        notice = self.expiry_notice(now)
        return notice if notice and self.not_after - now <= self.unready_before else None

    def expiry_notice(self, now: dt.datetime | None = None) -> str | None:
        """Expired, or within EXPIRY_MARGIN (or `unready_before`, if longer) of it: what to run, for the log."""
        now = now or dt.datetime.now(dt.UTC)
        return expiry_notice(self.cert_file, self.validity, now, max(EXPIRY_MARGIN, self.unready_before))


def expiry_notice(cert_file: Path, validity: ChainValidity, now: dt.datetime, margin: dt.timedelta) -> str | None:
    """What in `cert_file` has expired or expires within `margin` (the certificate, or the intermediate that
    ends its chain first), and what to do about it; None while the chain has longer than that."""
    not_after, expiring = validity.not_after, validity.expiring
    if expiring is None:
        what = f"certificate {cert_file}"
        renew = f"gpu-webhook certs renew --dir {shlex.quote(str(cert_file.parent))}"
        remedy = f"renew it (`{renew}`) or update its Secret"
    else:  # `certs renew` keeps the intermediates as they are: renewing the certificate would not help
        what = f"intermediate {expiring} in {cert_file}"
        remedy = "reissue it from its CA, put it after the certificate in the file and update the Secret"
    if not_after <= now:
        return f"{what} expired on {not_after:%Y-%m-%d %H:%M} UTC: {remedy}"
    if not_after - now <= margin:
        days = math.floor((not_after - now) / dt.timedelta(days=1) * 10) / 10  # never more than is left
        return f"{what} expires in {days:.1f} days ({not_after:%Y-%m-%d %H:%M} UTC): {remedy}"
    return None
