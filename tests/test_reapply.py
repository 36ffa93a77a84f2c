"""Re-applies (webhook/admission/phases/reapply.py): the same file applied again changes nothing; a changed request
gets the new decision; an edit of the webhook's output by hand gets a clear line.

The objects a second apply sends are made here by small models of the two apply modes, written from the
upstream code (not from memory):
- client-side `kubectl apply`: k8s.io/apimachinery pkg/util/strategicpatch, CreateThreeWayMergePatch (the
  patch is diffMaps(current, modified) without deletions, plus diffMaps(original, modified) with deletions
  only; lists with a merge key are diffed by key (diffListsOfMaps) with a `$setElementOrder` list when their
  contents or order differ), applied by the API server with StrategicMergeMapPatch (mergeMap, mergeSlice,
  mergePatchIntoOriginal: items merged by key, then ordered by normalizeElementOrder/mergeSortedSlice: the
  patch's items in `$setElementOrder` order, the live object's other items put back by their live order);
- server-side apply: sigs.k8s.io/structured-merge-diff merge.Updater.Apply (live.Merge(config), then prune
  what the applier applied last time and no longer applies) with typed/merge.go visitListItems for the order
  of associative lists. The API server runs field management before mutating admission
  (k8s.io/apiserver pkg/endpoints/handlers/patch.go: applyPatch, then applyAdmission; create.go likewise), so
  the fields only the webhook wrote belong to no manager, and the applier's re-apply keeps them.
In both, the schema's merge lists are the pod spec's `containers` and `initContainers` and a container's `env`
(merge key `name`); node affinity's terms and expressions are atomic. The API server decodes quantities before
admission, so the webhook sees `250m` where the file says 0.25.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import evanphx
from tests.conftest import ROOT
from tests.test_engine_properties import SETTINGS as _ENGINE_SETTINGS
from tests.test_engine_properties import policies
from tests.test_server import review
from webhook.admission.engine import evaluate
from webhook.admission.phases.reapply import RECORD, env_ops
from webhook.admission.policy.loader import parse_policy_sources
from webhook.admission.policy.model import PolicySet

NS = "ns"
MERGE_LISTS = {"containers", "initContainers", "env"}  # patchStrategy merge, patchMergeKey name (core/v1 types)
POLICIES = parse_policy_sources({"p.yaml": (ROOT / "tests" / "fixtures" / "reapply" / "policies.yaml").read_text()})
# Three times the engine's count: about half the generated objects are denied on their first apply (nothing to
# re-apply), and an example takes a few milliseconds.
SETTINGS = settings(
    _ENGINE_SETTINGS,
    max_examples=3 * _ENGINE_SETTINGS.max_examples,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


# --- The API server's decoding of quantities ---------------------------------------------------------------

# (as written in a file, as the API server stores and sends it): resource.Quantity's canonical form.
QUANTITIES = [(0.25, "250m"), (0.125, "125m"), (0.5, "500m"), (1, "1"), ("1", "1"), (2, "2"), ("250m", "250m")]
CANONICAL = {json.dumps(written): stored for written, stored in QUANTITIES}


def decoded(obj: Any, key: str | None = None) -> Any:
    """`obj` as the API server holds it: the quantities in resource maps in their canonical form."""
    if type(obj) is dict:
        if key in ("requests", "limits"):
            return {k: CANONICAL.get(json.dumps(v), v) for k, v in obj.items()}
        return {k: decoded(v, k) for k, v in obj.items()}
    if type(obj) is list:
        return [decoded(v) for v in obj]
    return obj


# --- Client-side apply: a three-way strategic merge patch ----------------------------------------------------


def _merge_key(item: Any) -> Any:
    return item.get("name") if type(item) is dict else None


def smp_diff(original: dict, modified: dict, *, ignore_deletions: bool, ignore_changes: bool) -> dict:
    """strategicpatch.diffMaps, for the fields these objects have."""
    patch: dict[str, Any] = {}
    for key, new in modified.items():
        if key not in original or type(original[key]) is not type(new):
            if not ignore_changes:
                patch[key] = new
        elif type(new) is dict:
            sub = smp_diff(original[key], new, ignore_deletions=ignore_deletions, ignore_changes=ignore_changes)
            if sub:
                patch[key] = sub
        elif type(new) is list and key in MERGE_LISTS:
            items, order = _diff_list(original[key], new, ignore_deletions, ignore_changes)
            if items:
                patch[key] = items
            if order:
                patch[f"$setElementOrder/{key}"] = order
        elif original[key] != new and not ignore_changes:
            patch[key] = new
    if not ignore_deletions:
        for key in original:
            if key not in modified:
                patch[key] = None  # updatePatchIfMissing
    return patch


def _diff_list(original: list, modified: list, ignore_deletions: bool, ignore_changes: bool) -> tuple[list, list]:
    """diffLists for a list of maps with merge key `name`: (patch items, `$setElementOrder` list)."""
    if not original:
        return ([] if ignore_changes else list(modified)), []
    by_name = {_merge_key(item): item for item in original}
    wanted = {_merge_key(item) for item in modified}
    items: list[Any] = []
    for item in sorted(modified, key=lambda i: str(_merge_key(i))):
        before = by_name.get(_merge_key(item))
        if before is None:
            if not ignore_changes:
                items.append(item)
        else:
            sub = smp_diff(before, item, ignore_deletions=ignore_deletions, ignore_changes=ignore_changes)
            if sub:
                items.append({**sub, "name": _merge_key(item)})
    order_of = {_merge_key(item): i for i, item in enumerate(modified)}
    items.sort(key=lambda i: order_of[_merge_key(i)])  # normalizeSliceOrder(patchList, modified)
    if not ignore_deletions:
        items += [{"$patch": "delete", "name": n} for n in sorted(map(str, by_name)) if n not in wanted]
    same_order = [_merge_key(i) for i in original] == [_merge_key(i) for i in modified]
    order = []
    if (not ignore_changes and (items or not same_order)) or (not ignore_deletions and items):
        order = [{"name": _merge_key(item)} for item in modified]
    return items, order


def smp_apply(original: dict, patch: dict) -> dict:
    """strategicpatch.mergeMap (StrategicMergeMapPatch), for the fields these objects have."""
    result = copy.deepcopy(original)
    orders = {k.split("/", 1)[1]: v for k, v in patch.items() if k.startswith("$setElementOrder/")}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
        elif key not in result or type(result[key]) is not type(value):
            result[key] = _without_directives(value)
        elif type(value) is dict:
            result[key] = smp_apply(result[key], value)
        elif type(value) is list and key in MERGE_LISTS:
            result[key] = _merge_list(result[key], value, orders.get(key))
        else:
            result[key] = value
    for key, order in orders.items():  # mergePatchIntoOriginal: a list whose order alone is set
        if key not in patch and type(result.get(key)) is list:
            result[key] = _normalize(result[key], order, result[key])
    return result


def _without_directives(value: Any) -> Any:
    if type(value) is list:
        return [_without_directives(v) for v in value if not (type(v) is dict and "$patch" in v)]
    if type(value) is dict:
        return {k: _without_directives(v) for k, v in value.items() if not k.startswith("$")}
    return value


def _merge_list(live: list, patch: list, order: list | None) -> list:
    """mergeSlice: deletions, then each item merged into the live one with its name or appended; ordered."""
    deleted = {_merge_key(i) for i in patch if "$patch" in i}
    merged = [copy.deepcopy(i) for i in live if _merge_key(i) not in deleted]
    items = [i for i in patch if "$patch" not in i]
    for item in items:
        index = next((n for n, m in enumerate(merged) if _merge_key(m) == _merge_key(item)), None)
        if index is None:
            merged.append(_without_directives(item))
        else:
            merged[index] = smp_apply(merged[index], item)
    merged = _normalize(merged, items, live)
    return _normalize(merged, order, live) if order is not None else merged


def _normalize(merged: list, patch_order: list, server_order: list) -> list:
    """normalizeElementOrder: the patch's items in its order, the others in the live order, then
    mergeSortedSlice puts each live-only item back before the first patch item that followed it live."""
    names = [_merge_key(i) for i in patch_order]
    live = [_merge_key(i) for i in server_order]
    patch_items = sorted((i for i in merged if _merge_key(i) in names), key=lambda i: names.index(_merge_key(i)))
    server_only = [i for i in merged if _merge_key(i) not in names]
    server_only.sort(key=lambda i: live.index(_merge_key(i)) if _merge_key(i) in live else len(live))
    out, left, right = [], 0, 0
    while left < len(server_only) or right < len(patch_items):
        if left >= len(server_only):
            out.append(patch_items[right])
            right += 1
        elif right >= len(patch_items):
            out.append(server_only[left])
            left += 1
        else:
            a, b = _merge_key(server_only[left]), _merge_key(patch_items[right])
            if a in live and b in live and live.index(a) < live.index(b):
                out.append(server_only[left])
                left += 1
            else:
                out.append(patch_items[right])
                right += 1
    return out


LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def with_last_applied(written: dict) -> dict:
    """What kubectl sends: the file, with the file itself in the last-applied annotation."""
    sent = copy.deepcopy(written)
    annotations = sent["metadata"].setdefault("annotations", {})
    annotations[LAST_APPLIED] = json.dumps(written, sort_keys=True)
    return sent


def client_side_apply(live: dict, written: dict) -> dict:
    """`kubectl apply` of `written` onto `live` (created by `kubectl apply` of a file): the object that
    reaches admission."""
    original = json.loads(live["metadata"]["annotations"][LAST_APPLIED])
    original = with_last_applied(original)
    modified = with_last_applied(written)
    deletions = smp_diff(original, modified, ignore_deletions=False, ignore_changes=True)
    delta = smp_diff(live, modified, ignore_deletions=True, ignore_changes=False)
    return decoded(smp_apply(smp_apply(live, deletions), delta))


# --- Server-side apply: structured-merge-diff ----------------------------------------------------------------


def ssa_merge(live: Any, config: Any, key: str | None = None) -> Any:
    """live.Merge(config): maps and structs merged field by field, associative lists by key, the rest (atomic
    lists such as node selector terms, scalars) the applier's."""
    if type(live) is dict and type(config) is dict:
        merged = dict(live)
        for k, v in config.items():
            merged[k] = ssa_merge(live[k], v, k) if k in live else v
        return merged
    if type(live) is list and type(config) is list and key in MERGE_LISTS:
        return _visit_list_items(live, config)
    return config


