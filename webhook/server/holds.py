"""A worker's holds: room of a namespace's GPU budget that one worker may give to pods without a write per pod.

Why: a reservation costs a compare-and-swap of the ledger record (ledger.py) before the review is answered, which
halves a namespace's sequential create rate where the API server is quick. The API server's own quota pays the
same write at every create; a distributed rate limiter does not: each node takes a slice of the budget in
advance and spends it locally. A hold is such a slice, written in the record (`ledger.Hold`) and counted there in
full, so every other worker sees the room as taken. While it lasts, a create whose pod fits in it is answered at
once and remembered here; the holds' thread (budgets.py) writes those pods as reservations a few times a second,
shrinking the hold by as much, in one write for all of them.

What keeps it exact:
- a hold is taken only where the quotas have room for many more pods (HOLD_SHARE, HOLD_PODS): near the limit,
  every create is a reservation of its own, as before holds;
- a worker short of room asks the holds back (`recalled` in the record) and waits for them before it refuses
  (budgets.py `_recall`): room idle in one worker never refuses a pod that fits in another;
- the record counts a hold until every pod it may have given is counted elsewhere: written as a reservation, or
  seen by the recount (which leaves a young pod to the hold that gave it, `Record.recount`), or, for a worker that
  stopped without giving its holds back, once the hold ran out, a create's grace passed and its pods aged.
The numbers: docs/budgets.md and docs/performance.md.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from webhook.admission.cluster.quota import GpuQuota
from webhook.server.ledger import Entry, Hold, Record, Scope, hold_key, pod_of

HOLD_S = 10.0  # a hold lasts this long; renewed while in use
HOLD_MARGIN_S = 2.0  # ... and gives pods room only until this long before it runs out
HOLD_SHARE = 8  # a hold takes at most this part of the room its quotas have left
HOLD_PODS = 32  # ... and at most room for this many more pods of the size that asked for it
HOLD_IDLE_S = 2.0  # a hold that gave nothing for this long is given back
WANT_EVERY_S = 1.0  # a slow create asks for a hold of its scope at most this often (a refused ask costs a read)


@dataclass(slots=True)
class _Held:
    """One hold as this worker keeps it: what the record holds, and what was given from it since."""

    namespace: str
    key: str
    written: Hold  # as the record holds it (this worker's last write)
    unit: Fraction  # the GPU-equivalents of the create that asked for it: a refill is sized in such pods
    given: dict[str, Entry] = field(default_factory=dict)  # pods given room since the last write, by UID
    spent: Fraction = Fraction(0)  # what `given` holds
    used_at: float = 0.0  # when it last gave a pod room (or was taken)
    open: bool = True  # False while a write gives it back: no pod is given room from it meanwhile

    def left(self) -> Fraction:
        return self.written.gpus - self.spent


@dataclass(frozen=True, slots=True)
class HoldPlan:
    """One hold's part of a write: the hold to write (None: given back) and the pods to count elsewhere."""

    key: str
    hold: Hold | None
    given: Mapping[str, Entry]
    held: _Held | None  # the hold as kept here (None: one taken by this write)
    closed: bool  # this write closed it
    unit: Fraction = Fraction(0)


