"""One holder at a time across every worker of every replica: a `coordination.k8s.io` Lease, as the controller
manager elects its leader.

Why: the budget ledger's recount (budgets.py) is written from a pod watch, and two writers whose watches stand at
different points could undo each other's folding; one recounter at a time, with the Lease's transition count
written beside its recount as a fence, cannot. The rules are client-go's leader election:
- the holder renews every `retry_s`; it stops leading as soon as it has not renewed for `renew_deadline_s`
  (shorter than the lease), so that it has stopped before anyone else may start;
- another candidate takes the Lease only once it has seen the same holder and renew time, unchanged, for
  `duration_s` of its own clock (never by comparing clocks across machines), or when the holder is empty;
- every change is a compare-and-swap on the Lease's resourceVersion: of two candidates, one wins;
- a holder that stops gives the Lease back (empty holder), so that the next takes over at once.
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from webhook.server.logs import LOGGER, log

_log = logging.getLogger(f"{LOGGER}.lease")

DURATION_S = 15.0  # a candidate waits this long on an unchanged holder before taking the Lease
RENEW_DEADLINE_S = 10.0  # a holder that has not renewed for this long stops leading
RETRY_S = 2.0  # how often the holder renews and a candidate looks


def identity() -> str:
    """This process: the pod's host name and the process ID (each worker is a candidate of its own)."""
    return f"{socket.gethostname()}_{os.getpid()}"


