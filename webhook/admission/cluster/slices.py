"""DRA's side of the cluster view: ResourceSlices and DeviceClasses merged into the nodes the core reads.

On a node pool served by Dynamic Resource Allocation alone, a node advertises no `nvidia.com/gpu`: its GPUs
are devices in ResourceSlices, and a DeviceClass with `spec.extendedResourceName` (KEP-5004) serves the
extended resource from them. So the cluster checks (clustercheck.py) read each node with its DRA devices
added: for each DeviceClass, the devices of that node its selectors may select (celselect.py) count as
`deviceclass.resource.kubernetes.io/<class>` and, where the node does not advertise the class's extended
resource itself (a device plugin's, which the scheduler then uses instead), as that resource; the node keeps
which class serves which resource (`NodeInfo.served`), since a pod's extended resource, its DeviceClass
resources and its claims draw on the same devices. A node without GPU feature discovery's labels gets them
from its devices' attributes (product, memory, count; the MIG profiles as the mixed strategy's
`nvidia.com/mig-<profile>.count`), so `fits`, `offered` and `drift` read it as they read a device-plugin node.

Written from kubernetes/kubernetes pkg/apis/resource/types.go (resource.k8s.io/v1: ResourceSlice spec.driver,
nodeName, pool, devices[].attributes (a map of one-of string/int/bool/version, a name qualified by a domain
or in the driver's) and capacity (value); a DeviceClass's spec.selectors[].cel.expression,
spec.extendedResourceName and spec.config, whose opaque GpuConfig base/gpuconfig.py reads), KEP-5004 (a node with
device-plugin capacity for the resource serves it that way) and from NVIDIA/k8s-dra-driver-gpu (its
DeviceClasses select `device.driver == 'gpu.nvidia.com' &&
device.attributes['gpu.nvidia.com'].type == 'gpu'` or `'mig'`; a GPU's attributes `type`, `productName`,
`architecture`, `uuid`, `index`, capacity `memory`; a MIG device's `profile`, its parent's `productName`, and
its own `memory`). A selector part celselect cannot read is taken as true: the class's count is then the
most it can be, never fewer (`ClassInfo.exact` says which). The view keeps the slices and classes too
(`DraDevices`), for the devices of a class that a claim request's own selectors match. Nothing here does I/O.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from webhook.admission.base.gpuconfig import class_strategy
from webhook.admission.base.quantity import quantity_or_none
from webhook.admission.base.resources import DEVICE_CLASS_PREFIX, MIG_PREFIX
from webhook.admission.cluster import celselect
from webhook.admission.cluster.celselect import UNKNOWN, Key, Semver, Value
from webhook.admission.cluster.devices import ClassInfo, Device, SliceInfo
from webhook.admission.cluster.nodes import COUNT_LABEL, MEMORY_LABEL, PRODUCT_LABEL, NodeInfo

MIB = 1024 * 1024
# Attributes unique to one device (and PCI addresses, under the kubernetes domain): not kept, so that 5,000
# nodes' devices share their attribute maps; a selector that reads one may match (celselect.UNKNOWN).
UNIQUE_ATTRIBUTES = frozenset({"uuid", "parentUUID"})
UNIQUE_DOMAINS = frozenset({"resource.kubernetes.io"})
_SHAPES: dict[tuple[tuple[Key, Value], ...], Mapping[Key, Value]] = {}  # interned attribute maps, few distinct


def _key(name: str, driver: str) -> Key:
    """An attribute's or capacity's (domain, name): a name without a domain is in the driver's."""
    domain, _, plain = name.rpartition("/")
    return (sys.intern(domain or driver), sys.intern(plain))


