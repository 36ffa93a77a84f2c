"""Where the pod spec lives in each kind, and the containers in it.

Workload templates matter as much as Pods: the API server validates a Deployment's template with the same
extended-resource rules, so a requests-only Deployment is rejected before any Pod exists.
"""

from __future__ import annotations

import posixpath
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from webhook.admission.base.memo import BoundedMemo
from webhook.admission.base.quantity import quantity_or_none
from webhook.admission.base.resources import is_managed
from webhook.admission.base.violation import cut

# kind -> the keys from the object's root to its pod spec
POD_SPEC_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "ReplicationController": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
    "PodTemplate": ("template", "spec"),
}
# kind -> its API group and resource (all served as v1): what the webhook configurations and the native
# policies match, in the order of POD_SPEC_PATHS
POD_SPEC_RESOURCES: dict[str, tuple[str, str]] = {
    "Pod": ("", "pods"),
    "Deployment": ("apps", "deployments"),
    "StatefulSet": ("apps", "statefulsets"),
    "DaemonSet": ("apps", "daemonsets"),
    "ReplicaSet": ("apps", "replicasets"),
    "ReplicationController": ("", "replicationcontrollers"),
    "Job": ("batch", "jobs"),
    "CronJob": ("batch", "cronjobs"),
    "PodTemplate": ("", "podtemplates"),
}

VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
# The NVIDIA container toolkit's device list as volume mounts (its `volume-mounts` device-list strategy): a
# mount whose destination starts with this root names the devices the container gets (nvidia-container-
# toolkit, internal/config/image: DeviceListAsVolumeMountsRoot, matched as a string prefix). /var/run is a
# link to /run on current distributions, so both spellings are read.
DEVICE_LIST_ROOTS = ("/var/run/nvidia-container-devices", "/run/nvidia-container-devices")
# What the matchConditions and `mentions_gpu` look for, loosely (a superset of what validation denies).
DEVICE_LIST_MARK = "nvidia-container-devices"
DEVICE_PATH_MARK = "dev"
DEVICE_NODES_DIR, DEVICE_NODES_PREFIX = "/dev", "/dev/nvidia"  # the node's GPU device nodes (is_gpu_device_path)
MUTATED_SECTIONS = ("containers", "initContainers")  # ephemeral containers cannot hold resources
ALL_SECTIONS = ("initContainers", "containers", "ephemeralContainers")
SECTION_NOUNS = {
    "containers": "container",
    "initContainers": "init container",
    "ephemeralContainers": "ephemeral container",
}


def resources_by_group(kinds: Iterable[str]) -> list[tuple[str, tuple[str, ...]]]:
    """The resources of `kinds` (POD_SPEC_RESOURCES), grouped by API group in first-seen order: one admission
    rule each."""
    grouped: dict[str, list[str]] = {}
    for kind in kinds:
        group, resource = POD_SPEC_RESOURCES[kind]
        grouped.setdefault(group, []).append(resource)
    return [(group, tuple(resources)) for group, resources in grouped.items()]


def pod_spec_path(obj: Any) -> tuple[str, ...] | None:
    """The path to `obj`'s pod spec, or None when the object has none (wrong kind, or not there)."""
    if not isinstance(obj, dict):
        return None
    kind = obj.get("kind")
    path = POD_SPEC_PATHS.get(kind) if isinstance(kind, str) else None
    if path is None:
        return None
    node: Any = obj
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
        if node is None:
            return None
    return path if isinstance(node, dict) else None


def get_path(obj: Any, path: tuple[str | int, ...]) -> Any:
    node = obj
    for key in path:
        if isinstance(node, dict) and isinstance(key, str):
            node = node.get(key)
        elif isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node):
            node = node[key]
        else:
            return None
    return node


def controller_reference(obj: Any) -> dict[str, Any] | None:
    """The owner reference marked `controller: true` (at most one may be): what made the object, or None."""
    metadata = obj.get("metadata") if type(obj) is dict else None
    owners = metadata.get("ownerReferences") if type(metadata) is dict else None
    if type(owners) is list:
        for owner in owners:
            if type(owner) is dict and owner.get("controller") is True:
                return owner
    return None


def container_name(section: str, index: int, body: dict[str, Any]) -> str:
    name = body.get("name")
    return name if type(name) is str and name else f"{section}[{index}]"