def _micro_time(at: float) -> str:
    return datetime.datetime.fromtimestamp(at, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# (HTTP method, path, body) -> (status, decoded body); raises on an unreachable API server (ledger.ConfigMaps.call).
Call = Callable[..., tuple[int, Any]]


class Lease:
    """A candidate for one Lease: `step` tries once to take or renew it; `run` does so every `retry_s` in a thread
    and calls `on_start(epoch)` when this candidate starts leading and `on_stop()` when it stops."""

    def __init__(
        self,
        call: Call,
        namespace: str,
        name: str,
        *,
        holder: str | None = None,
        duration_s: float = DURATION_S,
        renew_deadline_s: float = RENEW_DEADLINE_S,
        retry_s: float = RETRY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._call = call
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self.name = name
        self.holder = holder or identity()
        self.duration_s = duration_s
        self.renew_deadline_s = renew_deadline_s
        self.retry_s = retry_s
        self._clock = clock
        self.epoch = 0  # the Lease's leaseTransitions when this candidate took it: the fence of its writes
        self._at_least = 0  # `advance`: the epoch the next renewal writes, at least
        self.last_error = ""
        self._renewed_at: float | None = None  # when this candidate last took or renewed it (its clock)
        self._observed: tuple[Any, ...] | None = None  # the holder and renew time last seen
        self._observed_at = 0.0
        self._stop = threading.Event()
        self.on_start: Callable[[int], None] = lambda epoch: None
        self.on_stop: Callable[[], None] = lambda: None

    def leading(self) -> bool:
        """Whether this candidate holds the Lease now: renewed within the renew deadline."""
        renewed = self._renewed_at
        return renewed is not None and self._clock() - renewed < self.renew_deadline_s

    def step(self) -> bool:
        """One try to take or renew the Lease; whether this candidate leads after it."""
        try:
            self._try()
            self.last_error = ""
        except Exception as exc:  # unreachable, refused: leading only until the renew deadline passes
            error = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            if error != self.last_error:
                log(_log, logging.WARNING, f"Lease {self.name}: {error}; trying again every {self.retry_s:g} s",
                    event="lease-failed", lease=self.name, holder=self.holder)  # fmt: skip
            self.last_error = error
        return self.leading()

    def _try(self) -> None:
        now = self._clock()
        status, found = self._call("GET", f"{self.path}/{self.name}")
        if status == 404:
            self._write("POST", self.path, self._lease(None, 0, now))
            return
        if status != 200 or not isinstance(found, dict):
            raise RuntimeError(f"reading Lease {self.name}: HTTP {status}")
        spec = found.get("spec") or {}
        holder, renewed = spec.get("holderIdentity") or "", spec.get("renewTime")
        transitions = int(spec.get("leaseTransitions") or 0)
        if (holder, renewed) != self._observed:
            self._observed, self._observed_at = (holder, renewed), now
        if holder == self.holder:
            transitions = max(transitions, self._at_least)
            self._write("PUT", f"{self.path}/{self.name}", self._lease(found, transitions, now, keep=True))
            return
        self._renewed_at = None  # somebody else holds it (or took it from us)
        if holder and now - self._observed_at < self.duration_s:
            return  # held, and renewed within the lease as this candidate has seen it
        self._write("PUT", f"{self.path}/{self.name}", self._lease(found, transitions + 1, now))

    def _lease(self, found: dict[str, Any] | None, transitions: int, now: float, keep: bool = False) -> dict[str, Any]:
        wall = time.time()
        spec = dict((found or {}).get("spec") or {})
        if not keep:
            spec["acquireTime"] = _micro_time(wall)
        spec.update({
            "holderIdentity": self.holder,
            "leaseDurationSeconds": int(self.duration_s),
            "renewTime": _micro_time(wall),
            "leaseTransitions": transitions,
        })  # fmt: skip
        metadata: dict[str, Any] = {"name": self.name}
        if found is not None:
            metadata["resourceVersion"] = (found.get("metadata") or {}).get("resourceVersion")
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": spec}

    def _write(self, method: str, path: str, body: dict[str, Any]) -> None:
        started = self._clock()
        status, answer = self._call(method, path, body)
        if status in (200, 201):
            was = self.leading()
            self._renewed_at = started
            self.epoch = int(body["spec"]["leaseTransitions"])
            spec = (answer.get("spec") if isinstance(answer, dict) else None) or body["spec"]
            self._observed, self._observed_at = (spec.get("holderIdentity"), spec.get("renewTime")), started
            if not was:
                log(_log, logging.INFO, f"took Lease {self.name} (transition {self.epoch})", event="lease-taken",
                    lease=self.name, holder=self.holder, epoch=self.epoch)  # fmt: skip
            return
        if status != 409:  # 409: another candidate wrote first; the next look sees who
            raise RuntimeError(f"writing Lease {self.name}: HTTP {status}")

    def advance(self, epoch: int) -> None:
        """Write at least `epoch` as the Lease's transitions at the next renewal, where this candidate still holds
        it: a Lease deleted by hand starts counting again from 0, below the epoch the records were fenced with."""
        self._at_least = max(self._at_least, epoch)

    def run(self) -> None:
        """Take and renew the Lease until `stop`; `on_start`/`on_stop` on each change of leading."""
        was = False
        while not self._stop.is_set():
            now = self.step()
            if now != was:
                self._changed(now)
            was = now
            self._stop.wait(self.retry_s)
        if was:
            self._changed(False)

    def _changed(self, leading: bool) -> None:
        """`on_start` or `on_stop`; an error there is logged, never the end of the renewals."""
        try:
            if leading:
                self.on_start(self.epoch)
            else:
                self.on_stop()
        except Exception:
            _log.exception("Lease %s: %s failed", self.name, "on_start" if leading else "on_stop")

    def start(self) -> None:
        threading.Thread(target=self.run, name=f"lease-{self.name}", daemon=True).start()

    def stop(self) -> None:
        """Stop trying; give the Lease back where this candidate holds it, so that the next takes over at once."""
        self._stop.set()
        if not self.leading():
            return
        self._renewed_at = None
        try:
            status, found = self._call("GET", f"{self.path}/{self.name}")
            spec = (found.get("spec") or {}) if isinstance(found, dict) else {}
            if status == 200 and spec.get("holderIdentity") == self.holder:
                given = {**found, "spec": {**spec, "holderIdentity": "", "leaseDurationSeconds": 1}}
                self._call("PUT", f"{self.path}/{self.name}", given)
        except Exception:  # nothing to do: the Lease runs out by itself
            _log.debug("giving Lease %s back failed", self.name, exc_info=True)
