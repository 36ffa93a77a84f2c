"""Which extended resources the webhook manages, and the MIG profile tables.

A profile name is `<compute slices>g.<nominal memory GB>gb`, optionally `+me` (with media extensions: the
GPU's decoders, at most one such instance per GPU). Sources, checked profile by profile:
- NVIDIA's MIG user guide, "Supported MIG Profiles" (A30, A100 40/80 GB, H100 80/94/96 GB, H200, B200): names,
  compute slices (the number before `g`) and which profiles carry `+me`.
- mig-parted's default config (NVIDIA/mig-parted, deployments/systemd/config-default.yaml): the same profile
  names per device, e.g. `all-1g.10gb` (A100-80GB, H100-80GB; 4 per A100-40GB), `all-1g.12gb` (H100 NVL, GH200),
  `all-1g.18gb` (H200-141GB), `all-1g.23gb` (B200), and the `all-balanced` layouts per device ID.
- The NVIDIA device plugin (NVIDIA/k8s-device-plugin, internal/rm/rm.go, AddDefaultResourcesToConfig): under
  the mixed strategy each profile is advertised as `"mig-" + profile` with `+` replaced by `.`, so `1g.10gb+me`
  becomes `nvidia.com/mig-1g.10gb.me`. Profiles whose compute instance is smaller than the GPU instance are not
  advertised at all.
Newer suffixes (`-me`, `+me.all`, `+gfx`, RTX PRO Blackwell only) are not in these tables.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from webhook.admission.base.memo import BoundedMemo

NVIDIA_GPU = "nvidia.com/gpu"
NVIDIA_GPU_SHARED = "nvidia.com/gpu.shared"
AMD_GPU = "amd.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
INTEL_PREFIX = "gpu.intel.com/"  # Intel's GPU device plugin: its devices (i915, xe) and amounts of one GPU
SHARED_SUFFIX = ".shared"

_MIG_RESOURCE = re.compile(r"^nvidia\.com/mig-(\d+g\.\d+gb(?:\.me)?)(\.shared)?$")
# The same names in RE2's syntax, for CEL's `matches` (the native policies): ASCII digits, no trailing newline
# (a resource name is a qualified name: ASCII, one line, so both read it alike).
MIG_RESOURCE_RE2 = r"^nvidia\.com/mig-[0-9]+g\.[0-9]+gb(\.me)?(\.shared)?$"
MIG_PROFILE_PATTERN = r"^[1-9]\d*g\.[1-9]\d*gb(?:\+me)?$"  # also the policy schema's (policyfields.py)
_MIG_PROFILE = re.compile(MIG_PROFILE_PATTERN)


# Dynamic Resource Allocation (resource.k8s.io/v1). Every DeviceClass can be asked for as an extended resource
# named after it (KEP-5004, kubernetes/kubernetes pkg/apis/resource/types.go `ResourceDeviceClassPrefix`), and
# NVIDIA's DRA driver (NVIDIA/k8s-dra-driver-gpu) ships the classes `gpu.nvidia.com` (whole GPUs: selector
# `device.attributes['gpu.nvidia.com'].type == 'gpu'`) and `mig.nvidia.com` (MIG devices: `type == 'mig'`).
DEVICE_CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"
NVIDIA_GPU_CLASSES = ("gpu.nvidia.com",)
NVIDIA_MIG_CLASSES = ("mig.nvidia.com",)
# The sharing strategy of NVIDIA's opaque `GpuConfig` (driver gpu.nvidia.com, apiVersion
# resource.nvidia.com/v1beta1: api/nvidia.com/resource/v1beta1/sharing.go) for each sharing mode that has one. A
# device with no GpuConfig gets the driver's default config, which shares nothing unless its alpha feature gate
# TimeSlicingSettings is on (gpuconfig.go DefaultGpuConfig): the claim holds its GPUs alone.
GPU_CONFIG_STRATEGIES = {"time-slicing": "TimeSlicing", "mps": "MPS"}  # policy sharing mode -> strategy


def device_class_of(resource: str) -> str | None:
    """`deviceclass.resource.kubernetes.io/gpu.nvidia.com` -> `gpu.nvidia.com`; None for other resources."""
    return resource[len(DEVICE_CLASS_PREFIX) :] if resource.startswith(DEVICE_CLASS_PREFIX) else None


def is_mig_profile_name(name: str) -> bool:
    """`1g.10gb` and `1g.10gb+me` are well-formed profile names; whether a GPU has them is `GPUModel.profile`."""
    return _MIG_PROFILE.match(name) is not None


# The memory-sliced backends' resources (memshare.py says what each is): a request for a share of one GPU's
# memory, its compute, or a count of virtual GPUs.
ACK_MEMORY = "aliyun.com/gpu-mem"
HAMI_MEMORY = "nvidia.com/gpumem"
HAMI_MEMORY_PERCENT = "nvidia.com/gpumem-percentage"
HAMI_CORES = "nvidia.com/gpucores"
VOLCANO_NUMBER = "volcano.sh/vgpu-number"
VOLCANO_MEMORY = "volcano.sh/vgpu-memory"
VOLCANO_MEMORY_PERCENT = "volcano.sh/vgpu-memory-percentage"
VOLCANO_CORES = "volcano.sh/vgpu-cores"
MEMORY_SLICE_RESOURCES = frozenset(
    {ACK_MEMORY, HAMI_MEMORY, HAMI_MEMORY_PERCENT, HAMI_CORES, VOLCANO_NUMBER, VOLCANO_MEMORY,
     VOLCANO_MEMORY_PERCENT, VOLCANO_CORES}
)  # fmt: skip


# The resources the webhook manages, by name and by prefix: `is_managed` reads them, and the native policies
# (native/) write the same tables into CEL. Any DeviceClass's implicit resource is one: an extended resource
# (whole, request = limit) whichever class; validation counts those of the policy's GPU classes as GPUs.
MANAGED_NAMES = (NVIDIA_GPU, NVIDIA_GPU_SHARED, AMD_GPU, *sorted(MEMORY_SLICE_RESOURCES))
MANAGED_PREFIXES = (MIG_PREFIX, INTEL_PREFIX, DEVICE_CLASS_PREFIX)


def _managed(resource: object) -> bool:
    return type(resource) is str and (resource in MANAGED_NAMES or resource.startswith(MANAGED_PREFIXES))


# Whether the webhook enforces GPU rules (whole numbers, request = limit) on a resource. Asked for every
# resource key of every container of every review, so memoized.
is_managed: Callable[[object], bool] = BoundedMemo(_managed).__getitem__


# Intel's GPU Aware Scheduling resources that are amounts of one GPU, not numbers of devices: thousandths of
# its compute, bytes of its memory, its tiles (intel-device-plugins-for-kubernetes, gpu_plugin fractional.md).
# Like every extended resource they are whole numbers with request = limit; the GPU maximums do not count them.
# The memory-sliced backends' memory and compute amounts are amounts of one GPU in the same way (memshare.py
# counts them as GPUs' worth of memory).
DEVICE_AMOUNTS = frozenset(
    {INTEL_PREFIX + "millicores", INTEL_PREFIX + "memory.max", INTEL_PREFIX + "tiles",
     *(MEMORY_SLICE_RESOURCES - {VOLCANO_NUMBER})}
)  # fmt: skip


def _shared(resource: object) -> bool:
    return type(resource) is str and resource.endswith(SHARED_SUFFIX)


# A time-slicing or MPS replica rather than a whole device. Asked for every limit of a container that holds
# a GPU, so memoized; a key that is not a string (YAML allows `5: 3`) is not one.
is_shared: Callable[[object], bool] = BoundedMemo(_shared).__getitem__


def mig_profile_of(resource: str) -> str | None:
    """`nvidia.com/mig-1g.10gb` -> `1g.10gb`; `nvidia.com/mig-1g.10gb.me` -> `1g.10gb+me`."""
    match = _MIG_RESOURCE.match(resource)
    if match is None:
        return None
    profile = match.group(1)
    return profile[:-3] + "+me" if profile.endswith(".me") else profile


def mig_resource(profile: str) -> str:
    """`1g.10gb` -> `nvidia.com/mig-1g.10gb`; `1g.10gb+me` -> `nvidia.com/mig-1g.10gb.me`."""
    return MIG_PREFIX + profile.replace("+", ".")


@dataclass(frozen=True, slots=True)
class MigProfile:
    name: str  # "1g.10gb"
    memory_gb: int  # nominal, from the name (rounded either way: H200's 1g.35gb is 2/8 of 141 GB, 35.25)
    compute_slices: int
    memory_share: Fraction  # of the GPU's memory: MIG hands it out in eighths (quarters on the A30)

    @property
    def media_extensions(self) -> bool:
        return self.name.endswith("+me")


@dataclass(frozen=True, slots=True)
class GPUModel:
    name: str
    memory_mib: int  # as NVML (nvidia-smi) reports it where known, else the nominal GB in GiB
    mig_profiles: tuple[MigProfile, ...]

    @property
    def memory_gb(self) -> int:
        return _nominal_gb(self.name)

    def profile(self, name: str) -> MigProfile | None:
        return next((p for p in self.mig_profiles if p.name == name), None)

    def profile_names(self) -> list[str]:
        return [p.name for p in self.mig_profiles]


def _nominal_gb(model_name: str) -> int:
    """`A100-80GB` -> 80: the memory in the model's name."""
    return int(model_name.rsplit("-", 1)[1].removesuffix("GB"))