def _visit_list_items(lhs: list, rhs: list) -> list:
    """typed/merge.go visitListItems: live-only items stay where they are; shared and applied items follow the
    applied order."""
    lnames, rnames = [_merge_key(i) for i in lhs], [_merge_key(i) for i in rhs]
    shared = [n for n in rnames if n in lnames]
    next_shared = shared.pop(0) if shared else None
    merged_rhs: set[Any] = set()
    out: list[Any] = []
    li = ri = 0
    while li < len(lhs) or ri < len(rhs):
        if li < len(lhs) and ri < len(rhs):
            if lnames[li] == rnames[ri]:
                merged_rhs.add(lnames[li])
                out.append(ssa_merge(lhs[li], rhs[ri]))
                li, ri = li + 1, ri + 1
                next_shared = shared.pop(0) if shared else None
                continue
            if lnames[li] in rnames and next_shared is not None and next_shared != lnames[li]:
                li += 1
                continue
        if li < len(lhs):
            if lnames[li] not in rnames:
                out.append(lhs[li])
                li += 1
                continue
            if lnames[li] in merged_rhs:
                li += 1
        if ri < len(rhs):
            name = rnames[ri]
            merged_rhs.add(name)
            live_item = lhs[lnames.index(name)] if name in lnames else None
            out.append(ssa_merge(live_item, rhs[ri]) if live_item is not None else rhs[ri])
            ri += 1
            if next_shared is not None and next_shared == name:
                next_shared = shared.pop(0) if shared else None
    return out