def _value(raw: Any) -> Value | None:
    """`{string: ...}`, `{int: ...}`, `{bool: ...}`, `{version: ...}` -> the value selectors compare."""
    if not isinstance(raw, dict):
        return None
    if isinstance(found := raw.get("string"), str):
        return sys.intern(found) if len(found) <= 64 else found
    if type(found := raw.get("int")) is int:
        return found
    if type(found := raw.get("bool")) is bool:
        return found
    if isinstance(found := raw.get("version"), str):
        return Semver.of(found) or UNKNOWN  # a pre-release: not compared here
    return None


def _attributes(raw: Any, driver: str) -> Mapping[Key, Value]:
    found: dict[Key, Value] = {}
    for name, item in raw.items() if isinstance(raw, dict) else ():
        if not isinstance(name, str):
            continue
        key = _key(name, driver)
        unique = key[1] in UNIQUE_ATTRIBUTES or key[0] in UNIQUE_DOMAINS
        value = UNKNOWN if unique else _value(item)
        if value is not None:
            found[key] = value
    return _shared(found)


def _capacity(raw: Any, driver: str) -> Mapping[Key, Value]:
    found: dict[Key, Value] = {}
    for name, item in raw.items() if isinstance(raw, dict) else ():
        amount = quantity_or_none(item.get("value")) if isinstance(name, str) and isinstance(item, dict) else None
        if amount is not None:
            found[_key(name, driver)] = Fraction(amount)
    return _shared(found)


def _shared(found: dict[Key, Value]) -> Mapping[Key, Value]:
    """One map per distinct content (alike devices share it), within a bound no cluster reaches."""
    shape = tuple(sorted(found.items(), key=lambda item: item[0]))  # keys are distinct: values never compared
    if len(_SHAPES) >= 4096:
        return _SHAPES.get(shape) or found
    return _SHAPES.setdefault(shape, found)


def _named_spec(obj: Any) -> tuple[str, dict[str, Any]] | None:
    """(metadata.name, spec) of an API object, or None where either is missing or not of its type."""
    if not isinstance(obj, dict):
        return None
    metadata, spec = obj.get("metadata"), obj.get("spec")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not isinstance(name, str) or not isinstance(spec, dict):
        return None
    return name, spec


