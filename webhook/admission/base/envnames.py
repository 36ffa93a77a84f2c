"""The environment variables that frameworks, MPS clients and the application read for their share of a GPU:
names only (what each means is phases/envhints.py's), shared by the hints, the sharing backends that add
their own (MPS) and validation, which reads a user's own value back.
"""

from __future__ import annotations

from fractions import Fraction

JAX_FRACTION_VARS = ("XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_CLIENT_MEM_FRACTION")
PYTORCH_CUDA_ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"
# PyTorch's device-neutral name (2.9+). PyTorch reads only one of the two: its CUDA allocator the CUDA one
# first, its accelerator config this one first (c10 CUDAAllocatorConfig.h, AllocatorConfig.cpp), so a user's
# PYTORCH_ALLOC_CONF gets the hint merged in rather than a PYTORCH_CUDA_ALLOC_CONF beside it that would hide it.
PYTORCH_ALLOC_CONF = "PYTORCH_ALLOC_CONF"
PYTORCH_FRACTION_KEY = "per_process_memory_fraction"
JAX_PREALLOCATE = "XLA_PYTHON_CLIENT_PREALLOCATE"
TF_ALLOW_GROWTH = "TF_FORCE_GPU_ALLOW_GROWTH"
CUPY_LIMIT = "CUPY_GPU_MEMORY_LIMIT"
TGI_FRACTION = "CUDA_MEMORY_FRACTION"
GENERIC_FRACTION = "GPU_MEMORY_FRACTION"
MPS_MEMORY_LIMIT = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
MPS_THREAD_PERCENTAGE = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
# Every name a hint can have (mutation looks only at these among a container's env entries).
ENV_HINT_NAMES = frozenset(
    {
        *JAX_FRACTION_VARS,
        JAX_PREALLOCATE,
        TF_ALLOW_GROWTH,
        CUPY_LIMIT,
        TGI_FRACTION,
        GENERIC_FRACTION,
        PYTORCH_CUDA_ALLOC_CONF,
        MPS_MEMORY_LIMIT,
        MPS_THREAD_PERCENTAGE,
    }
)


def whole_percent(fraction: Fraction) -> int:
    """A share as the whole percent an env value writes: rounded down, at least 1."""
    return max(1, int(fraction * 100))