def server_side_apply(live: dict, written: dict) -> dict:
    """`kubectl apply --server-side` of the same `written` again: nothing to prune (the same fields applied)."""
    return decoded(ssa_merge(live, written))


# --- Objects as users write them -------------------------------------------------------------------------------

GPU_RESOURCES = [
    "nvidia.com/gpu",
    "nvidia.com/gpu",
    "nvidia.com/gpu",
    "nvidia.com/gpu.shared",
    "nvidia.com/mig-1g.10gb",
]
ENV = [
    {"name": "API_TOKEN", "value": "s3cret"},
    {"name": "XLA_PYTHON_CLIENT_MEM_FRACTION", "value": "0.2"},
    {"name": "PYTORCH_CUDA_ALLOC_CONF", "value": "expandable_segments:True"},
    {"name": "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
    {"name": "HOME", "value": "/home/u"},
]


# How inference engines are started (webhook/admission/phases/engines.py): mutation appends their memory flag to `args`,
# which both apply modes treat as one atomic list.
ENGINE_STARTS = [
    {"image": "vllm/vllm-openai:v0.9.1", "args": ["--model", "m"]},
    {"image": "vllm/vllm-openai:v0.9.1"},  # no args at all: mutation adds the list whole
    {"command": ["python3", "-m", "sglang.launch_server"], "args": ["--model-path", "m"]},
    {"command": ["trtllm-serve", "m"]},
    {"command": ["vllm", "serve", "m"], "args": ["--gpu-memory-utilization", "0.1"]},  # the user's, kept
    {"command": ["vllm", "serve", "m"], "args": ["--gpu-memory-utilization=0.9"]},  # above any share
]


@st.composite
def written_containers(draw: Any, prefix: str) -> list[dict]:
    names = draw(st.lists(st.integers(0, 5), min_size=1, max_size=2, unique=True))
    found = []
    for n in names:
        body: dict[str, Any] = {"name": f"{prefix}{n}", "image": "img"}
        requests: dict[str, Any] = {}
        if draw(st.booleans()):
            requests["cpu"] = "1"
        limits: dict[str, Any] = {}
        if draw(st.integers(0, 4)):  # most containers ask for a GPU
            resource = draw(st.sampled_from(GPU_RESOURCES))
            value = draw(st.sampled_from([q for q, _ in QUANTITIES]))
            where = draw(st.sampled_from(["requests", "requests", "limits", "both"]))
            if where in ("requests", "both"):
                requests[resource] = value
            if where in ("limits", "both"):
                limits[resource] = value
        resources = {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
        if resources:
            body["resources"] = resources
        if draw(st.booleans()):
            body["env"] = draw(st.lists(st.sampled_from(ENV), max_size=3, unique_by=lambda e: e["name"]))
        if not draw(st.integers(0, 2)):
            body.update(copy.deepcopy(draw(st.sampled_from(ENGINE_STARTS))))
        found.append(body)
    return found


@st.composite
def written_workloads(draw: Any) -> dict:
    spec: dict[str, Any] = {"containers": draw(written_containers("app"))}
    if draw(st.booleans()):
        spec["initContainers"] = draw(written_containers("init"))
    if draw(st.booleans()):  # a user's own required node affinity: steering adds to its terms
        term = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
        spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
        }
    kind = draw(st.sampled_from(["Deployment", "Job", "StatefulSet", "CronJob"]))
    template = {"metadata": {"labels": {"app": "x"}}, "spec": spec}
    metadata: dict[str, Any] = {"name": "w", "namespace": NS}
    if draw(st.booleans()):
        metadata["annotations"] = {"team": "ml"}
    body = (
        {"template": template}
        if kind != "CronJob"
        else {"schedule": "@daily", "jobTemplate": {"spec": {"template": template}}}
    )
    group = {"Deployment": "apps/v1", "StatefulSet": "apps/v1", "Job": "batch/v1", "CronJob": "batch/v1"}[kind]
    return {"apiVersion": group, "kind": kind, "metadata": metadata, "spec": body}


def admit(obj: dict, policies: PolicySet, old: dict | None = None) -> dict:
    """What the API server stores: the webhook's patch applied (as evanphx/json-patch applies it)."""
    decision = evaluate(obj, obj["metadata"]["namespace"], policies, old)
    assert decision.allowed, decision.violations
    return evanphx.apply(obj, decision.patch)


# --- The property -------------------------------------------------------------------------------------------


@SETTINGS
@given(written_workloads(), policies(), st.sampled_from(["client", "server"]))
def test_a_second_apply_of_the_same_file_gives_the_stored_object_again(written, pol, mode):
    """For every object X the webhook admits and each apply mode: the object a second apply of X sends (M) is
    admitted, and the patch turns it into the stored mutate(X) exactly: resources, env (and its order), an
    engine's args, affinity, annotations. So no rollout, and a Job's immutable template is untouched."""
    policies_ = PolicySet((pol,))
    sent = decoded(with_last_applied(written) if mode == "client" else written)
    first = evaluate(sent, NS, policies_)
    if not first.allowed:
        return
    stored = evanphx.apply(sent, first.patch)
    again = client_side_apply(stored, written) if mode == "client" else server_side_apply(stored, written)
    second = evaluate(again, NS, policies_, stored)
    assert second.allowed, second.violations
    assert second.skipped or second.violations == first.violations  # (skipped: the pod spec came back as it was)
    assert evanphx.apply(again, second.patch) == stored
    assert second.mutated == stored


# --- The cases measured on a real API server, through the engine -------------------------------------------


def deployment(gpu: Any, env: list | None = None, namespace: str = "ts-a", limits: dict | None = None) -> dict:
    container: dict[str, Any] = {"name": "main", "image": "img", "resources": {"requests": {"nvidia.com/gpu": gpu}}}
    if limits:
        container["resources"]["limits"] = limits
    if env is not None:
        container["env"] = env
    template = {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [container]}}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "w", "namespace": namespace},
        "spec": {"replicas": 1, "template": template},
    }


