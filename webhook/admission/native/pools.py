"""Another pool's resource (validate.py `_served`, and the MIG backend's `served_profile`), said with validation's
own sentences: by name, the shared replica `nvidia.com/gpu.shared` where the pool does not serve it (whole GPUs,
MIG slices) and the memory-sliced backends' resources (HAMi's, Volcano's, ACK's) where the pool is not theirs;
by prefix, any `nvidia.com/mig-*` limit outside the pool's names (a profile the model does not have,
one the nodes' layout does not offer, any MIG slice in a whole-GPU or shared namespace, a MIG slice's replica
`*.shared`). Its name and quantity are the container's, found in CEL; the rest of each line is fixed per policy.
The rules are said at their names' places among the maxima (maxima.py), as validation says a name's lines.

Where the model is unknown and `migProfiles` lists none, any profile is the pool's (`served_profile` says True):
no line, but its maximum (maxima.py).
"""

from __future__ import annotations

from webhook.admission.base.quantity import quantity_text
from webhook.admission.base.resources import (
    AMD_GPU,
    DEVICE_AMOUNTS,
    MEMORY_SLICE_RESOURCES,
    MIG_PREFIX,
    MIG_RESOURCE_RE2,
    NVIDIA_GPU,
    NVIDIA_GPU_SHARED,
    SHARED_SUFFIX,
    mig_resource,
)
from webhook.admission.native.cel import all_of, fill, lit, slot, strings
from webhook.admission.native.containers import count, has_map, value, whole_limit
from webhook.admission.native.family import ContainerRule
from webhook.admission.native.gaps import shape
from webhook.admission.native.migslices import slice_names
from webhook.admission.phases import validate
from webhook.admission.phases.validate import SERVED_WHAT, Rules
from webhook.admission.policy.model import Policy
from webhook.admission.sharing.mig import is_single, missing_profile_line, unoffered_profile_line
from webhook.admission.sharing.registry import backend_of

KEY = "k"  # a key of the container's limits, in the prefixed rules
NAME, SHOWN, WHAT, PROFILE = slot("name"), slot("shown"), slot("what"), slot("profile")


def other_pools(policy: Policy) -> list[str]:
    """Another pool's resources judged by name (validate._resource's `foreign`): the shared replica and the
    memory-sliced backends' resources, where the pool does not serve them."""
    if shape(policy) is None:
        return []
    served = Rules.of(policy).served
    return sorted(name for name in (NVIDIA_GPU_SHARED, *MEMORY_SLICE_RESOURCES) if name not in served)


def named(policy: Policy) -> list[str]:
    """Every resource the native set counts by name (its maxima, pod totals among them): `nvidia.com/gpu`, the
    pool's replica or slices, AMD's GPUs, `other_pools` but the amounts of one GPU (resources.DEVICE_AMOUNTS,
    which validation does not count), and the policy's GPU DeviceClasses' resources
    (`deviceclass.resource.kubernetes.io/gpu.nvidia.com`, ...); none where the policy's shape is not carried."""
    kind = shape(policy)
    if kind is None:
        return []
    if kind == "mig":
        own = slice_names(policy)
    elif kind == "memory":
        own = sorted(Rules.of(policy).served)  # the backend's resources (memshare.served)
    else:
        own = [backend_of(policy).shared_resource(policy.sharing) or NVIDIA_GPU]
    others = [name for name in other_pools(policy) if name not in DEVICE_AMOUNTS]
    return sorted({NVIDIA_GPU, AMD_GPU, *own, *others, *Rules.of(policy).class_names})


def judged_names(policy: Policy) -> set[str]:
    """Every resource the native set judges by name: `named`, `other_pools`, and the amounts of one GPU, which
    validation neither counts nor, where the pool is not another's, says a line of."""
    return {*named(policy), *other_pools(policy), *DEVICE_AMOUNTS} if shape(policy) is not None else set()


def prefixed(policy: Policy, key: str = KEY) -> str:
    """`key` (a limit's name) is a MIG resource judged by prefix: `nvidia.com/mig-*`, none of `named`."""
    known = [name for name in named(policy) if name.startswith(MIG_PREFIX)]
    outside = f" && !({key} in {strings(known)})" if known else ""
    return f"{key}.startsWith({lit(MIG_PREFIX)}){outside}"