def container_label(section: str, index: int, body: dict[str, Any]) -> str:
    """`container "train"` or `init container "setup"`, for messages."""
    name = body.get("name")
    if type(name) is str and name:  # nearly always, and the same few names in review after review
        return _LABELS[section][name]
    return _label(SECTION_NOUNS[section], container_name(section, index, body))


def _label(noun: str, name: str) -> str:
    return f'{noun} "{cut(name, 63)}"'


# One memo per section, keyed by the name alone, so that the memo's bound on key length holds for names too.
_LABELS = {section: BoundedMemo(partial(_label, noun)) for section, noun in SECTION_NOUNS.items()}


@dataclass(slots=True)
class ContainerRef:
    """One container of a pod spec: where it is (section and index) and how to name it (for people)."""

    section: str  # "containers" | "initContainers" | "ephemeralContainers"
    index: int
    body: dict[str, Any]

    @property
    def name(self) -> str:
        return container_name(self.section, self.index, self.body)

    @property
    def label(self) -> str:
        return container_label(self.section, self.index, self.body)

    @property
    def is_sidecar(self) -> bool:
        """A restartable init container (KEP-753): it keeps running beside the app containers."""
        return self.section == "initContainers" and self.body.get("restartPolicy") == "Always"

    def resource_map(self, which: str) -> dict[str, Any]:
        """`resources.requests` or `resources.limits`; empty when absent or malformed."""
        resources = self.body.get("resources")
        value = resources.get(which) if isinstance(resources, dict) else None
        return value if isinstance(value, dict) else {}

    def managed(self, which: str) -> dict[str, Any]:
        return {k: v for k, v in self.resource_map(which).items() if isinstance(k, str) and is_managed(k)}

    def env(self) -> list[Any]:
        env = self.body.get("env")
        return env if isinstance(env, list) else []

    def env_names(self) -> set[str]:
        return {e["name"] for e in self.env() if isinstance(e, dict) and isinstance(e.get("name"), str)}


def visible_devices_prefix(body: dict[str, Any]) -> str | None:
    """An `envFrom` prefix that makes NVIDIA_VISIBLE_DEVICES out of a ConfigMap's or Secret's key (`NVIDIA_`
    and the key `VISIBLE_DEVICES`), or None. Without a prefix, any key could: that is beyond admission."""
    env_from = body.get("envFrom")
    if type(env_from) is list:
        for source in env_from:
            prefix = source.get("prefix") if type(source) is dict else None
            if type(prefix) is str and prefix and VISIBLE_DEVICES.startswith(prefix):
                return prefix
    return None


def normal_path(path: str) -> str:
    """A path as the node resolves its `..` and `.` and repeated slashes (symbolic links are beyond sight)."""
    return posixpath.normpath("/" + path.lstrip("/"))


def is_device_list_mount(mount_path: str) -> bool:
    """A volume mount that the container toolkit reads as a list of devices to give the container."""
    return any(path.startswith(DEVICE_LIST_ROOTS) for path in (mount_path, normal_path(mount_path)))


def is_gpu_device_path(host_path: str) -> bool:
    """A hostPath that holds the node's NVIDIA device nodes: /dev itself, or /dev/nvidia* (nvidia0, nvidiactl,
    nvidia-uvm, nvidia-caps, ...)."""
    path = normal_path(host_path)
    return path == DEVICE_NODES_DIR or path.startswith(DEVICE_NODES_PREFIX)


def host_paths(spec: dict[str, Any]) -> dict[str, str]:
    """The pod's hostPath volumes: volume name -> host path."""
    volumes = spec.get("volumes")
    found: dict[str, str] = {}
    if type(volumes) is list:
        for volume in volumes:
            if type(volume) is dict and type(volume.get("name")) is str:
                host = volume.get("hostPath")
                path = host.get("path") if type(host) is dict else None
                if type(path) is str:
                    found[volume["name"]] = path
    return found


def volume_mounts(body: dict[str, Any]) -> list[tuple[str, str]]:
    """A container's volume mounts as (volume name, mount path), the well-formed ones."""
    mounts = body.get("volumeMounts")
    if type(mounts) is not list:
        return []
    return [
        (m["name"], m["mountPath"])
        for m in mounts
        if type(m) is dict and type(m.get("name")) is str and type(m.get("mountPath")) is str
    ]