def main_container(obj: dict) -> dict:
    return obj["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("mode", ["client", "server"])
@pytest.mark.parametrize(
    ("namespace", "gpu", "resources"),
    [
        # Kept-name time-slicing: the second apply sent requests 250m beside the webhook's limit 1.
        ("ts-a", 0.25, {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}),
        # Renamed MPS: 125m came back and was denied as a fraction.
        ("mps-a", 0.125, {"requests": {"nvidia.com/gpu.shared": "1"}, "limits": {"nvidia.com/gpu.shared": "1"}}),
        # Renamed MPS: nvidia.com/gpu 1 came back beside nvidia.com/gpu.shared 1, and every apply was a rollout.
        ("mps-a", 1, {"requests": {"nvidia.com/gpu.shared": "1"}, "limits": {"nvidia.com/gpu.shared": "1"}}),
    ],
)
def test_the_measured_cases_are_stable(mode, namespace, gpu, resources):
    written = deployment(gpu, [{"name": "API_TOKEN", "value": "s3cret"}], namespace)
    sent = decoded(with_last_applied(written) if mode == "client" else written)
    stored = admit(sent, POLICIES)
    assert main_container(stored)["resources"] == resources
    again = client_side_apply(stored, written) if mode == "client" else server_side_apply(stored, written)
    assert main_container(again)["resources"] != resources  # what the API server sends the webhook
    decision = evaluate(again, namespace, POLICIES, stored)
    assert (decision.allowed, decision.violations) == (True, [])
    assert evanphx.apply(again, decision.patch) == stored
    assert "s3cret" not in json.dumps(decision.patch)


ACK_POLICIES = parse_policy_sources({"a.yaml": (ROOT / "examples" / "policies" / "memory-ack.yaml").read_text()})
ACK_SHARED = [{"key": "ack.node.gpu.schedule", "operator": "In", "values": ["cgpu", "core_mem", "mps"]},
              {"key": "ack.node.gpu.placement", "operator": "In", "values": ["spread"]}]  # fmt: skip
ACK_EXCLUSIVE = [{"key": "ack.node.gpu.schedule", "operator": "NotIn", "values": ["cgpu", "core_mem", "mps", "share"]}]


@pytest.mark.parametrize("mode", ["client", "server"])
@pytest.mark.parametrize(
    ("gpu", "resources", "expressions"),
    [
        # 0.25 of an A10's 24 GiB: 6 GiB on a pool that caps memory, spread
        (0.25, {"requests": {"aliyun.com/gpu-mem": "6"}, "limits": {"aliyun.com/gpu-mem": "6"}}, ACK_SHARED),
        # whole GPUs stay as written, on ACK's exclusive pool
        (2, {"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}}, ACK_EXCLUSIVE),
    ],
    ids=["share", "whole"],
)
def test_acks_steering_is_stable_on_a_re_apply(mode, gpu, resources, expressions):
    """The node affinity that the webhook adds (the file has none) comes back on a second apply: nothing changes."""
    written = deployment(gpu, namespace="ack-notebooks")
    sent = decoded(with_last_applied(written) if mode == "client" else written)
    stored = admit(sent, ACK_POLICIES)
    assert main_container(stored)["resources"] == resources
    assert stored["spec"]["template"]["spec"]["affinity"] == {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": expressions}]},
    }}  # fmt: skip
    again = client_side_apply(stored, written) if mode == "client" else server_side_apply(stored, written)
    decision = evaluate(again, "ack-notebooks", ACK_POLICIES, stored)
    assert (decision.allowed, decision.violations) == (True, [])
    assert evanphx.apply(again, decision.patch) == stored


def test_a_changed_request_gets_the_new_decision():
    """0.25 -> 0.125 in the file: a new memory fraction; 0.25 -> 2: denied as 2 would be on a first apply."""
    stored = admit(decoded(with_last_applied(deployment(0.25))), POLICIES)
    changed = client_side_apply(stored, deployment(0.125))
    result = admit(changed, POLICIES, stored)
    env = {e["name"]: e.get("value") for e in main_container(result)["env"]}
    assert env["GPU_ADMISSION_MEMORY_FRACTION"] == "0.125"
    assert main_container(result)["resources"] == {
        "requests": {"nvidia.com/gpu": "1"},
        "limits": {"nvidia.com/gpu": "1"},
    }
    assert json.loads(result["metadata"]["annotations"][RECORD])["containers/main"]["u"] == {
        "requests": {"nvidia.com/gpu": "125m"}
    }
    more = client_side_apply(stored, deployment(2))
    first_time = evaluate(decoded(deployment(2)), "ts-a", POLICIES)
    decision = evaluate(more, "ts-a", POLICIES, stored)
    assert (decision.allowed, decision.violations) == (False, first_time.violations)


def engine_deployment(args: list[str] | None, namespace: str = "ts-a") -> dict:
    obj = deployment(1, namespace=namespace)
    body = main_container(obj)
    body["image"] = "vllm/vllm-openai:v0.9.1"
    if args is not None:
        body["args"] = args
    return obj


@pytest.mark.parametrize("mode", ["client", "server"])
@pytest.mark.parametrize("args", [["--model", "m"], None])
def test_an_engines_added_flag_is_stable_on_a_re_apply(mode, args):
    """The flag mutation appended is recorded (`a`), dropped from the input worked out again, and appended
    again: the re-apply's patch gives the stored object, with the flag once."""
    written = engine_deployment(args)
    sent = decoded(with_last_applied(written) if mode == "client" else written)
    stored = admit(sent, POLICIES)
    assert main_container(stored)["args"] == [*(args or []), "--gpu-memory-utilization=0.23"]
    assert json.loads(stored["metadata"]["annotations"][RECORD])["containers/main"]["a"] == [
        "--gpu-memory-utilization=0.23"
    ]
    again = client_side_apply(stored, written) if mode == "client" else server_side_apply(stored, written)
    decision = evaluate(again, "ts-a", POLICIES, stored)
    assert decision.allowed, decision.violations
    assert evanphx.apply(again, decision.patch) == stored
    assert evaluate(stored, "ts-a", POLICIES, stored).patch == []  # mutate(mutate(x)) == mutate(x)


@pytest.mark.parametrize("mode", ["client", "server"])
def test_an_engine_flag_written_into_the_file_later_is_the_users(mode):
    """The file gains its own --gpu-memory-utilization: args come as the file has them, the webhook's flag is
    gone from them, and nothing is added; above the share it is denied with the argument to write."""
    first = engine_deployment(["--model", "m"])
    sent = decoded(with_last_applied(first) if mode == "client" else first)
    stored = admit(sent, POLICIES)
    for value, allowed in (("0.2", True), ("0.9", False)):
        changed = engine_deployment(["--model", "m", "--gpu-memory-utilization", value])
        again = client_side_apply(stored, changed) if mode == "client" else server_side_apply(stored, changed)
        decision = evaluate(again, "ts-a", POLICIES, stored)
        assert decision.allowed is allowed
        assert main_container(decision.mutated)["args"] == ["--model", "m", "--gpu-memory-utilization", value]
        if not allowed:
            assert decision.violations == [
                'container "main": --gpu-memory-utilization 0.9 lets vLLM take 0.9 of the GPU\'s memory, but this '
                'container\'s share is 1/4 (time-slicing, policy "kept-name-time-slicing"): write '
                "--gpu-memory-utilization=0.23 instead, or remove it and the webhook adds it"
            ]


def test_limits_added_to_the_file_are_the_users():
    """The user now writes the limit too (0.25 and 0.25): taken as written, not as an edit of the webhook's."""
    stored = admit(decoded(with_last_applied(deployment(0.25))), POLICIES)
    changed = client_side_apply(stored, deployment(0.25, limits={"nvidia.com/gpu": 0.25}))
    result = admit(changed, POLICIES, stored)
    assert main_container(result)["resources"] == main_container(stored)["resources"]


def test_an_edit_of_the_webhooks_output_by_hand_is_refused_with_a_line():
    """`kubectl edit` of the limit the webhook set, while the request is still the webhook's output."""
    stored = admit(decoded(deployment(0.25)), POLICIES)
    edited = copy.deepcopy(stored)
    main_container(edited)["resources"]["limits"]["nvidia.com/gpu"] = "2"
    decision = evaluate(edited, "ts-a", POLICIES, stored)
    assert decision.allowed is False
    assert decision.violations[0] == (
        'container "main": limits nvidia.com/gpu "2" edits what gpu-admission set ("1", from requests '
        'nvidia.com/gpu "250m" as written), and the webhook makes its output again from the request on every '
        "update: change the request as written instead"
    )


def test_objects_without_a_record_are_taken_as_written():
    """Objects admitted before the record existed: judged as they stand, as before (the second apply of a
    kept-name 0.25 is still refused; once re-created or changed, the record is there)."""
    stored = admit(decoded(deployment(0.25)), POLICIES)
    del stored["metadata"]["annotations"][RECORD]
    again = client_side_apply(with_last_applied_on(stored, deployment(0.25)), deployment(0.25))
    decision = evaluate(again, "ts-a", POLICIES, stored)
    assert decision.allowed is False


def with_last_applied_on(stored: dict, written: dict) -> dict:
    stored = copy.deepcopy(stored)
    stored["metadata"]["annotations"][LAST_APPLIED] = json.dumps(written, sort_keys=True)
    return stored


def test_a_forged_record_changes_what_is_mutated_never_what_passes():
    """A record that claims the user wrote 0.125 where the object asks for 2 whole GPUs: the object that
    results is validated as always."""
    stored = admit(decoded(deployment(0.25)), POLICIES)
    forged = copy.deepcopy(stored)
    main_container(forged)["resources"] = {"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}}
    record = {
        "containers/main": {"u": {"requests": {"nvidia.com/gpu": "125m"}}, "s": {"limits": {"nvidia.com/gpu": "2"}}}
    }
    forged["metadata"]["annotations"][RECORD] = json.dumps(record)
    decision = evaluate(forged, "ts-a", POLICIES, stored)
    assert decision.allowed is False
    assert any("nvidia.com/gpu" in line and "2" in line for line in decision.violations)


@pytest.mark.parametrize(
    "text", ["not json", "[1]", '{"containers/main": 5}', "[" * 30000 + "]" * 30000, '{"containers/main": {"u": 1}}']
)
def test_a_record_that_is_not_one_is_ignored(text):
    """Whatever a client writes into the annotation, the review is judged, never a crash."""
    stored = admit(decoded(deployment(0.25)), POLICIES)
    stored["metadata"]["annotations"][RECORD] = text
    decision = evaluate(stored, "ts-a", POLICIES)
    assert (decision.allowed, decision.patch, decision.violations) == (True, [], [])  # taken as written


# --- The env patch -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "ops"),
    [
        ([{"name": "A"}], [{"name": "A"}, {"name": "B"}], [{"op": "add", "path": "/c/env/-", "value": {"name": "B"}}]),
        (None, [{"name": "B"}], [{"op": "add", "path": "/c/env", "value": [{"name": "B"}]}]),
        (
            [{"name": "P", "value": "x"}, {"name": "A"}],
            [{"name": "P", "value": "x,y"}, {"name": "A"}, {"name": "B"}],
            [
                {"op": "replace", "path": "/c/env/0", "value": {"name": "P", "value": "x,y"}},
                {"op": "add", "path": "/c/env/-", "value": {"name": "B"}},
            ],
        ),
        (
            [{"name": "A"}, {"name": "H"}, {"name": "B"}],
            [{"name": "A"}, {"name": "B"}, {"name": "H"}],
            [{"op": "remove", "path": "/c/env/1"}, {"op": "add", "path": "/c/env/-", "value": {"name": "H"}}],
        ),
    ],
)
def test_env_operations_send_only_the_entries_that_change(old, new, ops):
    assert env_ops("/c", old, new) == ops
    assert evanphx.apply({"c": {"env": old}}, ops) == {"c": {"env": new}}


@given(
    st.lists(st.sampled_from("ABCDEFG"), max_size=6, unique=True),
    st.lists(st.sampled_from("ABCDEFGXY"), max_size=7, unique=True),
)
def test_env_operations_apply_as_the_api_server_applies_them(old_names, new_names):
    old = [{"name": n} for n in old_names]
    new = [{"name": n, "value": "v"} if n in "XY" else {"name": n} for n in new_names]
    assert evanphx.apply({"c": {"env": old}}, env_ops("/c", old, new)) == {"c": {"env": new}}


# --- Through the real server -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reapply_server(start_server):
    return start_server(ROOT / "tests" / "fixtures" / "reapply")


@pytest.mark.parametrize(("namespace", "gpu"), [("ts-a", 0.25), ("mps-a", 0.125), ("mps-a", 1)])
def test_the_server_restores_its_own_output_on_a_re_apply(reapply_server, namespace, gpu):
    written = deployment(gpu, [{"name": "API_TOKEN", "value": "s3cret"}], namespace)
    sent = decoded(with_last_applied(written))
    first = review(reapply_server, "mutate", sent)
    stored = evanphx.apply(sent, json.loads(base64.b64decode(first["patch"])))
    again = client_side_apply(stored, written)
    response = review(reapply_server, "mutate", again, operation="UPDATE", old=stored)
    assert response["allowed"] is True
    patch = json.loads(base64.b64decode(response["patch"]))
    assert evanphx.apply(again, patch) == stored
    assert "s3cret" not in json.dumps(patch)
    assert review(reapply_server, "validate", stored, operation="UPDATE", old=stored)["allowed"] is True


def test_the_server_refuses_a_hand_edit_with_the_line(reapply_server):
    sent = decoded(deployment(0.25))
    first = review(reapply_server, "mutate", sent)
    stored = evanphx.apply(sent, json.loads(base64.b64decode(first["patch"])))
    edited = copy.deepcopy(stored)
    main_container(edited)["resources"]["limits"]["nvidia.com/gpu"] = "2"
    response = review(reapply_server, "validate", edited, operation="UPDATE", old=stored)
    assert response["allowed"] is False
    line = response["status"]["message"]
    assert line.startswith('container "main": limits nvidia.com/gpu "2" edits what gpu-admission set')


def test_a_converted_fraction_under_mps_with_a_smaller_policy_fraction_is_judged_without_error() -> None:
    """Found by the property above: a fraction converted to one MPS replica whose share is below one replica's,
    in a policy whose memoryFraction is smaller still. The rule judging memory variables then looked at the
    policy's own MPS limits as if they were a framework's fraction, and raised KeyError (a 500 at the server)."""
    from fractions import Fraction

    from tests.engine_support import policy
    from webhook.admission.engine import evaluate
    from webhook.admission.policy.model import GPU, Fractional, Mode, PolicySet, Sharing

    pol = policy(
        sharing=Sharing(mode=Mode.MPS, replicas=2), gpu=GPU(model="H100-80GB"), fractional=Fractional.SHARED,
        memory_fraction=Fraction(1, 10),
    )  # fmt: skip
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "w", "namespace": "team-a"},
        "spec": {"template": {"spec": {"containers": [{"name": "app", "image": "img"}], "initContainers": [
            {"name": "init", "image": "img", "resources": {"requests": {"nvidia.com/gpu": "250m"}}}]}}},
    }  # fmt: skip
    decision = evaluate(deployment, pol.namespaces[0], PolicySet((pol,)))
    assert decision.allowed and decision.violations == []
    again = evaluate(decision.mutated, pol.namespaces[0], PolicySet((pol,)))
    assert again.allowed and again.patch == []