def key_limit(key: str = KEY, var: str = "c") -> str:
    """The limit of `key` of the container `var`, a quantity string."""
    return f"{var}.resources.limits[{key}]"


def key_count(key: str = KEY, var: str = "c") -> str:
    """The limit of `key` of the container `var` as a number of devices, where it is whole."""
    return f"quantity({key_limit(key, var)}).asInteger()"


def held(policy: Policy, above: int, key: str = KEY) -> str:
    """`key` is judged by prefix and its limit is a whole number above `above`."""
    return all_of([prefixed(policy, key), f"quantity({key_limit(key)}).isInteger()", f"{key_count(key)} > {above}"])


def any_key(keep: str) -> str:
    """Whether any key of the container's limits keeps `keep`."""
    return f"{has_map('limits')} && c.resources.limits.exists({KEY}, {keep})"


def kept_keys(keep: str) -> str:
    """The keys of the container's limits that keep `keep`, in the map's order, which is none (maxima.in_order)."""
    return f"c.resources.limits.filter({KEY}, {keep})"


def named_rule(policy: Policy, name: str) -> ContainerRule:
    """A limit above 0 of `name` (one of `other_pools`): the pool's line for it."""
    gives, instead, _ = backend_of(policy).pool_words(policy, Rules.of(policy).served)
    shown = quantity_text(SHOWN)  # a quantity as the API server serializes it: a short string, quoted
    sentence = validate.not_served_line(name, shown, validate.served_what(name), policy.name, gives, instead)
    condition = all_of([whole_limit(name), f"{count(name)} > 0"])
    return ContainerRule(condition, fill(sentence, {"shown": value("limits", name)}))


def prefixed_line(policy: Policy) -> tuple[str, str]:
    """(whether the key `KEY`, an `nvidia.com/mig-*` limit above 0 outside `named`, has a line, the pool's line for
    it, as `_served` chooses it): maxima.mig_rule says it at its name's place."""
    rules = Rules.of(policy)
    gives, instead, _ = backend_of(policy).pool_words(policy, rules.served)
    valid = f"{KEY}.matches({lit(MIG_RESOURCE_RE2)}) && !{KEY}.endsWith({lit(SHARED_SUFFIX)})"
    # served_what, in its order (no MIG resource is a memory slice's name)
    what = f"{KEY}.endsWith({lit(SHARED_SUFFIX)}) ? {lit(SERVED_WHAT['shared'])} : {KEY}.matches("
    what += f"{lit(MIG_RESOURCE_RE2)}) ? {lit(SERVED_WHAT['mig'])} : {lit(SERVED_WHAT['other'])}"
    shown = quantity_text(SHOWN)
    exprs = {"name": KEY, "shown": key_limit(), "what": what, "profile": _profile()}
    line = fill(validate.not_served_line(NAME, shown, WHAT, policy.name, gives, instead), exprs)
    keep = held(policy, 0)
    # served_profile (MIG, mixed): a well-formed profile is the pool's where the model is unknown and none is
    # listed; else one the model does not have, or one the nodes do not offer, has a line of its own.
    if shape(policy) == "mig" and not is_single(policy.sharing):
        if rules.any_mig_profile:
            keep = f"{keep} && !({valid})"
        else:
            if rules.offered is not None:
                offered = unoffered_profile_line(NAME, shown, PROFILE, policy.name, rules.offered)
                line = f"({valid}) ? {fill(offered, exprs)} : {line}"
            model = rules.mig_model
            if model is not None:
                missing = missing_profile_line(NAME, shown, PROFILE, model, policy.name, rules.offered)
                has = strings(mig_resource(name) for name in model.profile_names())
                line = f"({valid}) && !({KEY} in {has}) ? {fill(missing, exprs)} : {line}"
    return keep, line


def _profile() -> str:
    """The profile of a well-formed `nvidia.com/mig-<profile>` key, as resources.mig_profile_of reads it (the
    resource's `.me` as the profile's `+me`, mig_resource's mapping read back): the pattern admits each part
    once."""
    media = "+me"
    dotted = mig_resource(media).removeprefix(MIG_PREFIX)
    return f"{KEY}.replace({lit(MIG_PREFIX)}, '').replace({lit(dotted)}, {lit(media)})"
