"""The Node inventory (webhook/server/inventory.py) against a loopback API server that speaks the real list
and watch protocol (tests/fake_kube_api.py): chunked watch streams, bookmarks, 410 Gone, disconnects."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fake_kube_api import FakeKubeAPI
from tests.test_clustercheck import A100, node
from tests.waiting import eventually
from webhook.server.inventory import KubeNodes, NodeInventory, find_credentials


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    fake = FakeKubeAPI().start()
    fake.put_node(node("gpu-a", {"nvidia.com/gpu": "8"}, A100))
    fake.put_node(node("gpu-b", {"nvidia.com/gpu": "4"}, A100))
    yield fake
    fake.stop()


def inventory_for(api: FakeKubeAPI, tmp_path: Path, start: bool = True, **options) -> NodeInventory:
    credentials = find_credentials(str(api.write_kubeconfig(tmp_path / "kubeconfig")))
    assert credentials.configuration is not None, credentials.source
    options = {"watch_timeout": (2, 2), "backoff": (0.05, 0.2), **options}
    inventory = NodeInventory(KubeNodes(credentials.configuration), **options)
    if start:
        inventory.start()
    return inventory


def gpus_of(inventory: NodeInventory) -> dict[str, int]:
    view = inventory.view()
    assert view is not None
    return {name: info.allocatable.get("nvidia.com/gpu", 0) for name, info in sorted(view.nodes.items())}


def test_list_then_watch_follows_adds_updates_and_deletes(api, tmp_path):
    inventory = inventory_for(api, tmp_path, start=False)
    assert inventory.view() is None  # nothing trusted before the first list
    inventory.start()
    eventually(lambda: inventory.view() is not None)
    assert gpus_of(inventory) == {"gpu-a": 8, "gpu-b": 4}
    assert api.list_requests("nodes")[0] == "GET /api/v1/nodes?limit=500"
    eventually(lambda: api.watch_requests())
    assert "resourceVersion=102" in api.watch_requests()[0] and "allowWatchBookmarks=true" in api.watch_requests()[0]

    api.put_node(node("gpu-c", {"nvidia.com/gpu": "2"}))
    eventually(lambda: "gpu-c" in gpus_of(inventory))
    api.put_node(node("gpu-a", {"nvidia.com/gpu": "16"}, A100))
    eventually(lambda: gpus_of(inventory)["gpu-a"] == 16)
    api.delete_node("gpu-b")
    eventually(lambda: "gpu-b" not in gpus_of(inventory))
    assert gpus_of(inventory) == {"gpu-a": 16, "gpu-c": 2}
    assert inventory.view().largest("nvidia.com/gpu") == (16, "gpu-a")
    inventory.stop()


def test_a_heartbeat_publishes_no_new_view(api, tmp_path):
    inventory = inventory_for(api, tmp_path)
    eventually(lambda: inventory.view() is not None)
    before = inventory.view()
    heartbeat = node("gpu-a", {"nvidia.com/gpu": "8"}, A100)
    heartbeat["status"]["conditions"] = [
        {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-01-01T00:00:00Z"}
    ]
    api.put_node(heartbeat)
    api.put_node(node("gpu-z", {}))  # a node without GPUs is kept too (it holds nothing): a new view
    eventually(lambda: inventory.view() is not before)
    after = inventory.view()
    api.put_node(node("gpu-z", {}, {"unrelated/label": "x"}))  # a label admission does not keep
    api.bookmark()
    time.sleep(0.3)
    assert inventory.view() is after
    inventory.stop()


def test_bookmarks_move_the_resource_version_the_next_watch_starts_from(api, tmp_path):
    inventory = inventory_for(api, tmp_path)
    eventually(lambda: api.watch_requests())
    api.bookmark()  # version 103
    time.sleep(0.2)
    api.disconnect()
    eventually(lambda: len(api.watch_requests()) >= 2)
    assert "resourceVersion=103" in api.watch_requests()[1]
    assert inventory.lists == 1  # resumed, not listed again
    inventory.stop()


def test_410_gone_relists_and_the_view_is_right_afterwards(api, tmp_path):
    inventory = inventory_for(api, tmp_path)
    eventually(lambda: api.watch_requests())
    api.disconnect()
    api.put_node(node("gpu-c", {"nvidia.com/gpu": "2"}))
    api.delete_node("gpu-a")
    api.compact()  # the watch resumes from a version the server no longer has: ERROR 410, then a relist
    eventually(lambda: inventory.lists == 2)
    eventually(lambda: gpus_of(inventory) == {"gpu-b": 4, "gpu-c": 2})
    inventory.stop()


def test_a_broken_watch_makes_the_view_stale_after_the_set_time(api, tmp_path):
    inventory = inventory_for(api, tmp_path, stale_after=0.5)
    eventually(lambda: inventory.state() == "current")
    api.stop()  # the API server goes away: the last view is served for stale_after, then none
    eventually(lambda: inventory.last_error != "")
    assert inventory.view() is not None
    eventually(lambda: inventory.state() == "stale")
    assert inventory.view() is None
    inventory.stop()


def test_credentials_come_from_kubeconfig_or_are_off(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    off = find_credentials(None)
    assert (off.configuration, off.source) == (
        None,
        "off: not in a cluster, and neither --kubeconfig nor $KUBECONFIG is set",
    )
    api = FakeKubeAPI()
    api._server = None
    path = tmp_path / "kubeconfig"
    path.write_text(
        '{"apiVersion": "v1", "kind": "Config", "clusters": [{"name": "c", "cluster": {"server": '
        '"http://127.0.0.1:1"}}], "users": [{"name": "u", "user": {"token": "t"}}], "contexts": '
        '[{"name": "x", "context": {"cluster": "c", "user": "u"}}], "current-context": "x"}'
    )
    monkeypatch.setenv("KUBECONFIG", str(path))
    found = find_credentials(None)
    assert found.source == f"kubeconfig {path}" and found.configuration.host == "http://127.0.0.1:1"


def test_before_the_first_list_reviews_skip_the_checks_counted_and_logged_once(caplog):
    from prometheus_client import REGISTRY

    from webhook.admission.policy.model import PolicySet
    from webhook.server.inventory import Credentials
    from webhook.server.policies import PolicyStore
    from webhook.server.state import ServerState

    class Unreachable:
        def list_page(self, token):
            raise OSError("connection refused")

        def watch(self, resource_version, timeout_s):
            raise OSError("connection refused")

    state = ServerState(PolicyStore(PolicySet()), credentials=Credentials(object(), "kubeconfig test"))
    state.inventory = NodeInventory(Unreachable())  # not started: the first list never completes
    before = REGISTRY.get_sample_value("gpu_admission_cluster_checks_skipped_total", {"reason": "listing"}) or 0
    with caplog.at_level("WARNING"):
        assert state.cluster_view() is None
        assert state.cluster_view() is None
    after = REGISTRY.get_sample_value("gpu_admission_cluster_checks_skipped_total", {"reason": "listing"})
    assert after - before == 2
    skipped = [r.getMessage() for r in caplog.records if "cluster checks skipped" in r.getMessage()]
    assert skipped == ["cluster checks skipped: the first node list has not completed"]
    assert state.readiness() == (
        True,
        {
            "policies": 0,
            "cluster": {"credentials": "kubeconfig test", "inventory": "listing", "nodes": 0},
            "ready": True,
        },
    )


def test_register_annotations_are_kept_and_a_hostile_one_stops_nothing(api, tmp_path):
    """A node whose HAMi annotation is JSON nested 100,000 deep (which raised while the snapshot was built) is
    listed as a node without registered GPUs; a node's GPUs passing from HAMi's device plugin to Volcano's,
    with the same numbers, is a change the watch publishes."""
    hostile = node("gpu-h", {"nvidia.com/gpu": "10"})
    hostile["metadata"]["annotations"] = {"hami.io/node-nvidia-register": "[" * 100_000}
    api.put_node(hostile)
    hami = node("gpu-v", {"nvidia.com/gpu": "10"})
    hami["metadata"]["annotations"] = {"hami.io/node-nvidia-register": "GPU-0,10,81920,100,NVIDIA-A100,0,true:"}
    api.put_node(hami)
    inventory = inventory_for(api, tmp_path)
    eventually(lambda: inventory.view() is not None)
    nodes = inventory.view().nodes
    assert (nodes["gpu-h"].devices, nodes["gpu-h"].registrar) == ((), "")
    assert (tuple(nodes["gpu-v"].devices), nodes["gpu-v"].registrar) == ((("NVIDIA-A100", 81920),), "hami")
    eventually(lambda: api.watch_requests())
    volcano = node("gpu-v", {"nvidia.com/gpu": "10"})  # as before: only the annotation changes
    volcano["metadata"]["annotations"] = {"volcano.sh/node-vgpu-register": "GPU-0,10,81920,NVIDIA-A100,true,hami-core:"}
    api.put_node(volcano)
    eventually(lambda: inventory.view().nodes["gpu-v"].registrar == "volcano")
    assert tuple(inventory.view().nodes["gpu-v"].devices) == (("NVIDIA-A100", 81920),)
    inventory.stop()
