"""MIG slices (`sharing.mode: mig`): the GPUs are cut into MIG devices, advertised by profile
(`nvidia.com/mig-<profile>`, the device plugin's migStrategy mixed) or, where every GPU of a node is cut into
one profile, as `nvidia.com/gpu` (migStrategy single). `nvidia.com/gpu: N` becomes `migProfile`'s resource
under mixed; the nodes' layout (`migProfiles`) is what the pool serves.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING

from webhook.admission.base.equivalents import format_gpus
from webhook.admission.base.quantity import exact_text
from webhook.admission.base.resources import (
    GPU_MODELS,
    MIG_PREFIX,
    NVIDIA_GPU,
    GPUModel,
    mig_resource,
    offered_profiles,
)
from webhook.admission.cluster.nodes import GI_SLICES_LABEL, MIG_STRATEGY_LABEL, PRODUCT_LABEL, mig_counts
from webhook.admission.policy.model import Fractional, MigStrategy, Mode
from webhook.admission.sharing.backend import (
    DRA_APART,
    WHOLE_GPU,
    DeviceKind,
    LabelRequirement,
    ModeRules,
    NodeDrift,
    ProductFit,
    QuotaEntry,
    SharingBackend,
)

if TYPE_CHECKING:
    from webhook.admission.cluster.nodes import NodeInfo
    from webhook.admission.policy.model import Policy, Sharing

# CUDA enumerates one MIG device per process, and slices have no NVLink/P2P between them: two slices in one
# container are not a 2-GPU machine (validate.py cites the MIG user guide).
MIG_MAX_PER_CONTAINER = 1


def is_single(sharing: Sharing) -> bool:
    """MIG slices advertised as `nvidia.com/gpu`, one profile per node (the device plugin's migStrategy single)."""
    return sharing.mode is Mode.MIG and sharing.mig_strategy is MigStrategy.SINGLE


def profiles_offered(policy: Policy) -> tuple[str, ...]:
    """The MIG profiles the policy says its nodes have: `migProfiles`, else the one `migProfile` converts to."""
    sharing = policy.sharing
    if sharing.mig_profiles is not None:
        return sharing.mig_profiles
    return (sharing.mig_profile,) if sharing.mig_profile else ()


def slice_weight(profile: str, model: GPUModel | None) -> Fraction:
    """One MIG slice in GPU-equivalents, in any mode and on any route (`nvidia.com/mig-<profile>`, a DRA
    `mig.nvidia.com` device): its dominant share, max(compute slices / the GPU's, memory share of the GPU), so
    that on an A100-80GB 1g.10gb is 1/7 (seven fill the compute) and 3g.40gb 1/2 (two fill the memory). Without
    a known model, the largest weight any model in resources.GPU_MODELS gives the profile (1 if none has it)."""
    if model is None:
        known = [slice_weight(profile, m) for m in GPU_MODELS.values() if m.profile(profile) is not None]
        return max(known, default=WHOLE_GPU)
    found = model.profile(profile)
    if found is None:
        return WHOLE_GPU
    compute = max(p.compute_slices for p in model.mig_profiles)
    return max(Fraction(found.compute_slices, compute), found.memory_share)


def model_of(policy: Policy) -> GPUModel | None:
    """The policy's GPU model, whose profiles the MIG weights read."""
    return GPU_MODELS.get(policy.gpu.model or "")


def slice_words(profile: str, count: str, amount: Fraction) -> str:
    """`one 3g.40gb MIG slice`, `2 1g.10gb MIG slices`: a container's slices for people."""
    return f"{'one' if amount == 1 else count} {profile} MIG slice{'s' if amount != 1 else ''}"


def missing_profile_line(
    name: str, shown: str, profile: str, model: GPUModel, policy: str, offered: tuple[str, ...] | None
) -> str:
    """A MIG profile the policy's model does not have (`served_profile`; template: the native policies fill it
    too). The advice is what the nodes offer: another profile of the model that they do not offer would be the
    next denial."""
    choices = [p.name for p in offered_profiles(model, offered)] or model.profile_names()
    return (
        f"{name} {shown} asks for MIG profile {profile}, which {model.name} does not have "
        f'(policy "{policy}"); use one of {", ".join(choices)}'
    )


def unoffered_profile_line(name: str, shown: str, profile: str, policy: str, offered: tuple[str, ...]) -> str:
    """A MIG profile the nodes' layout (`migProfiles`) does not offer (`served_profile`; template: the native
    policies fill it too)."""
    return (
        f"{name} {shown} asks for MIG profile {profile}, which the nodes' MIG layout does not offer "
        f'(policy "{policy}" offers {", ".join(offered)}): the pod would stay Pending; use one of those'
    )


class Mig(SharingBackend):
    name = "mig"
    hands_out = "mig-slice"

    def serves(self, policy: Policy, mig_model: GPUModel | None) -> frozenset[str]:
        sharing = policy.sharing
        if is_single(sharing):
            return frozenset({NVIDIA_GPU})
        profiles = sharing.mig_profiles or (tuple(mig_model.profile_names()) if mig_model else ())
        if sharing.mig_profile:
            profiles = (*profiles, sharing.mig_profile)
        return frozenset({NVIDIA_GPU, *(mig_resource(profile) for profile in profiles)})

    def holds(self, policy: Policy) -> Callable[[str], bool]:
        sharing = policy.sharing
        if is_single(sharing):
            return NVIDIA_GPU.__eq__
        if sharing.mig_profiles is None:
            return lambda resource: resource.startswith(MIG_PREFIX)
        return frozenset(map(mig_resource, sharing.mig_profiles)).__contains__

    def replica_resource(self, sharing: Sharing) -> str | None:
        return NVIDIA_GPU if is_single(sharing) else None

    def default_per_container(self, device: DeviceKind) -> int:
        return MIG_MAX_PER_CONTAINER if device == "mig-slice" else super().default_per_container(device)

    def mapping_target(self, sharing: Sharing) -> str | None:
        return mig_resource(sharing.mig_profile) if sharing.mig_profile else None

    def pool_words(self, policy: Policy, served: frozenset[str]) -> tuple[str, str, str]:
        sharing = policy.sharing
        if is_single(sharing):
            gives = f"one {sharing.mig_profile} MIG slice per {NVIDIA_GPU} (migStrategy single)"
            return gives, f"{NVIDIA_GPU} instead", f"ask for {NVIDIA_GPU}"
        target = mig_resource(sharing.mig_profile) if sharing.mig_profile else None
        offered = sorted(name for name in served if name != NVIDIA_GPU)
        listed = ", ".join(offered) if offered else f"{MIG_PREFIX}<profile>"
        into = f" (it becomes {target})" if target else ""
        return f"MIG slices ({listed})", f"{NVIDIA_GPU}: 1{into} or one of those", f"ask for {NVIDIA_GPU}: 1"

    def offer(self, policy: Policy) -> str:
        where = f'policy "{policy.name}"'
        if is_single(policy.sharing):
            return f"request {NVIDIA_GPU}: 1, which is one {policy.sharing.mig_profile} MIG slice under {where}"
        if policy.sharing.mig_profile:
            return f"request {NVIDIA_GPU}: 1, which {where} turns into {mig_resource(policy.sharing.mig_profile)}"
        return super().offer(policy)

    def short_offer(self, policy: Policy) -> str:
        if policy.sharing.mig_profile:
            return f"ask for {NVIDIA_GPU}: 1 instead"
        return super().short_offer(policy)

    def single_slice(self, policy: Policy) -> str | None:
        return (policy.sharing.mig_profile or "") if is_single(policy.sharing) else None

    def kept_name_words(self, policy: Policy) -> str:
        sharing = policy.sharing
        return f"{sharing.mig_profile} MIG slice" if is_single(sharing) else super().kept_name_words(policy)

    def rules(self, policy: Policy) -> ModeRules:
        sharing = policy.sharing
        explicit = policy.limits.max_per_container
        mig_model = GPU_MODELS.get(policy.gpu.model or "")
        return ModeRules(
            mig_model=mig_model,
            offered=sharing.mig_profiles,
            one_mig_slice=explicit is None,
            mig_single_resource=NVIDIA_GPU if is_single(sharing) else None,
            any_mig_profile=not is_single(sharing) and mig_model is None and sharing.mig_profiles is None,
        )

    def served_profile(
        self, name: str, shown: str, profile: str, policy: Policy, rules: ModeRules
    ) -> tuple[str, str] | bool | None:
        """A MIG resource in a MIG namespace: any profile where the model is unknown and none is listed (True:
        served), a profile the model does not have, or one the nodes' layout does not offer (the line, and the
        short form after the name); None: judged by the pool's resources (`serves`)."""
        model = rules.mig_model
        if rules.any_mig_profile or is_single(policy.sharing):
            return True if rules.any_mig_profile else None
        if model is not None and model.profile(profile) is None:
            return (
                missing_profile_line(name, shown, profile, model, policy.name, rules.offered),
                f"no such MIG profile on {model.name}; ask for one it has",
            )
        if rules.offered is not None:
            return (
                unoffered_profile_line(name, shown, profile, policy.name, rules.offered),
                "not offered here; ask for a MIG slice the policy lists",
            )
        return None

    def node_requirements(self, policy: Policy) -> tuple[LabelRequirement, ...]:
        sharing = policy.sharing
        if not is_single(sharing):
            return ()  # MIG mixed: `nvidia.com/mig-<profile>` exists only on nodes with that slice
        slices = sharing.mig_profile.split("g.", 1)[0] if sharing.mig_profile else None
        return (
            (MIG_STRATEGY_LABEL, "In", ("single",)),
            (GI_SLICES_LABEL, "In", (slices,)) if slices else (GI_SLICES_LABEL, "Exists", ()),
        )

    def product_rule(self, policy: Policy, product_label: str) -> str | None:
        sharing = policy.sharing
        if is_single(sharing) and sharing.mig_profile:
            return f"{product_label} ending in -MIG-{sharing.mig_profile.replace('+', '')}"
        return None

    def product_fit(self, policy: Policy) -> ProductFit:
        sharing = policy.sharing
        if is_single(sharing) and sharing.mig_profile:
            return ProductFit(ends="-MIG-" + sharing.mig_profile.replace("+", ""))
        return ProductFit()

    def node_pool(self, policy: Policy, nodes: Sequence[NodeInfo]) -> tuple[NodeInfo, ...]:
        return tuple(n for n in nodes if n.labels.get(MIG_STRATEGY_LABEL) in ("single", "mixed") or mig_counts(n))

    def layout_drift(self, policy: Policy, node: NodeInfo) -> list[NodeDrift]:
        """Where a MIG node's layout has none of the profiles the policy offers (`migProfiles`, else
        `migProfile`), or is advertised under another strategy or slice size."""
        sharing = policy.sharing
        if not sharing.mig_profile:
            return []
        profile = sharing.mig_profile
        effect = f"pods converted to {mig_resource(profile)} cannot run there"
        if is_single(sharing):
            product = node.labels.get(PRODUCT_LABEL, "")
            sliced = product.rsplit("-MIG-", 1)[1] if "-MIG-" in product else None
            if sliced is None or sliced == profile.replace("+", ""):
                return []
            return [
                (
                    "sharing.migProfile",
                    f"{sliced} slices (mig.strategy single)",
                    profile,
                    f"pods are told a {NVIDIA_GPU} is a {profile} slice, but it is a {sliced} one",
                    f"set sharing.migProfile: {sliced}, or change the nodes' MIG layout (mig-parted)",
                )
            ]
        counts = mig_counts(node)
        if node.labels.get(MIG_STRATEGY_LABEL) == "single":
            says = f"mig.strategy single (MIG devices advertised as {NVIDIA_GPU})"
        elif counts and not counts.keys() & set(profiles_offered(policy)):
            says = ", ".join(f"{name} x{count}" for name, count in sorted(counts.items()))
            if node.sliced:  # DRA's MIG devices (cluster/slices.merge): no device plugin strategy to change
                says += " (MIG devices in ResourceSlices)"
        else:
            return []
        layout = "change their MIG layout (mig-parted)" + ("" if node.sliced else " and use mig.strategy mixed")
        if sharing.mig_profiles is not None:
            return [
                (
                    "sharing.migProfiles",
                    says,
                    ", ".join(sharing.mig_profiles),
                    f"pods converted to {', '.join(map(mig_resource, sharing.mig_profiles))} cannot run there",
                    f"list the profiles the nodes have in sharing.migProfiles, or {layout}",
                )
            ]
        return [
            (
                "sharing.migProfile",
                says,
                profile,
                effect,
                f"set sharing.migProfile to a profile the nodes have, or {layout}",
            )
        ]

    def pool_drift(self, policy: Policy, nodes: Sequence[NodeInfo]) -> list[tuple[NodeInfo, NodeDrift]]:
        """Every node has a listed profile, but none has the one that `nvidia.com/gpu` converts to."""
        sharing = policy.sharing
        listed = not is_single(sharing) and sharing.mig_profiles is not None
        if not (listed and sharing.mig_profile and not any(sharing.mig_profile in mig_counts(n) for n in nodes)):
            return []
        return [
            (
                node,
                (
                    "sharing.migProfile",
                    f"no {sharing.mig_profile} slice",
                    sharing.mig_profile,
                    f"pods converted to {mig_resource(sharing.mig_profile)} cannot run there",
                    "set sharing.migProfile to a profile of migProfiles the nodes have, or change their MIG "
                    "layout (mig-parted)",
                ),
            )
            for node in nodes
            if mig_counts(node)
        ]

    def config_mismatch(self, policy: Policy) -> tuple[str, str]:
        return f'policy "{policy.name}" shares GPUs as MIG slices (mode mig)', "remove sharing and ask for a MIG device"

    def not_offered(self, policy: Policy, resource: str) -> tuple[str, str, str] | None:
        sharing = policy.sharing
        if not (sharing.mig_profile and resource == mig_resource(sharing.mig_profile)):
            return None
        return (
            f", which the policy converts {NVIDIA_GPU} to",
            "check the nodes' MIG layout and mig.strategy (mixed), or set sharing.migProfile to one they have",
            "check the nodes' MIG layout",
        )

    def describe(self, policy: Policy) -> str:
        sharing = policy.sharing
        if is_single(sharing):
            return f'policy "{policy.name}" (mig single, {sharing.mig_profile} slices)'
        return f'policy "{policy.name}" ({sharing.mode}: whole GPUs)'  # mixed: as the lines have always said

    def explain_mode(self, policy: Policy) -> str:
        sharing = policy.sharing
        if is_single(sharing):
            return f"mig (single): nvidia.com/gpu is one {sharing.mig_profile} slice"
        return f"mig: one GPU becomes nvidia.com/mig-{sharing.mig_profile}"

    def native_shape(self, policy: Policy) -> str | None:
        """Compiled where `nvidia.com/gpu` is a MIG slice or becomes one (native/migslices.py): migStrategy single,
        or a `migProfile` it is renamed to (the loader requires one: only a policy built in code has none)."""
        return "mig" if is_single(policy.sharing) or policy.sharing.mig_profile else None

    def native_gap(self) -> tuple[str, str]:
        return (
            f"mode mig without migProfile ({NVIDIA_GPU} a whole GPU beside the nodes' MIG profiles)",
            "not compiled yet",
        )

    def explain_share(self, policy: Policy) -> str:
        sharing = policy.sharing
        model = GPU_MODELS.get(policy.gpu.model or "")
        if model is None:
            return f"one GPU is a nvidia.com/mig-{sharing.mig_profile} slice"
        slices = ", ".join(
            f"{p.name} ({exact_text(p.memory_share)} of the memory)"
            for p in offered_profiles(model, sharing.mig_profiles)
        )
        offered = "offered" if sharing.mig_profiles is not None else f"every profile of {model.name}"
        return f"MIG slices of {model.name}, {self.max_per_container(policy)} per container; {offered}: {slices}"

    def unit_weight(self, policy: Policy, resource: str) -> Fraction | None:
        sharing = policy.sharing
        if resource == NVIDIA_GPU and is_single(sharing):  # the single strategy's one profile
            return slice_weight(sharing.mig_profile, model_of(policy)) if sharing.mig_profile else WHOLE_GPU
        return super().unit_weight(policy, resource)

    def weight_units(self, policy: Policy) -> list[tuple[str, Fraction, str]]:
        sharing, model = policy.sharing, model_of(policy)
        if is_single(sharing) and sharing.mig_profile:
            return [(NVIDIA_GPU, slice_weight(sharing.mig_profile, model), f"a {sharing.mig_profile} MIG slice")]
        profiles = sharing.mig_profiles or (
            tuple(model.profile_names()) if model else ((sharing.mig_profile,) if sharing.mig_profile else ())
        )
        found = [(mig_resource(p), slice_weight(p, model), f"a {p} MIG slice") for p in profiles]
        return [*found, (NVIDIA_GPU, WHOLE_GPU, "a whole GPU")]

    def device_profile(self, policy: Policy) -> str | None:
        return policy.sharing.mig_profile or None

    def amount_words(self, policy: Policy, resource: str, count: str, amount: Fraction) -> str | None:
        sharing = policy.sharing
        if resource == NVIDIA_GPU and is_single(sharing) and sharing.mig_profile:
            return slice_words(sharing.mig_profile, count, amount)
        return None

    def quota_entry(self, policy: Policy) -> QuotaEntry:
        sharing = policy.sharing
        if is_single(sharing):
            return super().quota_entry(policy)
        profiles = sharing.mig_profiles or ((sharing.mig_profile,) if sharing.mig_profile else ())
        if len(profiles) == 1 and (policy.fractional is not Fractional.MIG or sharing.mig_profiles):
            profile = profiles[0]
            weight = slice_weight(profile, model_of(policy))
            exact = "" if (1 / weight).denominator == 1 else f" (rounded down: one slice is {format_gpus(weight)} GPU)"
            return QuotaEntry(mig_resource(profile), 1 / weight, f"{profile} slices per GPU{exact}" + DRA_APART)
        return QuotaEntry(
            None,
            Fraction(0),
            "MIG profiles mix (a fraction becomes the slice that holds it): the webhook's budget judges them",
        )

    def kept_name_units(self, policy: Policy) -> str:
        return "MIG slices"