def slice_info(obj: Any) -> tuple[str, SliceInfo] | None:
    """A ResourceSlice as the API sends it -> (its name, SliceInfo); None for one of no node (a network-
    attached pool: `allNodes` or a node selector), or not a slice."""
    named = _named_spec(obj)
    if named is None:
        return None
    name, spec = named
    node, driver = spec.get("nodeName"), spec.get("driver")
    if not isinstance(node, str) or not node or not isinstance(driver, str):
        return None
    devices = []
    for device in spec.get("devices") or ():
        if not isinstance(device, dict):
            continue
        attributes = _attributes(device.get("attributes"), driver)
        capacity = _capacity(device.get("capacity"), driver)
        memory = capacity.get((driver, "memory"))
        kind, product, profile = (attributes.get((driver, key)) for key in ("type", "productName", "profile"))
        devices.append(Device(
            kind if isinstance(kind, str) else "",
            product if isinstance(product, str) else "",
            int(memory // MIB) if isinstance(memory, Fraction) else None,
            profile if isinstance(profile, str) else "",
            attributes,
            capacity,
        ))  # fmt: skip
    return name, SliceInfo(sys.intern(node), sys.intern(driver), tuple(devices))


def class_info(obj: Any) -> tuple[str, ClassInfo] | None:
    """A DeviceClass -> (its name, ClassInfo); None for what is not a DeviceClass with a name."""
    named = _named_spec(obj)
    if named is None:
        return None
    name, spec = named
    selector = celselect.of_selectors(spec.get("selectors"))
    extended = spec.get("extendedResourceName")
    return name, ClassInfo(
        selector.first("driver"),
        selector.first("type"),
        extended if isinstance(extended, str) else "",
        selector.first("profile"),
        selector,
        sys.intern(class_strategy(spec.get("config"))),
    )


def sharing_of(classes: Mapping[str, ClassInfo]) -> dict[str, str]:
    """Each DeviceClass's own GpuConfig strategy ("" none), for the view (`ClusterView.class_sharing`)."""
    return {name: cls.sharing for name, cls in classes.items()}


def unread(classes: Mapping[str, ClassInfo]) -> tuple[str, ...]:
    """A line for each DeviceClass whose selectors are not read in full (for `policy lint --cluster`)."""
    return tuple(
        f'DeviceClass "{name}": its selector is not read in full ({"; ".join(cls.selector.unread)}): its devices '
        "are counted as those the rest of it selects, the most it may select (the cluster checks never refuse "
        "a pod on what they cannot read)"
        for name, cls in sorted(classes.items())
        if not cls.exact
    )


def merge(
    nodes: Mapping[str, NodeInfo], slices: Iterable[SliceInfo], classes: Mapping[str, ClassInfo]
) -> dict[str, NodeInfo]:
    """The nodes with their DRA devices: each class's devices added as `deviceclass.resource.kubernetes.io/
    <class>` and, where the node has no device-plugin capacity for it, as its extended resource (of the
    classes serving one name, the one that selects the most: the most the scheduler could find); GPU and
    MIG labels from the devices where the node has none."""
    by_node: dict[str, list[SliceInfo]] = {}
    for one in slices:
        by_node.setdefault(one.node, []).append(one)
    merged = dict(nodes)
    for node_name, held in by_node.items():
        node = nodes.get(node_name) or NodeInfo(node_name, {}, {})
        amounts = dict(node.allocatable)
        served: dict[str, tuple[int, str]] = {}  # extended resource -> (devices, the class serving them)
        for class_name, cls in sorted(classes.items()):
            count = sum(1 for one in held for device in one.devices if cls.matches(one.driver, device))
            if not count:
                continue
            amounts[DEVICE_CLASS_PREFIX + class_name] = count
            resource = cls.extended_resource
            if resource and resource not in node.allocatable and count > served.get(resource, (0, ""))[0]:
                served[resource] = (count, class_name)
        for resource, (count, _) in served.items():
            amounts[resource] = count
        labels = dict(node.labels)
        gpus = [device for one in held for device in one.devices if device.type == "gpu"]
        migs = [device for one in held for device in one.devices if device.type == "mig" and device.profile]
        if gpus and PRODUCT_LABEL not in labels and gpus[0].product:
            labels[PRODUCT_LABEL] = sys.intern(gpus[0].product.replace(" ", "-"))  # as GFD writes it
            if gpus[0].memory_mib is not None:
                labels[MEMORY_LABEL] = str(gpus[0].memory_mib)
            labels[COUNT_LABEL] = str(len(gpus))
        if migs and not any(key.startswith(("nvidia.com/mig", MIG_PREFIX)) for key in labels):
            profiles: dict[str, int] = {}
            for device in migs:
                profiles[device.profile] = profiles.get(device.profile, 0) + 1
            for profile, count in profiles.items():  # as the mixed strategy labels them
                labels[sys.intern(f"{MIG_PREFIX}{profile}.count")] = str(count)
            if PRODUCT_LABEL not in labels and migs[0].product:  # the parent GPU's (its memory is the slice's)
                labels[PRODUCT_LABEL] = sys.intern(migs[0].product.replace(" ", "-"))
        pairs = tuple(sorted((resource, class_name) for resource, (_, class_name) in served.items()))
        sliced = bool(gpus or migs)
        if amounts != node.allocatable or labels != node.labels or pairs or sliced:
            merged[node_name] = NodeInfo(
                node_name, amounts, labels, node.unschedulable, node.devices, _interned(pairs), sliced
            )
    return merged


_PAIRS: dict[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]] = {}  # interned: a few distinct


def _interned(pairs: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    return _PAIRS.setdefault(pairs, pairs) if len(_PAIRS) < 1024 else _PAIRS.get(pairs, pairs)
