"""The recount's Lease (webhook/server/lease.py): one holder at a time, as client-go's leader election decides it.

The API is a dictionary with the API server's compare-and-swap on resourceVersion; the clock is the test's, so
that expiry is decided by what a candidate has observed, never by comparing clocks.
"""

from __future__ import annotations

import copy
from typing import Any

from webhook.server.lease import Lease

PATH = "/apis/coordination.k8s.io/v1/namespaces/gpu-admission/leases"


class LeaseAPI:
    """One Lease object behind GET, POST and PUT, with 409 on a stale resourceVersion or an existing name."""

    def __init__(self) -> None:
        self.stored: dict[str, Any] | None = None
        self.version = 0
        self.down = False

    @staticmethod
    def version_of(obj: dict[str, Any]) -> str:
        return str(obj["metadata"]["resourceVersion"])

    def call(self, method: str, path: str, body: Any = None, timeout: float = 2.0) -> tuple[int, Any]:
        if self.down:
            raise OSError("connection refused")
        if method == "GET":
            return (404, {}) if self.stored is None else (200, copy.deepcopy(self.stored))
        if method == "POST":
            if self.stored is not None:
                return 409, {}
        elif (
            self.stored is None or body["metadata"].get("resourceVersion") != self.stored["metadata"]["resourceVersion"]
        ):
            return 409, {}
        self.version += 1
        self.stored = copy.deepcopy(body)
        self.stored["metadata"]["resourceVersion"] = str(self.version)
        return (201 if method == "POST" else 200), copy.deepcopy(self.stored)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def candidate(api: LeaseAPI, clock: Clock, name: str) -> Lease:
    return Lease(
        lambda *args, **kwargs: api.call(*args, **kwargs), "gpu-admission", "recount", holder=name, clock=clock
    )


def test_the_first_candidate_takes_the_lease_and_the_second_waits_while_it_is_renewed() -> None:
    api, clock = LeaseAPI(), Clock()
    a, b = candidate(api, clock, "a"), candidate(api, clock, "b")
    assert a.step() is True and a.epoch == 0
    assert b.step() is False
    for _ in range(10):  # renewed every 2 s for 20 s: never free for b
        clock.now += 2.0
        assert a.step() is True
        assert b.step() is False
    assert api.stored is not None and api.stored["spec"]["holderIdentity"] == "a"


def test_a_holder_that_stops_renewing_loses_it_after_the_lease_seen_unchanged_and_the_next_epoch_fences_it() -> None:
    api, clock = LeaseAPI(), Clock()
    a, b = candidate(api, clock, "a"), candidate(api, clock, "b")
    assert a.step()
    assert not b.step()  # b observes a's renewal at 1000
    clock.now += 10.0
    assert not a.leading()  # past its renew deadline without renewing: a has stopped, before b may start
    assert not b.step()  # only 10 s of the 15 seen unchanged
    clock.now += 5.1
    assert b.step() and b.epoch == 1  # a transition: the epoch a's late writes are refused by
    assert not a.step()  # a sees b holding it


def test_a_holder_that_stops_gives_it_back_and_the_next_takes_it_at_once() -> None:
    api, clock = LeaseAPI(), Clock()
    a, b = candidate(api, clock, "a"), candidate(api, clock, "b")
    assert a.step() and not b.step()
    a.stop()
    assert not a.leading()
    assert b.step() and b.epoch == 1


def test_an_unreachable_api_server_keeps_the_holder_only_until_its_renew_deadline() -> None:
    api, clock = LeaseAPI(), Clock()
    a = candidate(api, clock, "a")
    assert a.step()
    api.down = True
    clock.now += 9.0
    assert a.step() and "connection refused" in a.last_error
    clock.now += 1.5
    assert not a.step()


def test_two_candidates_racing_for_a_free_lease_leave_one_holder() -> None:
    api, clock = LeaseAPI(), Clock()
    a, b = candidate(api, clock, "a"), candidate(api, clock, "b")
    original = api.call

    def b_first(method: str, path: str, body: Any = None, timeout: float = 2.0) -> tuple[int, Any]:
        if method == "POST":  # b's create lands between a's GET and a's POST
            api.call = original  # type: ignore[method-assign]
            assert b.step()
        return original(method, path, body, timeout)

    api.call = b_first  # type: ignore[method-assign]
    assert a.step() is False
    assert b.leading() and api.stored is not None and api.stored["spec"]["holderIdentity"] == "b"


def test_advance_raises_the_epoch_a_lease_made_anew_counts_from() -> None:
    api, clock = LeaseAPI(), Clock()
    a = candidate(api, clock, "a")
    assert a.step() and a.epoch == 0
    a.advance(7)  # the records carry epoch 7 from before the Lease was deleted by hand
    clock.now += 2.0
    assert a.step() and a.epoch == 7
