"""A correctly configured mixed GPU cluster, its Nodes labelled as GPU feature discovery labels them, and one
matching policy per node pool: the fixture of the drift tests (tests/test_clustercheck.py, test_cli_cluster.py).

The labels follow NVIDIA/k8s-device-plugin's label code, internal/lm:
- resource.go, baseLabeler: `<resource>.product`, `.count`, `.replicas` and `.sharing-strategy` for
  `nvidia.com/gpu` and for each `nvidia.com/mig-<profile>`; `.memory` (MiB, NVML) and the architecture
  (`.family`, `.compute.major`, `.compute.minor`) for whole GPUs. `replicas` is 0 where sharing is off (the
  GPUs that MIG slices: NewGPUResourceLabelerWithoutSharing), else the replicas of the sharing config (1 when
  not replicated); `sharing-strategy` is `none` unless replicated, then `time-slicing` or `mps`
  (api/config/v1/sharing.go). The product gets `-SHARED` when replicated and not renamed, and is
  `<model>-MIG-<profile>` for a MIG slice.
- mig-strategy.go and strategy.go: `nvidia.com/mig.strategy` on every node where the strategy is not none
  (the GPU Operator sets it cluster-wide, so whole-GPU nodes carry `mixed` too); under mixed, each slice type
  is labelled under its own resource with NVML's MIG attributes (`.memory`, `.multiprocessors`,
  `.slices.gi`, `.slices.ci`, `.engines.*`).
- nvml.go: `nvidia.com/mig.capable`, `nvidia.com/mps.capable` (true only under an MPS config).
"""

from __future__ import annotations

from typing import Any

from tests.test_clustercheck import node


def _gpu(product: str, count: int, replicas: int, strategy: str, memory: int, family: str, major: int) -> dict:
    return {
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.count": str(count),
        "nvidia.com/gpu.replicas": str(replicas),
        "nvidia.com/gpu.sharing-strategy": strategy,
        "nvidia.com/gpu.memory": str(memory),
        "nvidia.com/gpu.family": family,
        "nvidia.com/gpu.compute.major": str(major),
        "nvidia.com/gpu.compute.minor": "0",
    }


def _mig(profile: str, count: int, memory: int, multiprocessors: int, slices: int, copies: int) -> dict:
    key = f"nvidia.com/mig-{profile}"
    return {
        f"{key}.product": f"NVIDIA-A100-SXM4-80GB-MIG-{profile}",
        f"{key}.count": str(count),
        f"{key}.replicas": "1",
        f"{key}.sharing-strategy": "none",
        f"{key}.memory": str(memory),
        f"{key}.multiprocessors": str(multiprocessors),
        f"{key}.slices.gi": str(slices),
        f"{key}.slices.ci": str(slices),
        f"{key}.engines.copy": str(copies),
        f"{key}.engines.decoder": str(slices - 1 if slices > 1 else 0),
        f"{key}.engines.encoder": "0",
        f"{key}.engines.jpeg": "0",
        f"{key}.engines.ofa": "0",
    }


CAPABLE = {"nvidia.com/mig.capable": "true", "nvidia.com/mps.capable": "false", "nvidia.com/mig.strategy": "mixed"}
# Whole A100-80GB: no sharing config entry for nvidia.com/gpu, so 1 replica and no strategy.
WHOLE = {**CAPABLE, **_gpu("NVIDIA-A100-SXM4-80GB", 8, 1, "none", 81920, "ampere", 8)}
# A100-40GB time-sliced 4 ways, keeping the name nvidia.com/gpu (renameByDefault: false): -SHARED.
TIME_SLICED = {**CAPABLE, **_gpu("NVIDIA-A100-SXM4-40GB-SHARED", 8, 4, "time-slicing", 40960, "ampere", 8)}
# A100-80GB with MIG on every GPU (mixed): the GPUs are labelled without sharing (replicas 0), the slices apart.
MIG_GPUS = {**CAPABLE, **_gpu("NVIDIA-A100-SXM4-80GB", 8, 0, "none", 81920, "ampere", 8)}
MIG_1G = {**MIG_GPUS, **_mig("1g.10gb", 56, 9728, 14, 1, 1)}  # all-1g.10gb: 7 per GPU
MIG_3G = {**MIG_GPUS, **_mig("3g.40gb", 16, 40192, 42, 3, 3)}  # all-3g.40gb: 2 per GPU
# H100 under MPS, 8 replicas, renamed to nvidia.com/gpu.shared: no -SHARED, mps.capable.
MPS = {
    **CAPABLE,
    "nvidia.com/mps.capable": "true",
    **_gpu("NVIDIA-H100-80GB-HBM3", 8, 8, "mps", 81559, "hopper", 9),
}


def nodes(time_sliced: dict[str, str] = TIME_SLICED, sliced_gpus: int = 32) -> list[dict[str, Any]]:
    """The cluster's Nodes as the API sends them; `time_sliced` and `sliced_gpus` change that pool's labels and
    its allocatable replicas (a relabelled pool)."""
    return [
        node("a100-whole-0", {"nvidia.com/gpu": "8"}, WHOLE),
        node("a100-whole-1", {"nvidia.com/gpu": "8"}, WHOLE),
        node("a100-ts-0", {"nvidia.com/gpu": str(sliced_gpus)}, time_sliced),
        node("a100-ts-1", {"nvidia.com/gpu": str(sliced_gpus)}, time_sliced),
        node("a100-mig-1g-0", {"nvidia.com/mig-1g.10gb": "56"}, MIG_1G),
        node("a100-mig-3g-0", {"nvidia.com/mig-3g.40gb": "16"}, MIG_3G),
        node("h100-mps-0", {"nvidia.com/gpu.shared": "64"}, MPS),
    ]


# The time-sliced pool after its device plugin config went to 2 replicas: a real drift.
TWO_REPLICAS = {**TIME_SLICED, "nvidia.com/gpu.replicas": "2"}

NAMESPACES = ("default", "kube-system", "gpu-operator", "training", "notebooks", "research", "inference")


def _policy(name: str, namespaces: str, spec: str) -> str:
    head = f"apiVersion: gpu-admission.io/v1\nkind: GPUPolicy\nmetadata: {{name: {name}}}\n"
    return f"{head}spec:\n  namespaces: {namespaces}\n{spec}"


# One policy per pool; `*` gets whole GPUs. The kept-name time-slicing policy makes every whole-GPU policy
# steer (steering: auto), so that no whole-GPU pod lands on a time-sliced node.
POLICIES = "---\n".join(
    [
        _policy("default", '["*"]', ""),
        _policy("training", "[training]", "  gpu: {model: A100-80GB}\n"),
        _policy(
            "notebooks",
            "[notebooks]",
            "  sharing: {mode: time-slicing, replicas: 4, resourceName: nvidia.com/gpu}\n"
            "  gpu: {model: A100-40GB}\n  fractional: shared\n",
        ),
        _policy(
            "research",
            "[research]",
            "  sharing: {mode: mig, migProfile: 1g.10gb, migProfiles: [1g.10gb, 3g.40gb]}\n"
            "  gpu: {model: A100-80GB}\n  fractional: mig\n",
        ),
        _policy(
            "inference",
            "[inference]",
            "  sharing: {mode: mps, replicas: 8, resourceName: nvidia.com/gpu.shared}\n  gpu: {model: H100-80GB}\n",
        ),
    ]
)
