"""The budget ledger's record (webhook/server/ledger.py): what an entry keeps of a pod is enough for every quota
scope to count it as it counts the pod itself, a record round-trips through its ConfigMap, and a record edited by
hand is read as far as it can be, never fatally. The API calls are tested against the loopback API in
tests/test_budget_server.py."""

from __future__ import annotations

import dataclasses
import itertools
import threading
from fractions import Fraction
from typing import Any

import pytest

from webhook.admission.cluster.quota import OPERATORS, gpu_quota
from webhook.server.budget_watch import HeldPod, PodWatch, Sum, sums_of
from webhook.server.ledger import LEDGER_LABEL, NAMESPACE_LABEL, Entry, Hold, Record, pod_of, scope_of

CROSS = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {}, "topologyKey": "zone", "namespaces": ["other"]}]}}  # fmt: skip
LOCAL = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
    {"weight": 1, "podAffinityTerm": {"labelSelector": {}, "topologyKey": "zone"}}]}}  # fmt: skip


def pod(
    priority: str | None = None, deadline: int | None = None, cpu: str | None = None, affinity: Any = None
) -> dict[str, Any]:
    resources: dict[str, Any] = {"limits": {"nvidia.com/gpu.shared": "1"}}
    if cpu is not None:
        resources["requests"] = {"cpu": cpu}
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "x", "resources": resources}]}
    if priority is not None:
        spec["priorityClassName"] = priority
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    if affinity is not None:
        spec["affinity"] = affinity
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"}, "spec": spec}


PODS = [
    pod(priority, deadline, cpu, affinity)
    for priority, deadline, cpu, affinity in itertools.product(
        (None, "high", "low"), (None, 0, 600), (None, "1"), (None, CROSS, LOCAL)
    )
]


def quota(scopes: list[str] | None = None, expressions: list[dict[str, Any]] | None = None) -> Any:
    spec: dict[str, Any] = {"hard": {"requests.nvidia.com/gpu": "2"}}
    if scopes is not None:
        spec["scopes"] = scopes
    if expressions is not None:
        spec["scopeSelector"] = {"matchExpressions": expressions}
    obj = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpus", "namespace": "team-a"},
           "spec": spec}  # fmt: skip
    found = gpu_quota(obj)
    assert found is not None
    return found


SCOPES = ("Terminating", "NotTerminating", "BestEffort", "NotBestEffort", "CrossNamespacePodAffinity")


def priority_quota(operator: str) -> Any:
    values = {"values": ["high"]} if operator in ("In", "NotIn") else {}
    return quota(expressions=[{"scopeName": "PriorityClass", "operator": operator, **values}])


QUOTAS = [
    quota(),
    *(quota([scope]) for scope in SCOPES),
    *(priority_quota(operator) for operator in OPERATORS),
    quota(["NotTerminating", "NotBestEffort"]),
]


@pytest.mark.parametrize("counted", PODS, ids=lambda p: repr(p["spec"])[:60])
def test_an_entrys_scope_is_counted_by_every_quota_as_the_pod_is(counted: dict[str, Any]) -> None:
    stand_in = pod_of("team-a", "p", scope_of(counted))
    for each in QUOTAS:
        assert each.counts(stand_in) == each.counts(counted), (each.requirements, counted["spec"])


