"""`serve --policy-source cluster`: the GPUPolicy objects of the cluster, listed and watched, served as the set.

Each worker lists and watches the cluster-scoped GPUPolicy objects (the node inventory's protocol, inventory.py:
pages, a watch from the list's resourceVersion with bookmarks, a new list on 410, backoff), keeping each object
by name, reduced to what judging and the status need. On every change the objects are judged together
(`objects.judge_objects`, as the loader judges files) and the set they serve replaces the store's with one
assignment: a review reads `store.current` once, so it sees the old set or the new one, never a mix. A change
is served as soon as the watch brings it, by every worker of every replica. An object the loader refuses is
not served (its namespaces fall to the policy that matches next) and its lines are logged once per generation.

A worker takes no review before its first list (`wait_listed`, from gunicorn's post_worker_init): the
built-in defaults would refuse or change pods that the cluster's policies admit. Past the start wait, it
answers the probes (/readyz unready, saying why) and refuses reviews with a 503 until the list completes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from webhook.admission.policy import objects
from webhook.admission.policy.objects import JudgedPolicies, Verdict
from webhook.server import metrics
from webhook.server.inventory import KubeNodes, NamedWatch, NodeSource
from webhook.server.logs import LOGGER, log
from webhook.server.policies import PolicyStore

_log = logging.getLogger(f"{LOGGER}.policies")

POLICIES_PATH = f"/apis/{objects.GROUP}/{objects.VERSION}/{objects.PLURAL}"
KEPT_METADATA = ("name", "generation", "creationTimestamp", "uid", "resourceVersion")
LOGGED_NAMES = 50  # names in one log line, at most


def kept(obj: dict[str, Any]) -> dict[str, Any]:
    """What judging and the status writer read of a GPUPolicy: apiVersion, kind, a few metadata fields, spec and
    status (list items carry no apiVersion or kind: the API server's list does; they are GPUPolicies)."""
    found = obj.get("metadata")
    metadata = found if isinstance(found, dict) else {}
    reduced: dict[str, Any] = {
        "apiVersion": obj.get("apiVersion") or f"{objects.GROUP}/{objects.VERSION}",
        "kind": obj.get("kind") or "GPUPolicy",
        "metadata": {key: metadata[key] for key in KEPT_METADATA if key in metadata},
    }
    for key in ("spec", "status"):
        if key in obj:
            reduced[key] = obj[key]
    return reduced


def judged_part(obj: dict[str, Any]) -> tuple[Any, ...]:
    """What a judgment reads of an object: a change elsewhere (its status, its resourceVersion) changes nothing
    served, and is not judged again."""
    metadata = obj.get("metadata") or {}
    return (obj.get("apiVersion"), obj.get("kind"), metadata.get("creationTimestamp"), metadata.get("generation"),
            obj.get("spec"))  # fmt: skip


class PolicyWatch:
    """This worker's GPUPolicy watch, and the set it serves through `store`."""

    def __init__(self, configuration: Any, store: PolicyStore, *, source: NodeSource | None = None) -> None:
        self.store = store
        self.judged = JudgedPolicies(store.current, {})
        # The objects judged and their judgment, as one value: the status writer reads both of the same moment.
        self.snapshot: tuple[dict[str, dict[str, Any]], JudgedPolicies] = ({}, self.judged)
        self.watch = NamedWatch(
            source or KubeNodes(configuration, POLICIES_PATH, "GPUPolicy object"), "GPUPolicy", kept, self._changed
        )
        self._logged: dict[str, tuple[int, tuple[str, ...]]] = {}  # name -> (generation, problems) logged
        self._judging = threading.Lock()
        self._first = True  # the first judgment is logged whatever it serves
        self._judging_of: dict[str, Any] = {}  # what the last judgment read of each object (`judged_part`)
        self._lists_judged = -1  # the list count at the last judgment: a first list is judged even when empty
        self.listeners: list[Callable[[], None]] = []  # told after every new judgment (the status writer)

    def start(self) -> None:
        self.watch.start()

    def stop(self) -> None:
        self.watch.stop()

    def objects(self) -> list[dict[str, Any]]:
        """The objects judged last (a GPUPolicy review is judged among them): a copy the watch never changes."""
        return list(self.snapshot[0].values())

    def wait_listed(self, timeout: float, tick: Callable[[], None] = lambda: None) -> bool:
        """Wait (calling `tick` every half second: gunicorn's heartbeat) until the first list has completed, or
        `timeout` passes; whether it has."""
        deadline = time.monotonic() + timeout
        while not self.watch.listed.is_set() and time.monotonic() < deadline:
            tick()
            self.watch.listed.wait(min(0.5, max(0.0, deadline - time.monotonic())))
        return self.watch.listed.is_set()

    def not_ready(self) -> str:
        """Why this worker serves no policies yet (for /readyz and a refused review), or ""."""
        if self.watch.listed.is_set():
            return ""
        why = self.watch.list_error or "under way"
        if "HTTP 404" in why:
            why += f" (is the CustomResourceDefinition {objects.RESOURCE} installed?)"
        return f"policies: GPUPolicy list not yet complete: {why}"

    def not_served(self) -> dict[str, str]:
        """The objects not served, with the first of their problems (for /readyz)."""
        return {name: verdict.problems[0] for name, verdict in sorted(self.judged.verdicts.items()) if verdict.problems}

    def _changed(self) -> None:
        """Judge every object held and serve the set they make (the watch's thread)."""
        with self._judging:
            held = dict(self.watch.items)
            judging = {name: judged_part(obj) for name, obj in held.items()}
            if judging == self._judging_of and self.watch.lists == self._lists_judged:
                # Only a status or a resourceVersion changed (the status writer's own writes): nothing to judge.
                self.snapshot = (held, self.judged)
                self._tell()
                return
            self._judging_of, self._lists_judged = judging, self.watch.lists
            judged = objects.judge_objects(held.values())
            before = self.judged
            self.store.replace(judged.policies)  # the one assignment a review can observe
            self.judged, self.snapshot = judged, (held, judged)
            self._report(before, judged)
        self._tell()

    def _tell(self) -> None:
        for listener in list(self.listeners):
            try:
                listener()
            except Exception:  # a listener's failure is its own: the set is served
                _log.exception("policy listener failed")

    def _report(self, before: JudgedPolicies, after: JudgedPolicies) -> None:
        """Log what changed in what is served, and each refused object's lines once per generation."""
        old = {p.name: p for p in before.policies.policies}
        new = {p.name: p for p in after.policies.policies}
        added = sorted(set(new) - set(old))
        removed = sorted(set(old) - set(new))
        changed = sorted(name for name in set(old) & set(new) if old[name] != new[name])
        first, self._first = self._first, False
        if added or removed or changed or first:
            metrics.count_reload(ok=True)
            parts = [f"{len(new)} policies served"]
            for label, names in (("added", added), ("changed", changed), ("removed", removed)):
                if names:
                    parts.append(f"{label} {', '.join(names[:LOGGED_NAMES])}")
            log(_log, logging.INFO, "GPUPolicy objects: " + "; ".join(parts), event="policy-reload", result="ok",
                source="cluster", policies=sorted(new)[:LOGGED_NAMES], added=added[:LOGGED_NAMES],
                changed=changed[:LOGGED_NAMES], removed=removed[:LOGGED_NAMES])  # fmt: skip
        for verdict in after.verdicts.values():
            self._report_verdict(verdict)
        for name in set(self._logged) - set(after.verdicts):
            del self._logged[name]

    def _report_verdict(self, verdict: Verdict) -> None:
        said = (verdict.generation, verdict.problems)
        before = self._logged.get(verdict.name)
        if before == said:
            return
        self._logged[verdict.name] = said
        if verdict.problems:
            metrics.count_reload(ok=False)
            log(_log, logging.ERROR,
                f"GPUPolicy {verdict.name} (generation {verdict.generation}) not served: "
                + "; ".join(verdict.problems),
                event="policy-reload", result="error", source="cluster", policy=verdict.name,
                generation=verdict.generation, problems=list(verdict.problems[:20]))  # fmt: skip
        elif before is not None and before[1]:
            log(_log, logging.INFO, f"GPUPolicy {verdict.name} (generation {verdict.generation}) served again",
                event="policy-reload", result="ok", source="cluster", policy=verdict.name,
                generation=verdict.generation)  # fmt: skip
