"""A test oracle: what the API server's own validation refuses in a pod spec's extended resources.

Written from kubernetes/kubernetes, not from the webhook (it must be able to disagree with it):
- pkg/apis/core/validation/validation.go, `ValidateResourceRequirements`: for each request, "Check that request
  <= limit": a resource that is not overcommitable needs a limit ("Limit must be set for non overcommitable
  resources") and a request equal to it ("must be equal to <name> limit"); every quantity goes through
  `ValidateResourceQuantityValue`: `ValidateNonnegativeQuantity` ("must be greater than or equal to 0"), then
  for an integer resource `value.MilliValue()%int64(1000) != int64(0)` is "must be an integer".
- pkg/apis/core/helper/helpers.go: `IsOvercommitAllowed(name)` is `IsNativeResource(name) &&
  !IsHugePageResourceName(name)`; `IsIntegerResourceName` holds for every `IsExtendedResourceName`;
  `IsNativeResource` is "no '/' in the name, or it contains 'kubernetes.io/'"; `IsExtendedResourceName` is not
  native, not prefixed "requests.", and "requests." + name is a qualified name.
- `MilliValue` rounds up (resource.Quantity.ScaledValue(-3) uses ceiling), so 0.0001 is 1m: not an integer.
Defaulting runs before validation: a limit without a request gives the request the limit's value.

Quantities are parsed with the project's resource.Quantity parser (itself checked against the Go grammar in
test_quantity.py); an unparsable one is refused (the API server cannot even decode the object).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

from webhook.admission.base.quantity import QuantityError, parse_quantity

_QUALIFIED_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _is_qualified_name(name: str) -> bool:
    """apimachinery validation.IsQualifiedName: [prefix/]name, name <= 63 of [-A-Za-z0-9_.], prefix a DNS subdomain."""
    prefix, slash, rest = name.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(rest) <= 63 and _QUALIFIED_NAME_PART.match(rest) is not None


def is_native(name: str) -> bool:
    return "/" not in name or "kubernetes.io/" in name


def is_extended(name: str) -> bool:
    return not is_native(name) and not name.startswith("requests.") and _is_qualified_name("requests." + name)


def _milli_value(value: Fraction) -> int:
    return math.ceil(value * 1000)


def container_errors(where: str, resources: Any) -> list[str]:
    """The API server's errors for one container's extended resources (its own wording, loosely)."""
    if not isinstance(resources, dict):
        return [] if resources is None else [f"{where}.resources: cannot decode"]
    requests, limits = resources.get("requests"), resources.get("limits")
    if not all(part is None or isinstance(part, dict) for part in (requests, limits)):
        return [f"{where}.resources: cannot decode"]
    requests, limits = dict(requests or {}), limits or {}
    errors: list[str] = []
    parsed: dict[tuple[str, str], Fraction] = {}
    for which, resource_map in (("limits", limits), ("requests", requests)):
        for name, raw in resource_map.items():
            if not isinstance(name, str) or not is_extended(name):
                continue
            try:  # JSON null decodes as a zero Quantity (apimachinery resource.Quantity.UnmarshalJSON)
                value = Fraction(0) if raw is None else parse_quantity(raw)
            except QuantityError:
                errors.append(f"{where}.resources.{which}[{name}]: cannot decode {raw!r}")
                continue
            parsed[which, name] = value
            if value < 0:
                errors.append(f"{where}.resources.{which}[{name}]: must be greater than or equal to 0")
            if _milli_value(value) % 1000 != 0:
                errors.append(f"{where}.resources.{which}[{name}]: must be an integer")
    for name in limits:  # defaulting: a request from the limit
        if isinstance(name, str) and is_extended(name) and name not in requests:
            requests[name] = limits[name]
            if ("limits", name) in parsed:
                parsed["requests", name] = parsed["limits", name]
    for name in requests:
        if not isinstance(name, str) or not is_extended(name):
            continue
        if name not in limits:
            errors.append(f"{where}.resources.limits[{name}]: Limit must be set for non overcommitable resources")
        elif parsed.get(("requests", name), 0) != parsed.get(("limits", name), 0):
            errors.append(f"{where}.resources.requests[{name}]: must be equal to {name} limit")
    return errors


def pod_spec_errors(spec: Any) -> list[str]:
    """Every error of the containers and init containers of `spec` (ephemeral containers hold no resources)."""
    if not isinstance(spec, dict):
        return []
    errors: list[str] = []
    for section in ("initContainers", "containers"):
        containers = spec.get(section)
        if not isinstance(containers, list):
            continue
        for index, body in enumerate(containers):
            if isinstance(body, dict):
                errors += container_errors(f"spec.{section}[{index}]", body.get("resources"))
    return errors