def test_a_record_round_trips_through_its_configmap_and_sums_what_each_quota_counts() -> None:
    high, plain = pod(priority="high", cpu="1"), pod()
    entries = {
        "uid-1": Entry("a", Fraction(1, 4), scope_of(high), 1.5),
        "uid-2": Entry("b", Fraction(1, 7), scope_of(plain), 2.0),
    }
    sums = {scope_of(plain): Sum(Fraction(3, 4), 3), scope_of(high): Sum(Fraction(1, 2), 2)}
    written = Record("team-a", "", entries, sums, 9.5, 3).configmap("gpu-admission")
    assert written["metadata"]["name"] == "gpu-budget-team-a"
    assert written["metadata"]["labels"][LEDGER_LABEL] == "true"
    assert written["metadata"]["labels"][NAMESPACE_LABEL] == "team-a"
    assert written["data"]["uid-2"] == '{"at":2.0,"gpus":"1/7","pod":"b","scope":{"bestEffort":true}}'
    assert sorted(written["data"]) == ["recount", "sum.0", "sum.1", "uid-1", "uid-2"]
    assert "resourceVersion" not in written["metadata"]  # a create
    written["metadata"]["resourceVersion"] = "7"
    read = Record.of(written)
    assert read is not None and read.version == "7" and read.entries == entries and read.sums == sums
    assert (read.recounted, read.epoch) == (9.5, 3)
    assert read.pods() == 7
    assert read.used(quota()) == Fraction(1, 4) + Fraction(1, 7) + Fraction(3, 4) + Fraction(1, 2)
    high_only = quota(expressions=[{"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}])
    assert read.used(high_only) == Fraction(1, 4) + Fraction(1, 2)
    assert read.used(quota(["BestEffort"])) == Fraction(1, 7) + Fraction(3, 4)  # GPUs alone: BestEffort QoS
    assert Record("team-a", "7").configmap("gpu-admission")["metadata"]["resourceVersion"] == "7"


def test_a_record_edited_by_hand_keeps_what_it_can_read() -> None:
    written = Record("team-a", "", {"uid-1": Entry("a", Fraction(1, 2), (), 1.0)}).configmap("gpu-admission")
    written["data"].update({"uid-2": "not json", "uid-3": '{"pod": "x", "gpus": "1/0", "at": 1}', "uid-4": "[]",
                            "sum.9": "{}", "recount": "soon"})  # fmt: skip
    read = Record.of(written)
    assert read is not None and list(read.entries) == ["uid-1"] and read.sums == {} and read.recounted == 0
    other = {**written, "metadata": {**written["metadata"], "name": "gpu-budget-team-b"}}
    assert Record.of(other) is None  # its name does not match the namespace it says it counts
    assert Record.of({"metadata": {"name": "unrelated"}}) is None


def held(name: str, gpus: Fraction = Fraction(1, 4), scope: tuple = ()) -> HeldPod:
    return HeldPod(name, gpus, scope)


def test_a_recount_folds_the_reservations_of_pods_it_sees_and_keeps_those_it_does_not_yet() -> None:
    """A pod counts once: as a reservation until the recount's watch sees it, then in the recount's sums."""
    record = Record("team-a", "3", {"a": Entry("a", Fraction(1, 4), (), 1.0), "b": Entry("b", Fraction(1, 4), (), 2.0)})
    live = {"a": held("a"), "old": held("old", Fraction(1, 2))}  # "old" ran before any reservation: adopted
    folded = record.recount(live, released=(), now=5.0, epoch=2)
    assert folded is not None
    assert folded.sums == {(): Sum(Fraction(3, 4), 2)} and list(folded.entries) == ["b"]
    assert (folded.recounted, folded.epoch, folded.version) == (5.0, 2, "3")
    assert folded.used(quota()) == record.used(quota()) + Fraction(1, 2)  # "a" moved, "old" came in
    assert folded.recount(live, released=(), now=6.0, epoch=2) is None  # nothing changed: nothing to write
    released = folded.recount({}, released={"b"}, now=7.0, epoch=2)  # "a" and "old" deleted, "b" seen going
    assert released is not None and released.sums == {} and released.entries == {}


def test_a_record_of_the_release_that_kept_one_entry_per_pod_reads_as_reservations_and_folds_in() -> None:
    """Upgrade in place: every entry that release wrote counts until the first recount folds it in."""
    old = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "gpu-budget-team-a", "namespace": "gpu-admission", "resourceVersion": "41",
                     "labels": {LEDGER_LABEL: "true", NAMESPACE_LABEL: "team-a"}},
        "data": {f"uid-{i}": f'{{"at":1764000000.0,"gpus":"1/4","pod":"p-{i}"}}' for i in range(4)},
    }  # fmt: skip
    read = Record.of(old)
    assert read is not None and read.pods() == 4 and read.used(quota()) == 1 and read.sums == {}
    folded = read.recount({f"uid-{i}": held(f"p-{i}") for i in range(3)}, released=(), now=2e9)
    assert folded is not None and folded.used(quota()) == 1 and list(folded.entries) == ["uid-3"]


def test_the_sums_read_as_entries_to_the_release_that_kept_one_entry_per_pod() -> None:
    """During a rolling update that release still runs: it reads a sum as an entry of its GPU-equivalents (so it
    counts what the recount counts) whose time it never reaches (so it never looks its "pod" up to release it)."""
    written = Record("team-a", "", {}, {(("priorityClassName", "high"),): Sum(Fraction(5, 4), 5)}).configmap("x")
    entry = Entry.parse(written["data"]["sum.0"])
    assert entry is not None and entry.gpus == Fraction(5, 4) and entry.scope == (("priorityClassName", "high"),)
    assert entry.at > 4e9


def test_the_pod_watch_keeps_each_namespaces_sums_as_pods_come_change_and_go() -> None:
    """The recount reads the sums the watch keeps, not the namespace's pods: they must equal a sum of the pods."""
    weights = {"a": Fraction(1, 4), "b": Fraction(1, 2), "c": Fraction(1, 4)}

    def ask_of(obj: dict[str, Any]) -> tuple[Fraction, tuple] | None:
        gpus = weights.get(obj["metadata"]["name"][0])
        return None if gpus is None else (gpus, scope_of(obj))

    watch = PodWatch(None, ask_of, lambda namespace, uid: None)  # type: ignore[arg-type]

    def event(kind: str, name: str, uid: str, **spec: Any) -> None:
        obj = {**pod(**spec), "metadata": {"name": name, "namespace": "team-a", "uid": uid}}
        watch._change(kind, obj)
        assert watch.sums.get("team-a", {}) == sums_of((watch.held.get("team-a") or {}).values())

    event("ADDED", "a1", "1")
    event("ADDED", "b1", "2", priority="high")
    event("ADDED", "c1", "3")
    assert watch.sums["team-a"][scope_of(pod())] == Sum(Fraction(1, 2), 2)
    event("MODIFIED", "b1", "2")  # its scope changed: it moves from one sum to the other
    event("MODIFIED", "x1", "3")  # no longer a GPU pod
    event("DELETED", "a1", "1")
    event("DELETED", "b1", "2")
    assert "team-a" not in watch.sums and "team-a" not in watch.held


def test_a_recount_is_not_written_over_one_of_a_later_holder_or_a_later_watch() -> None:
    recounted = Record("team-a", "9", {}, {}, 5.0, 2, "1200")
    assert recounted.later_than(1, "5000")  # an earlier holder of the Lease, whatever its watch
    assert recounted.later_than(2, "1100")  # the same holder's epoch, an older watch: it waits
    assert not recounted.later_than(2, "1200") and not recounted.later_than(3, "1300")
    assert recounted.later_than(2, "")  # a watch whose version is unknown never writes over a known one
    assert not Record("team-a", "9").later_than(0, "")  # a record never recounted takes any recount


# --- deciding on the view's copy ----------------------------------------------------------------------------


class LaggingView:
    """A ledger view one watch event behind: it still holds the record as it was before a share was given back."""

    def __init__(self, records: dict[str, Record]) -> None:
        self.records = records

    def state(self) -> str:
        return "current"


def one_slot(uid: str) -> Any:
    """An edit that reserves `uid` where the record holds no reservation yet, and writes nothing where it is full
    (a refusal, which no compare-and-swap checks)."""

    def edit(record: Record) -> Record | None:
        if record.entries:
            return None
        return record.reserved(uid, Entry(uid, Fraction(1), (), 0.0))

    return edit


def test_a_refusal_is_never_decided_on_a_view_that_lags(tmp_path) -> None:
    """The view still shows the slot taken; the API server's record has it free again (the pod ended and the
    recount gave its share back). The reservation is made, not refused: a decision that writes nothing is taken
    again on the record as the API server holds it, since no compare-and-swap would catch the old copy."""
    from tests.fake_kube_api import FakeKubeAPI
    from webhook.server.inventory import find_credentials
    from webhook.server.ledger import ConfigMaps, Ledger

    api = FakeKubeAPI().start()
    try:
        credentials = find_credentials(str(api.write_kubeconfig(tmp_path / "kubeconfig")))
        assert credentials.configuration is not None
        plain = Ledger(ConfigMaps(credentials.configuration, "gpu-admission"))
        first = plain.change("team", one_slot("old"))  # the record as the view last saw it: the slot taken
        assert list(first.entries) == ["old"]
        freed = plain.change("team", lambda record: Record("team", record.version))  # the share given back
        assert freed.entries == {}

        lagging = Ledger(ConfigMaps(credentials.configuration, "gpu-admission"), LaggingView({"team": first}))
        written = lagging.change("team", one_slot("new"))
        assert list(written.entries) == ["new"]
        assert list(plain.read("team").entries) == ["new"]
    finally:
        api.stop()


# ---------------------------------------------------------------- workers' holds


def test_a_hold_counts_in_full_for_the_quotas_its_scope_selects_and_round_trips():
    high = (("priorityClassName", "high"),)
    held = Hold("replica-1-7", Fraction(2), high, until=1_000.0)
    record = Record("team-a", "5", holds={held.key(): held}, sums={(): Sum(Fraction(1), 4)})
    every, scoped = quota(), quota(expressions=[{"scopeName": "PriorityClass", "operator": "In", "values": ["low"]}])
    assert record.used(every) == 3  # the sums and the hold
    assert record.used(scoped) == 0  # a hold of high-priority pods is not the low quota's
    assert record.held(every) == 2
    assert Record.of(record.configmap("gpu-admission")) == record
    assert record.pods() == 4  # a hold is room, not pods


def test_a_hold_rewritten_by_code_that_knows_no_holds_reads_as_run_out():
    """A worker of the per-pod release reads a hold as an entry it never looks up, and writes it back in an
    entry's form: without `until`, so the recount drops it in its three steps, never at once."""
    held = Hold("replica-1-7", Fraction(1, 2), (), until=1_000.0)
    written = Record("team-a", "5", holds={held.key(): held}).configmap("gpu-admission")
    older = Entry.parse(written["data"][held.key()])
    assert older is not None and older.pod == "" and older.gpus == Fraction(1, 2)
    written["data"][held.key()] = older.text()
    again = Record.of(written)
    assert again is not None and again.holds[held.key()].until == 0.0
    marked = again.recount({}, set(), now=2_000.0, holds_end=1_500.0, watched="9")
    assert marked is not None and marked.holds[held.key()].ended == "pending"


def test_a_young_pod_no_reservation_announced_is_left_to_its_hold_and_the_flush_counts_it_in_the_sums():
    held = Hold("replica-1-7", Fraction(1), (), until=1_000.0)
    record = Record("team-a", "10", holds={held.key(): held}, seen="8", recounted=1.0)
    given = HeldPod("p", Fraction(1, 4), ())
    live = {"uid-new": given}
    recounted = record.recount(live, set(), now=2.0, young={"uid-new": "9"}, holds_end=0.0, watched="10")
    assert recounted is not None
    assert recounted.deferred == {"uid-new"} and recounted.sums == {}  # the hold counts it: not twice
    assert recounted.used(quota()) == 1
    flushed = recounted.holding(held.key(), Hold("replica-1-7", Fraction(3, 4), (), until=1_000.0),
                                {"uid-new": Entry("p", Fraction(1, 4), (), 2.0)})  # fmt: skip
    assert flushed.deferred == frozenset() and flushed.entries == {}
    assert flushed.sums == {(): Sum(Fraction(1, 4), 1)} and flushed.used(quota()) == 1
    # A young pod the last recount counted (created before the version it was made from) stays counted.
    counted = record.recount(live, set(), now=2.0, young={"uid-new": "7"}, holds_end=0.0, watched="10")
    assert counted is not None and counted.deferred == frozenset() and counted.used(quota()) == Fraction(5, 4)
    # So does one of a scope no hold holds (created while the webhook was off): no hold counts it.
    high = {"uid-new": HeldPod("p", Fraction(1, 4), (("priorityClassName", "high"),))}
    other = record.recount(high, set(), now=2.0, young={"uid-new": "9"}, holds_end=0.0, watched="10")
    assert other is not None and other.deferred == frozenset() and other.used(quota()) == Fraction(5, 4)
    # The first recount of a record counted nothing before it: a young pod is left to the hold there too.
    first = dataclasses.replace(record, seen="", recounted=0.0)
    fresh = first.recount(live, set(), now=2.0, young={"uid-new": "3"}, holds_end=0.0, watched="10")
    assert fresh is not None and fresh.deferred == {"uid-new"}


def test_a_hold_whose_worker_is_gone_is_dropped_only_once_the_pod_watch_has_read_past_its_fence():
    held = Hold("gone-1", Fraction(1), (), until=100.0)
    record = Record("team-a", "20", holds={held.key(): held}, seen="19", recounted=1.0)
    young = {"uid-late": "18"}
    live = {"uid-late": HeldPod("p", Fraction(1, 4), ())}
    kept = record.recount(live, set(), 150.0, young=young, holds_end=50.0, watched="30")
    assert kept is not None and kept.holds == record.holds  # not run out long enough ago
    marked = record.recount(live, set(), 200.0, young=young, holds_end=150.0, watched="30")
    assert marked is not None and marked.holds[held.key()].ended == "pending"
    marked = Record.of(dataclasses.replace(marked, version="25").configmap("gpu-admission"))  # as written
    assert marked is not None
    fenced = marked.recount(live, set(), 201.0, young=young, holds_end=150.0, watched="24")
    assert fenced is not None and fenced.holds[held.key()].ended == "25"  # the watch has not read that far
    dropped = fenced.recount(live, set(), 202.0, young=young, holds_end=150.0, watched="25")
    assert dropped is not None and dropped.holds == {}
    assert dropped.deferred == frozenset()  # every young pod counted: none is left to a hold that is gone
    assert dropped.used(quota()) == Fraction(1, 4)


def test_the_pod_watchs_version_is_read_with_the_pods_it_holds_never_ahead_of_them():
    """A recount reads the pods, their sums and their version as one moment: were the version of an event set
    before the event is held, a new recount leader could claim a version whose pod it does not hold yet, and
    write its recount over a deposed leader's that counted that pod."""
    read_during: list[str] = []
    watch: PodWatch

    def seen(namespace: str) -> None:  # called while the ADDED event is being held
        reader = threading.Thread(target=lambda: read_during.append(watch.version()))
        reader.start()
        reader.join(0.2)
        assert reader.is_alive(), "the version was readable before its event was held"
        threads.append(reader)

    threads: list[threading.Thread] = []
    watch = PodWatch(None, lambda pod: (Fraction(1, 4), ()), lambda namespace, uid: None, seen)  # type: ignore[arg-type]
    added = {**pod(), "metadata": {"name": "p", "namespace": "team-a", "uid": "u1", "resourceVersion": "42"}}
    watch._apply({"type": "ADDED", "object": added})
    threads[0].join(1.0)
    assert read_during == ["42"] and watch.version() == "42"
    assert "u1" in watch.held["team-a"]
