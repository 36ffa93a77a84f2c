"""One worker's GPUPolicy watch (webhook/server/policy_watch.py) driven by hand: what it serves, and what it
judges again, without a server or threads."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from webhook.admission.policy.model import PolicySet
from webhook.admission.review import make_review
from webhook.server import policy_watch
from webhook.server.inventory import APIError
from webhook.server.policies import PolicyStore
from webhook.server.policy_watch import PolicyWatch


class Listed:
    """A source whose list is `items` (or fails with `error`); no watch is read here."""

    def __init__(self, items: list[dict[str, Any]], error: str = "") -> None:
        self.items, self.error = items, error

    def list_page(self, token: str | None) -> dict[str, Any]:
        if self.error:
            raise APIError(self.error)
        return {"metadata": {"resourceVersion": "7"}, "items": self.items}

    def watch(self, resource_version: str, timeout_s: int) -> Iterator[dict[str, Any]]:
        return iter(())


def gpu_policy(name: str, namespaces: list[str], generation: int = 1, **spec: Any) -> dict[str, Any]:
    metadata = {"name": name, "generation": generation, "creationTimestamp": "2026-01-01T00:00:00Z",
                "resourceVersion": str(generation)}  # fmt: skip
    return {"metadata": metadata, "spec": {"namespaces": namespaces, **spec}}  # as a list's items: no kind


def listed(*items: dict[str, Any]) -> PolicyWatch:
    watch = PolicyWatch(None, PolicyStore(PolicySet()), source=Listed(list(items)))
    watch.watch._list()
    return watch


def test_before_its_first_list_a_worker_serves_nothing_and_says_why():
    watch = PolicyWatch(None, PolicyStore(PolicySet()), source=Listed([], "cannot reach the API server: refused"))
    assert watch.not_ready() == "policies: GPUPolicy list not yet complete: under way"
    with pytest.raises(APIError):
        watch.watch._list()
    watch.watch._broken("cannot reach the API server: refused")
    assert watch.not_ready() == "policies: GPUPolicy list not yet complete: cannot reach the API server: refused"
    assert not watch.wait_listed(0.0)


def test_a_missing_custom_resource_definition_is_named():
    watch = PolicyWatch(None, PolicyStore(PolicySet()), source=Listed([]))
    watch.watch._broken("listing GPUPolicy objects: HTTP 404 the server could not find the requested resource")
    assert watch.not_ready().endswith("(is the CustomResourceDefinition gpupolicies.gpu-admission.io installed?)")


def test_the_listed_objects_are_served_and_the_refused_ones_reported():
    watch = listed(gpu_policy("teams", ["team-*"], enforcement="warn"), gpu_policy("bad", ["x"], sharng={}))
    assert watch.not_ready() == "" and watch.wait_listed(0.0)
    assert [p.name for p in watch.store.current.policies] == ["teams"]
    assert watch.store.current.for_namespace("team-a").name == "teams"
    assert watch.not_served() == {"bad": 'gpupolicy/bad spec.sharng: unknown field (did you mean "sharing"?)'}


def test_an_edit_is_judged_and_served_a_status_write_is_not_judged_again(monkeypatch):
    watch = listed(gpu_policy("teams", ["team-*"]))
    judged = []
    real = policy_watch.objects.judge_objects
    monkeypatch.setattr(policy_watch.objects, "judge_objects", lambda held: judged.append(1) or real(held))
    before = watch.store.current

    with_status = {**gpu_policy("teams", ["team-*"]), "status": {"observedGeneration": 1}}
    with_status["metadata"]["resourceVersion"] = "8"
    watch.watch._apply({"type": "MODIFIED", "object": with_status})
    assert judged == [] and watch.store.current is before  # nothing it serves changed
    assert watch.snapshot[0]["teams"]["status"] == {"observedGeneration": 1}  # the status writer sees it

    watch.watch._apply({"type": "MODIFIED", "object": gpu_policy("teams", ["team-*"], 2, enforcement="warn")})
    assert judged == [1] and watch.store.current.for_namespace("team-a").enforcement.value == "warn"

    watch.watch._apply({"type": "DELETED", "object": gpu_policy("teams", ["team-*"], 2)})
    assert watch.store.current.policies == () and watch.objects() == []


def test_the_engine_never_sees_a_gpupolicy():
    """A GPUPolicy review is the loader's, at either webhook: an engine that fails on anything is never called."""
    from webhook.server.app import create_app
    from webhook.server.state import ServerState

    def engine(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the engine was called")

    app = create_app(ServerState(PolicyStore(PolicySet()), evaluate=engine)).test_client()
    policy = {"apiVersion": "gpu-admission.io/v1", "kind": "GPUPolicy", "metadata": {"name": "p"},
              "spec": {"namespaces": ["a"]}}  # fmt: skip
    for path in ("/mutate", "/validate"):
        for operation in ("CREATE", "UPDATE", "DELETE"):
            sent = make_review(policy, namespace="", operation=operation)  # type: ignore[arg-type]
            answer = app.post(path, json=sent)
            assert answer.status_code == 200 and answer.get_json()["response"]["allowed"] is True