def _model(name: str, memory_mib: int, profiles: str, memory_slices: int = 8) -> GPUModel:
    """A model and its profiles; each profile's memory share is its nominal size in the GPU's memory slices
    (the guide's "Fraction of Memory" column), rounded to the nearest slice as the names are."""
    model_gb = _nominal_gb(name)
    parsed = []
    for profile in profiles.split():
        slices, memory = profile.removesuffix("+me").split(".")
        memory_gb = int(memory.removesuffix("gb"))
        share = Fraction(round(Fraction(memory_gb * memory_slices, model_gb)), memory_slices)
        parsed.append(MigProfile(profile, memory_gb, int(slices.removesuffix("g")), share))
    return GPUModel(name, memory_mib, tuple(parsed))


GPU_MODELS: dict[str, GPUModel] = {
    m.name: m
    for m in (
        _model("A30-24GB", 24 * 1024, "1g.6gb 1g.6gb+me 2g.12gb 2g.12gb+me 4g.24gb", memory_slices=4),
        _model("A100-40GB", 40 * 1024, "1g.5gb 1g.5gb+me 1g.10gb 2g.10gb 3g.20gb 4g.20gb 7g.40gb"),
        _model("A100-80GB", 80 * 1024, "1g.10gb 1g.10gb+me 1g.20gb 2g.20gb 3g.40gb 4g.40gb 7g.80gb"),
        # NVML reports 81,559 MiB on an H100 80GB and 143,771 MiB on an H200: less than the name in GiB, and an
        # MPS share of the nominal size would add up to more than the GPU has.
        _model("H100-80GB", 81_559, "1g.10gb 1g.10gb+me 1g.20gb 2g.20gb 3g.40gb 4g.40gb 7g.80gb"),
        _model("H100-NVL-94GB", 94 * 1024, "1g.12gb 1g.12gb+me 1g.24gb 2g.24gb 3g.47gb 4g.47gb 7g.94gb"),
        _model("H200-141GB", 143_771, "1g.18gb 1g.18gb+me 1g.35gb 2g.35gb 3g.71gb 4g.71gb 7g.141gb"),
        _model("GH200-96GB", 96 * 1024, "1g.12gb 1g.12gb+me 1g.24gb 2g.24gb 3g.48gb 4g.48gb 7g.96gb"),
        _model("B200-180GB", 180 * 1024, "1g.23gb 1g.23gb+me 1g.45gb 2g.45gb 3g.90gb 4g.90gb 7g.180gb"),
    )
}


