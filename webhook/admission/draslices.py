"""DRA's side of the cluster view: ResourceSlices and DeviceClasses merged into the nodes the core reads.

On a node pool served by Dynamic Resource Allocation alone, a node advertises no `nvidia.com/gpu`: its GPUs
are devices in ResourceSlices, and a DeviceClass with `spec.extendedResourceName` (KEP-5004) serves the
extended resource from them. So the cluster checks (clustercheck.py) read each node with its DRA devices
added: for each DeviceClass whose selector names a driver (and a device type), the devices of that node that
match count as the class's extended resource (and as `deviceclass.resource.kubernetes.io/<class>`), and a node
without GPU feature discovery's labels gets them from its devices' attributes (product, memory, count), so
`fits`, `offered` and `drift` read it as they read a device-plugin node.

Written from kubernetes/kubernetes pkg/apis/resource/types.go (resource.k8s.io/v1: ResourceSlice spec.driver,
nodeName, pool, devices[].attributes (a map of one-of string/int/bool/version) and capacity (value); a
DeviceClass's spec.selectors[].cel.expression and spec.extendedResourceName) and from NVIDIA/k8s-dra-driver-gpu
(its DeviceClasses select `device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type ==
'gpu'` or `'mig'`, a class of one MIG profile adding `device.attributes['gpu.nvidia.com'].profile ==
'1g.10gb'`; a GPU's attributes `type`, `productName`, `architecture`, `uuid`, `index`, capacity `memory`; a MIG
device's `profile`). A selector this module cannot read (any CEL beyond driver, type and MIG profile) is
not guessed at: that class serves nothing here, and the checks treat its resource as before (not offered by
DRA). Nothing here does I/O.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.admission.cluster import COUNT_LABEL, MEMORY_LABEL, PRODUCT_LABEL, NodeInfo
from webhook.admission.quantity import quantity_or_none
from webhook.admission.resources import DEVICE_CLASS_PREFIX

_DRIVER = re.compile(r"""device\.driver\s*==\s*['"]([^'"]+)['"]""")
_TYPE = re.compile(r"""device\.attributes\[\s*['"][^'"]+['"]\s*\]\.type\s*==\s*['"]([^'"]+)['"]""")
# `device.attributes['gpu.nvidia.com'].profile == '1g.10gb'` (or ["profile"], double quotes): the MIG profile
# a selector asks for (a claim's, or a DeviceClass's that serves one profile as `nvidia.com/mig-<profile>`).
PROFILE = re.compile(r"""(?:\.profile|\[\s*['"]profile['"]\s*\])\s*==\s*['"]([^'"]+)['"]""")
MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Device:
    """One device of a slice, as the checks read it."""

    type: str  # the driver's `type` attribute ("gpu", "mig"), or ""
    product: str  # `productName`, or ""
    memory_mib: int | None  # capacity `memory`
    profile: str  # a MIG device's `profile`, or ""


@dataclass(frozen=True, slots=True)
class SliceInfo:
    """One ResourceSlice reduced to what the cluster view needs: its node, driver and devices."""

    node: str
    driver: str
    devices: tuple[Device, ...]


@dataclass(frozen=True, slots=True)
class ClassInfo:
    """One DeviceClass: the driver and device type its selector asks for, and the extended resource it serves."""

    driver: str
    type: str  # "" where the selector names no type
    extended_resource: str  # spec.extendedResourceName, or ""
    profile: str = ""  # the MIG profile the selector asks for (`...profile == '1g.10gb'`), or ""

    def matches(self, driver: str, device: Device) -> bool:
        return (
            driver == self.driver
            and (not self.type or device.type == self.type)
            and (not self.profile or device.profile == self.profile)
        )


def _attribute(attributes: Any, name: str) -> Any:
    """An attribute's value (`{string: ...}`, `{int: ...}`), by its plain or its driver-qualified name."""
    if not isinstance(attributes, dict):
        return None
    value = attributes.get(name)
    if value is None:
        value = next((v for k, v in attributes.items() if isinstance(k, str) and k.endswith("/" + name)), None)
    if isinstance(value, dict):
        for kind in ("string", "int", "bool", "version"):
            if kind in value:
                return value[kind]
    return None


def slice_info(obj: Any) -> tuple[str, SliceInfo] | None:
    """A ResourceSlice as the API sends it -> (its name, SliceInfo); None for one of no node (a network-
    attached pool: `allNodes` or a node selector), or not a slice."""
    if not isinstance(obj, dict):
        return None
    metadata, spec = obj.get("metadata"), obj.get("spec")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not isinstance(name, str) or not isinstance(spec, dict):
        return None
    node, driver = spec.get("nodeName"), spec.get("driver")
    if not isinstance(node, str) or not node or not isinstance(driver, str):
        return None
    devices = []
    for device in spec.get("devices") or ():
        if not isinstance(device, dict):
            continue
        attributes = device.get("attributes")
        capacity = device.get("capacity")
        memory = capacity.get("memory") if isinstance(capacity, dict) else None
        amount = quantity_or_none(memory.get("value")) if isinstance(memory, dict) else None
        kind, product, profile = (_attribute(attributes, key) for key in ("type", "productName", "profile"))
        devices.append(Device(
            sys.intern(kind) if isinstance(kind, str) else "",
            sys.intern(product) if isinstance(product, str) else "",
            int(amount // MIB) if amount is not None else None,
            sys.intern(profile) if isinstance(profile, str) else "",
        ))  # fmt: skip
    return name, SliceInfo(sys.intern(node), sys.intern(driver), tuple(devices))


def class_info(obj: Any) -> tuple[str, ClassInfo] | None:
    """A DeviceClass -> (its name, ClassInfo); None where its selectors name no driver (not read here)."""
    if not isinstance(obj, dict):
        return None
    metadata, spec = obj.get("metadata"), obj.get("spec")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not isinstance(name, str) or not isinstance(spec, dict):
        return None
    driver = kind = profile = ""
    for selector in spec.get("selectors") or ():
        cel = selector.get("cel") if isinstance(selector, dict) else None
        expression = cel.get("expression") if isinstance(cel, dict) else None
        if not isinstance(expression, str):
            continue
        if found := _DRIVER.search(expression):
            driver = found.group(1)
        if found := _TYPE.search(expression):
            kind = found.group(1)
        if found := PROFILE.search(expression):
            profile = found.group(1)
    if not driver:
        return None
    extended = spec.get("extendedResourceName")
    return name, ClassInfo(driver, kind, extended if isinstance(extended, str) else "", profile)


def merge(
    nodes: Mapping[str, NodeInfo], slices: Iterable[SliceInfo], classes: Mapping[str, ClassInfo]
) -> dict[str, NodeInfo]:
    """The nodes with their DRA devices: each class's matching devices added as its extended resource and
    as `deviceclass.resource.kubernetes.io/<class>`; GPU labels from the devices where the node has none."""
    by_node: dict[str, list[SliceInfo]] = {}
    for one in slices:
        by_node.setdefault(one.node, []).append(one)
    merged = dict(nodes)
    for node_name, held in by_node.items():
        node = nodes.get(node_name) or NodeInfo(node_name, {}, {})
        amounts = dict(node.allocatable)
        for class_name, cls in classes.items():
            count = sum(1 for one in held for device in one.devices if cls.matches(one.driver, device))
            if not count:
                continue
            names = [DEVICE_CLASS_PREFIX + class_name] + ([cls.extended_resource] if cls.extended_resource else [])
            for resource in names:
                amounts[resource] = amounts.get(resource, 0) + count
        labels = dict(node.labels)
        gpus = [device for one in held for device in one.devices if device.type == "gpu"]
        if gpus and PRODUCT_LABEL not in labels and gpus[0].product:
            labels[PRODUCT_LABEL] = sys.intern(gpus[0].product.replace(" ", "-"))  # as GFD writes it
            if gpus[0].memory_mib is not None:
                labels[MEMORY_LABEL] = str(gpus[0].memory_mib)
            labels[COUNT_LABEL] = str(len(gpus))
        if amounts != node.allocatable or labels != node.labels:
            merged[node_name] = NodeInfo(node_name, amounts, labels, node.unschedulable, node.devices)
    return merged