def iter_containers(
    obj: dict[str, Any], spec_path: tuple[str, ...], sections: tuple[str, ...] = MUTATED_SECTIONS
) -> Iterator[ContainerRef]:
    spec = get_path(obj, spec_path)
    if isinstance(spec, dict):
        yield from spec_containers(spec, sections)


def spec_containers(spec: dict[str, Any], sections: tuple[str, ...]) -> Iterator[ContainerRef]:
    """Each container of a pod spec in `sections` that is a map, with where it stands."""
    for section in sections:
        containers = spec.get(section)
        if not isinstance(containers, list):
            continue
        for index, body in enumerate(containers):
            if isinstance(body, dict):
                yield ContainerRef(section, index, body)


def section_bodies(spec: dict[str, Any], sections: tuple[str, ...]) -> Iterator[Any]:
    """Each entry of the spec's container lists in `sections`, as written (not checked to be a map)."""
    for section in sections:
        containers = spec.get(section)
        if type(containers) is list:
            yield from containers


def asks_some(bodies: Iterable[Any], names: Collection[str], maps: tuple[str, ...]) -> bool:
    """Whether a body (a container, or a pod spec with pod-level resources) asks a positive quantity of one of
    `names` in one of its `resources` `maps` ("limits", "requests")."""
    for body in bodies:
        resources = body.get("resources") if type(body) is dict else None
        if type(resources) is not dict:
            continue
        for which in maps:
            amounts = resources.get(which)
            if type(amounts) is not dict:
                continue
            for name in names:
                value = quantity_or_none(amounts[name]) if name in amounts else None
                if value is not None and value > 0:
                    return True
    return False


def mentions_gpu(obj: dict[str, Any], spec_path: tuple[str, ...]) -> bool:
    """Whether any rule could apply: a managed resource, resources that are not maps, NVIDIA_VISIBLE_DEVICES
    (by name, or through an envFrom prefix), a hostPath volume whose path holds "dev", or a volume mount whose
    path holds "nvidia-container-devices" (the toolkit's device list).

    A pre-filter, the engine's twin of the manifests' matchConditions: most pods hold no GPU, and for them
    the answer is "allow, untouched" without running mutation and validation. It may say True needlessly,
    never False wrongly.
    """
    spec = get_path(obj, spec_path)
    if "volumes" in spec and any(DEVICE_PATH_MARK in path for path in host_paths(spec).values()):
        return True
    for section in ALL_SECTIONS:
        containers = spec.get(section)
        if containers is None:
            continue
        if not isinstance(containers, list):
            return True
        for body in containers:
            if not isinstance(body, dict):
                return True
            resources = body.get("resources")
            if resources is not None:
                if not isinstance(resources, dict):
                    return True
                for which in ("requests", "limits"):
                    names = resources.get(which)
                    if names is not None and (not isinstance(names, dict) or any(map(is_managed, names))):
                        return True
            env = body.get("env")
            if env is not None and (
                not isinstance(env, list)
                or any(not isinstance(e, dict) or e.get("name") == VISIBLE_DEVICES for e in env)
            ):
                return True
            if "envFrom" in body and visible_devices_prefix(body) is not None:
                return True
            if "volumeMounts" in body and any(DEVICE_LIST_MARK in path for _, path in volume_mounts(body)):
                return True
    return False


def default_requests_from_limits(obj: dict[str, Any]) -> dict[str, Any]:
    """What the API server does to a Pod before any webhook: a managed limit without a request becomes the
    request. Pods only: SetDefaults_Pod does it "on a v1.Pod and not a v1.PodTemplate", so a Deployment's
    template reaches the webhook with limits alone.

    Returns a new object (the input is not changed); the CLI calls this so offline checks see what the
    webhook would see.
    """
    import copy

    path = pod_spec_path(obj)
    if path is None or obj.get("kind") != "Pod":
        return obj
    result = copy.deepcopy(obj)
    for ref in iter_containers(result, path):
        limits = ref.managed("limits")
        if not limits:
            continue
        resources = ref.body["resources"]
        requests = resources.get("requests")
        if not isinstance(requests, dict):
            if requests is not None:
                continue  # malformed; validation reports it
            requests = resources["requests"] = {}
        for name, value in limits.items():
            requests.setdefault(name, value)
    return result
