"""What DRA's routes weigh against a namespace's GPU budget, in GPU-equivalents (docs/budgets.md).

A DeviceClass asked as an extended resource (`deviceclass.resource.kubernetes.io/<class>`) and the devices of a
ResourceClaim or template weigh by the class the policy counts as GPUs or MIG devices (claimrules.class_kind):
a whole GPU 1, a MIG device the slice its selector names (mig.slice_weight), else the profile the policy's
mode takes a MIG device to be (the backend's `device_profile`), else 1. A GpuConfig that time-slices a claim's
GPU shares it among the containers and pods of that one claim: the claim still holds the whole GPU, and a
shared claim is counted once (by the budget).
"""

from __future__ import annotations

from fractions import Fraction

from webhook.admission.base.resources import DEVICE_CLASS_PREFIX
from webhook.admission.cluster import celselect
from webhook.admission.dra.claimrules import class_kind
from webhook.admission.dra.podclaims import ALL_DEVICES, ClaimSummary
from webhook.admission.policy.model import Policy
from webhook.admission.sharing.backend import WHOLE_GPU
from webhook.admission.sharing.mig import model_of, slice_weight
from webhook.admission.sharing.registry import backend_of

ZERO = Fraction(0)
# allocationMode All: every matching device of one node, at most the 8 GPUs of the largest GPU nodes.
ALL_DEVICES_WEIGHT = 8


def mig_device_weight(profile: str | None, policy: Policy) -> Fraction:
    """One MIG device: the slice `profile` names, else the policy's mode's (`device_profile`), else 1."""
    profile = profile or backend_of(policy).device_profile(policy)
    return slice_weight(profile, model_of(policy)) if profile else WHOLE_GPU


def device_class_weight(name: str, policy: Policy) -> Fraction:
    """One device of a DeviceClass asked as an extended resource: a whole GPU for the policy's GPU classes, a
    MIG device the policy's profile (mig_device_weight), 0 for a class that is no GPU here."""
    kind = class_kind(name, policy)
    if kind == "gpu":
        return WHOLE_GPU
    if kind == "mig":
        return mig_device_weight(None, policy)
    return ZERO


def claim_weight(summary: ClaimSummary, policy: Policy) -> Fraction:
    """The devices a ResourceClaim or template holds: each request at its heaviest alternative (the allocator
    may pick any), whole GPUs 1, a MIG device by mig_device_weight. allocationMode All takes every matching
    device of a node, which admission cannot know: it weighs `ALL_DEVICES_WEIGHT` (validation refuses such
    claims in GPU pods anyway)."""
    heaviest: dict[str, Fraction] = {}
    profiles = _selected_profiles(summary)
    for ref, name, count in summary.devices:
        kind = class_kind(name, policy)
        if not kind:
            continue
        if count == ALL_DEVICES:
            weight = Fraction(ALL_DEVICES_WEIGHT)
        elif kind == "gpu":
            weight = count * WHOLE_GPU
        else:
            weight = count * mig_device_weight(profiles.get(ref), policy)
        request = ref.split("/")[0]
        heaviest[request] = max(heaviest.get(request, ZERO), weight)
    return sum(heaviest.values(), ZERO)


def class_units(policy: Policy) -> list[tuple[str, Fraction, str]]:
    """What one device of each of the policy's GPU DeviceClasses weighs, asked as an extended resource:
    (resource, weight, what it is), beside the backend's `weight_units`."""
    classes = policy.device_classes
    found = [(DEVICE_CLASS_PREFIX + name, WHOLE_GPU, "a whole GPU (DRA)") for name in classes.gpu_classes]
    for name in classes.mig_classes:
        weight = device_class_weight(name, policy)
        found.append((DEVICE_CLASS_PREFIX + name, weight, "a MIG device (DRA; in a claim, by the profile it selects)"))
    return found


def _selected_profiles(summary: ClaimSummary) -> dict[str, str]:
    """The MIG profile each request (or `request/alternative`) selects by `...profile == '<p>'`."""
    found: dict[str, str] = {}
    for request, alternatives in summary.selected:
        for sub, _, _, selector in alternatives:
            profile = selector.first("profile") if isinstance(selector, celselect.Selector) else ""
            if profile:
                found[f"{request}/{sub}" if sub else request] = profile
    return found