def offered_profiles(model: GPUModel, offered: tuple[str, ...] | None) -> list[MigProfile]:
    """The model's profiles that the nodes offer (`sharing.migProfiles`; None: all of them), in table order."""
    return [p for p in model.mig_profiles if offered is None or p.name in offered]


def smallest_profile_for(
    model: GPUModel, fraction: Fraction, offered: tuple[str, ...] | None = None
) -> MigProfile | None:
    """The smallest profile holding at least `fraction` of the model's memory, fewest compute slices on ties,
    among those the nodes offer (`offered`; None: every profile of the model).

    Media-extension profiles are never picked: they cost the same slices and hold the GPU's only decoders.
    """
    candidates = [p for p in offered_profiles(model, offered) if not p.media_extensions and p.memory_share >= fraction]
    if not candidates:
        return None
    return min(candidates, key=lambda p: (p.memory_share, p.compute_slices))


def slices_fractions_become(
    model: GPUModel, offered: tuple[str, ...] | None = None
) -> list[tuple[Fraction, MigProfile]]:
    """Each slice a fraction below one GPU becomes (smallest_profile_for), with the largest fraction that becomes
    it: `[(1/8, 1g.10gb), (1/4, 1g.20gb), (1/2, 3g.40gb), (1, 7g.80gb)]` for every profile of an A100-80GB."""
    found: dict[str, tuple[Fraction, MigProfile]] = {}
    for profile in offered_profiles(model, offered):
        chosen = smallest_profile_for(model, profile.memory_share, offered)
        if chosen is not None and chosen.name not in found:
            found[chosen.name] = (chosen.memory_share, chosen)
    return sorted(found.values(), key=lambda item: item[0])
