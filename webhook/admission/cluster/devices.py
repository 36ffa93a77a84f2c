"""DRA's devices as the cluster view keeps them: each ResourceSlice's devices, each DeviceClass, and per node
the devices a class and a claim request's own selectors both match (`DraDevices`). slices.py reads them from
the API's objects and merges them into the nodes (nodes.py), which keep a `DraDevices` with the view.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from webhook.admission.cluster.celselect import ANY, Key, Selector, Value


@dataclass(frozen=True, slots=True)
class Device:
    """One device of a slice, as the checks read it."""

    type: str  # the driver's `type` attribute ("gpu", "mig"), or ""
    product: str  # `productName`, or ""
    memory_mib: int | None  # capacity `memory`
    profile: str  # a MIG device's `profile`, or ""
    # What selectors read: attributes and capacities by (domain, name) (shared between alike devices)
    attributes: Mapping[Key, Value] = field(default_factory=dict, compare=False, repr=False)
    capacity: Mapping[Key, Value] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class SliceInfo:
    """One ResourceSlice reduced to what the cluster view needs: its node, driver and devices."""

    node: str
    driver: str
    devices: tuple[Device, ...]


@dataclass(frozen=True, slots=True)
class ClassInfo:
    """One DeviceClass: what its selectors ask for (the driver, device type and MIG profile they name, for
    messages; `selector` decides), and the extended resource it serves."""

    driver: str  # "" where the selectors name none
    type: str  # "" where the selectors name no type
    extended_resource: str  # spec.extendedResourceName, or ""
    profile: str = ""  # the MIG profile the selectors ask for (`...profile == '1g.10gb'`), or ""
    selector: Selector = field(default=ANY, compare=False, repr=False)
    # the sharing strategy its own GpuConfig (spec.config) gives NVIDIA's whole GPUs (gpuconfig.class_strategy), or ""
    sharing: str = ""

    @property
    def exact(self) -> bool:
        """Whether every part of the selectors was read (else its devices are those it may select)."""
        return self.selector.exact

    def matches(self, driver: str, device: Device) -> bool:
        return self.selector.matches(driver, device.attributes, device.capacity)


class DraDevices:
    """Each node's DRA devices and the DeviceClasses, kept with the view (`ClusterView.dra`) for what `merge`
    cannot count ahead: the devices of a class that a claim request's own selectors also match (`most`). The
    slices are the watch's own (nothing copied); the counts are worked out once per snapshot and distinct
    (class, selector), on first use."""

    __slots__ = ("_by_node", "_classes", "_most")

    def __init__(self, slices: Iterable[SliceInfo], classes: Mapping[str, ClassInfo]) -> None:
        by_node: dict[str, list[SliceInfo]] = {}
        for one in slices:
            by_node.setdefault(one.node, []).append(one)
        self._by_node = {node: tuple(held) for node, held in sorted(by_node.items())}
        self._classes = dict(classes)
        self._most: dict[tuple[str, Selector], tuple[int, int, str] | None] = {}

    def most(self, class_name: str, selector: Selector) -> tuple[int, int, str] | None:
        """The most devices of `class_name` that `selector` also matches on one node, the class's devices
        there, and that node (of the nodes with the most, the one with the most devices of the class, then
        the first by name); None where no node has a device of the class (nothing is known of it). A part of
        either selector not read is taken as true: never fewer than could match."""
        key = (class_name, selector)
        if key in self._most:
            return self._most[key]
        cls = self._classes.get(class_name)
        best: tuple[int, int, str] | None = None
        if cls is not None:
            seen: dict[tuple[str, int, int], tuple[bool, bool]] = {}  # alike devices share their maps
            for node, held in self._by_node.items():
                in_class = matching = 0
                for one in held:
                    for device in one.devices:
                        shape = (one.driver, id(device.attributes), id(device.capacity))
                        found = seen.get(shape)
                        if found is None:
                            of_class = cls.matches(one.driver, device)
                            found = seen[shape] = (
                                of_class,
                                of_class and selector.matches(one.driver, device.attributes, device.capacity),
                            )
                        in_class += found[0]
                        matching += found[1]
                if in_class and (best is None or (matching, in_class) > best[:2]):
                    best = (matching, in_class, node)
        if len(self._most) < 4096:  # a bound no cluster's distinct selectors reach
            self._most[key] = best
        return best
