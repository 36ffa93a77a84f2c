"""NVIDIA's opaque DRA config (`GpuConfig`, `MigDeviceConfig` of NVIDIA/k8s-dra-driver-gpu
api/nvidia.com/resource/v1beta1): the sharing strategy it sets, read where claims are judged (dra/) and where
DeviceClasses join the cluster view (cluster/slices.py). Vocabulary only: which strategy a policy wants is the
sharing backends' to say.
"""

from __future__ import annotations

from typing import Any

NVIDIA_DRIVER = "gpu.nvidia.com"
NVIDIA_CONFIG_KINDS = ("GpuConfig", "MigDeviceConfig")


def config_strategy(opaque: Any, kinds: tuple[str, ...] = NVIDIA_CONFIG_KINDS) -> str | None:
    """The `sharing.strategy` of NVIDIA's opaque config of one of `kinds`, as written; None where it has none."""
    if type(opaque) is not dict or opaque.get("driver") != NVIDIA_DRIVER:
        return None
    parameters = opaque.get("parameters")
    if type(parameters) is not dict or parameters.get("kind") not in kinds:
        return None
    sharing = parameters.get("sharing")
    strategy = sharing.get("strategy") if type(sharing) is dict else None
    return strategy if type(strategy) is str else None


def class_strategy(configs: Any) -> str:
    """The sharing strategy a DeviceClass's own configs (`spec.config`) give NVIDIA's whole GPUs: that of its
    last GpuConfig (NVIDIA's driver applies a class's configs under the claim's, a later one over an earlier
    one), as written; "" where it has no GpuConfig or its last sets no strategy."""
    found = ""
    for config in configs if type(configs) is list else []:
        opaque = config.get("opaque") if type(config) is dict else None
        if is_gpu_config(opaque):
            found = config_strategy(opaque, ("GpuConfig",)) or ""
    return found


def gpu_config_strategies(configs: Any, unset: str | None = None) -> dict[str, str]:
    """The sharing strategy of each NVIDIA GpuConfig in `configs` (spec.devices.config), by the request it names
    (`gpu`, `gpu/big`), or by "" for one that names none (it applies to every request). With `unset`, a
    GpuConfig that sets no strategy is there too, as `unset`: it stands over its DeviceClass's configs."""
    strategies: dict[str, str] = {}
    for config in configs if type(configs) is list else []:
        opaque = config.get("opaque") if type(config) is dict else None
        strategy = config_strategy(opaque, ("GpuConfig",))
        if strategy is None and unset is not None and is_gpu_config(opaque):
            strategy = unset
        if strategy is None:
            continue
        refs = config.get("requests")
        for ref in refs if type(refs) is list and refs else [""]:
            if type(ref) is str:
                strategies[ref] = strategy
    return strategies


def is_gpu_config(opaque: Any) -> bool:
    if type(opaque) is not dict or opaque.get("driver") != NVIDIA_DRIVER:
        return False
    parameters = opaque.get("parameters")
    return type(parameters) is dict and parameters.get("kind") == "GpuConfig"


def config_covers(strategies: dict[str, str], ref: str) -> bool:
    """Whether `strategies` (`gpu_config_strategies`) has a config for request `ref` (`gpu` or `gpu/big`): one
    naming it, its request, or every request."""
    return ref in strategies or ref.split("/")[0] in strategies or "" in strategies