class Holds:
    """This worker's holds, by namespace and data key; the threads that answer reviews give from them, the holds'
    thread writes them (budgets.py)."""

    def __init__(self, holder: str, clock: Callable[[], float] = time.time) -> None:
        self.holder = holder
        self.clock = clock  # Unix time (a test's own clock in the property test)
        self.lock = threading.Lock()
        self.held: dict[tuple[str, str], _Held] = {}
        self.wanted: dict[tuple[str, Scope], Fraction] = {}  # scopes whose creates asked for a hold, and their size
        self._wanted_at: dict[tuple[str, Scope], float] = {}
        self._keys: dict[Scope, str] = {}
        self.wake = threading.Event()  # a hold half spent, or one asked for: the holds' thread writes at once

    def key(self, scope: Scope) -> str:
        found = self._keys.get(scope)
        if found is None:
            found = self._keys[scope] = hold_key(self.holder, scope)
        return found

    def count(self) -> int:
        return len(self.held)

    def namespaces(self) -> set[str]:
        with self.lock:
            return {namespace for namespace, _ in self.held} | {namespace for namespace, _ in self.wanted}

    # ------------------------------------------------------------------------------------ the reviews

    def admit(self, record: Record, quotas: Sequence[GpuQuota], uid: str, entry: Entry) -> bool:
        """Give the pod `uid` room from this worker's hold of its scope, where the hold has it; whether it was
        (True too for a pod given room, or reserved, already: the API server sent the review again). `record` is
        the view's copy: a hold asked back, or quotas lowered under what the record counts, give nothing."""
        key = self.key(entry.scope)
        with self.lock:
            held = self.held.get((record.namespace, key))
            if held is None or not held.open:
                return False
            if uid in held.given or uid in record.entries:
                return True
            now = self.clock()
            if held.left() < entry.gpus or now >= held.written.until - HOLD_MARGIN_S:
                return False
            in_record = record.holds.get(key)
            if in_record is None or in_record.recalled:  # not (or no longer) in the record: the room is not held
                return False
            if any(record.used(quota) > quota.hard for quota in quotas):
                return False
            held.given[uid] = entry
            held.spent += entry.gpus
            held.used_at = now
            if held.left() * 2 < held.written.gpus:  # refilled before it runs dry
                self.wake.set()
            return True

    def want(self, namespace: str, scope: Scope, gpus: Fraction) -> None:
        """A create of `scope` was reserved by a write of its own: ask the holds' thread for a hold (or more in
        the one there is), at most every WANT_EVERY_S."""
        now = self.clock()
        with self.lock:
            if now - self._wanted_at.get((namespace, scope), -WANT_EVERY_S) >= WANT_EVERY_S:
                self._wanted_at[namespace, scope] = now
                self.wanted[namespace, scope] = gpus
                self.wake.set()

    # ------------------------------------------------------------------------------------ the holds' thread

    def due(self, records: Mapping[str, Record], now: float) -> list[str]:
        """The namespaces whose holds need a write: pods given room, a hold asked back, idle, or half run out,
        or a hold asked for."""
        found: set[str] = set()
        with self.lock:
            found.update(namespace for namespace, _ in self.wanted)
            for (namespace, key), held in self.held.items():
                record = records.get(namespace)
                in_record = record.holds.get(key) if record is not None else None
                if (
                    held.given
                    or held.left() < held.unit
                    or (in_record is not None and in_record.recalled)
                    or now - held.used_at > HOLD_IDLE_S
                    or held.written.until - now < HOLD_S / 2
                ):
                    found.add(namespace)
        return sorted(found)

    def plan(
        self, record: Record, namespace: str, now: float, give_back: bool, quotas: Iterable[GpuQuota]
    ) -> list[HoldPlan]:
        """The holds of `namespace` to write over `record`, the pods given room from them counted elsewhere:
        each one asked back, idle, without room beside the others or given back is closed and written as None;
        each other is renewed and refilled to what the quotas' room allows (never below what is left of it: a
        pod may be taking room from it as this is written); and a hold is taken for each scope a create asked
        for, where the quotas have room for many more pods. All under the lock: a hold closed here gives no pod
        room from then on."""
        plans: list[HoldPlan] = []
        quotas = list(quotas)
        base = record

        def room(scope: Scope, without: str) -> Fraction | None:
            counting = [q for q in quotas if q.counts(pod_of(namespace, "", scope))]
            if not counting:
                return None
            others = base.holding(without, None, {})
            return min(q.hard - others.used(q) for q in counting)

        with self.lock:
            wanted = {scope: gpus for (ns, scope), gpus in self.wanted.items() if ns == namespace}
            for (ns, key), held in self.held.items():
                if ns != namespace:
                    continue
                in_record = record.holds.get(key)
                idle = now - held.used_at > HOLD_IDLE_S and not held.given
                close = give_back or in_record is None or bool(in_record.recalled) or idle
                given, left, scope = dict(held.given), held.left(), held.written.scope
                hold: Hold | None = None
                if not close:
                    base = base.holding(key, None, given)
                    free = room(scope, key)
                    unit = wanted.get(scope, held.unit)
                    gpus = max(left, _size(free, unit)) if free is not None and free >= left else Fraction(0)
                    if gpus < unit:  # no room for another pod of its size: its rest goes back
                        close = True
                    else:
                        hold = Hold(self.holder, gpus, scope, now + HOLD_S)
                closed = close and held.open
                held.open = held.open and not close
                base = base.holding(key, hold, {} if hold is not None else given)
                plans.append(HoldPlan(key, hold, given, held, closed))
            if give_back:
                return plans
            for scope, gpus in wanted.items():
                key = self.key(scope)
                if key in base.holds or (namespace, key) in self.held:
                    continue
                free = room(scope, key)
                size = _size(free, gpus) if free is not None else Fraction(0)
                if not size:
                    continue
                hold = Hold(self.holder, size, scope, now + HOLD_S)
                base = base.holding(key, hold, {})
                plans.append(HoldPlan(key, hold, {}, None, False, gpus))
        return plans

    def edit(
        self,
        record: Record,
        namespace: str,
        now: float,
        give_back: bool,
        quotas: Iterable[GpuQuota],
        plans: list[HoldPlan],
    ) -> Record | None:
        """A flush's compare-and-swap edit: `record` with this worker's holds of `namespace` as `plan` says (None
        where there is nothing to write). `plans` keeps what was planned, for `settle` or `abandon`; an earlier
        attempt's plans (a lost race) are abandoned first."""
        self.abandon(plans)
        plans[:] = self.plan(record, namespace, now, give_back, quotas)
        updated = record
        for plan in plans:
            updated = updated.holding(plan.key, plan.hold, plan.given)
        return updated if plans else None

    def abandon(self, plans: list[HoldPlan]) -> None:
        """The write of `plans` did not happen (lost a race, or failed): the holds it closed open again (the
        record still holds them as before)."""
        with self.lock:
            for plan in plans:
                if plan.closed and plan.held is not None:
                    plan.held.open = True
        plans.clear()

    def settle(self, plans: Sequence[HoldPlan], written: Record) -> None:
        """The write of `plans` happened: the pods it counted are no longer this worker's to write, the holds it
        gave back are gone, those it took or refilled are as written, and the asks it answered are done."""
        namespace = written.namespace
        with self.lock:
            for plan in plans:
                held = plan.held
                if held is None:
                    if plan.hold is not None:
                        in_record = written.holds.get(plan.key) or plan.hold
                        self.held[namespace, plan.key] = _Held(
                            namespace, plan.key, in_record, plan.unit, used_at=self.clock()
                        )
                    continue
                for uid in plan.given:
                    entry = held.given.pop(uid, None)
                    if entry is not None:
                        held.spent -= entry.gpus
                if plan.hold is None:
                    if not held.given:
                        self.held.pop((namespace, plan.key), None)
                    continue
                held.written = written.holds.get(plan.key) or plan.hold
            for ns, scope in list(self.wanted):
                if ns == namespace:
                    del self.wanted[ns, scope]


def _size(free: Fraction, unit: Fraction) -> Fraction:
    """A hold's size where its quotas have `free` room: a whole number of pods of `unit`, at most HOLD_PODS and
    at most a HOLD_SHARE-th of the room (0 where that is less than one pod: near the limit, no hold)."""
    pods = min(int(free / (HOLD_SHARE * unit)), HOLD_PODS) if unit > 0 else 0
    return unit * max(pods, 0)
