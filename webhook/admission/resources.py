"""Which extended resources the webhook manages, and the MIG profile tables.

MIG tables follow NVIDIA's MIG user guide ("Supported MIG Profiles") and mig-parted's default config.
A profile name is `<compute slices>g.<nominal memory GB>gb`; `+me` variants (with media extensions) are
advertised by the device plugin's mixed strategy as `nvidia.com/mig-<slices>g.<mem>gb.me`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

NVIDIA_GPU = "nvidia.com/gpu"
NVIDIA_GPU_SHARED = "nvidia.com/gpu.shared"
MIG_PREFIX = "nvidia.com/mig-"
SHARED_SUFFIX = ".shared"

_MIG_RESOURCE = re.compile(r"^nvidia\.com/mig-(\d+g\.\d+gb(?:\.me)?)(\.shared)?$")


def is_managed(resource: str) -> bool:
    """GPU resources whose whole-number and request=limit rules the webhook enforces."""
    return (
        resource == NVIDIA_GPU
        or resource == NVIDIA_GPU_SHARED
        or resource.startswith(MIG_PREFIX)
        or resource == "amd.com/gpu"
        or resource.startswith("gpu.intel.com/")
    )


def is_shared(resource: str) -> bool:
    """A time-slicing or MPS replica rather than a whole device."""
    return resource.endswith(SHARED_SUFFIX)


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
    memory_gb: int  # nominal, from the name
    compute_slices: int

    @property
    def media_extensions(self) -> bool:
        return self.name.endswith("+me")


@dataclass(frozen=True, slots=True)
class GPUModel:
    name: str
    memory_mib: int  # nominal memory
    mig_profiles: tuple[MigProfile, ...]

    @property
    def memory_gb(self) -> int:
        return int(self.name.rsplit("-", 1)[1].removesuffix("GB"))

    def profile(self, name: str) -> MigProfile | None:
        return next((p for p in self.mig_profiles if p.name == name), None)

    def profile_names(self) -> list[str]:
        return [p.name for p in self.mig_profiles]


def _model(name: str, memory_mib: int, profiles: str) -> GPUModel:
    parsed = []
    for profile in profiles.split():
        slices, memory = profile.removesuffix("+me").split(".")
        parsed.append(MigProfile(profile, int(memory.removesuffix("gb")), int(slices.removesuffix("g"))))
    return GPUModel(name, memory_mib, tuple(parsed))


GPU_MODELS: dict[str, GPUModel] = {
    m.name: m
    for m in (
        _model("A30-24GB", 24 * 1024, "1g.6gb 1g.6gb+me 2g.12gb 2g.12gb+me 4g.24gb"),
        _model("A100-40GB", 40 * 1024, "1g.5gb 1g.5gb+me 1g.10gb 2g.10gb 3g.20gb 4g.20gb 7g.40gb"),
        _model("A100-80GB", 80 * 1024, "1g.10gb 1g.10gb+me 1g.20gb 2g.20gb 3g.40gb 4g.40gb 7g.80gb"),
        _model("H100-80GB", 80 * 1024, "1g.10gb 1g.10gb+me 1g.20gb 2g.20gb 3g.40gb 4g.40gb 7g.80gb"),
        _model("H100-NVL-94GB", 94 * 1024, "1g.12gb 1g.12gb+me 1g.24gb 2g.24gb 3g.47gb 4g.47gb 7g.94gb"),
        _model("H200-141GB", 141 * 1024, "1g.18gb 1g.18gb+me 1g.35gb 2g.35gb 3g.71gb 4g.71gb 7g.141gb"),
        _model("GH200-96GB", 96 * 1024, "1g.12gb 1g.12gb+me 1g.24gb 2g.24gb 3g.48gb 4g.48gb 7g.96gb"),
        _model("B200-180GB", 180 * 1024, "1g.23gb 1g.23gb+me 1g.45gb 2g.45gb 3g.90gb 4g.90gb 7g.180gb"),
    )
}


def smallest_profile_for(model: GPUModel, fraction: Fraction) -> MigProfile | None:
    """The smallest profile whose nominal memory is at least `fraction` of the model's, fewest slices on ties.

    Media-extension profiles are never picked: they cost the same slices and hold the GPU's only decoders.
    """
    needed = fraction * model.memory_gb
    candidates = [p for p in model.mig_profiles if not p.media_extensions and p.memory_gb >= needed]
    if not candidates:
        return None
    return min(candidates, key=lambda p: (p.memory_gb, p.compute_slices))
