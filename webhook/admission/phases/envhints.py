"""The environment variables that make frameworks stay inside their share of a GPU.

Frameworks grab most of a GPU by default (JAX preallocates 75%, TensorFlow maps nearly all of it), so
containers sharing one GPU crash each other. Each framework honours its own variable:

- jax: `XLA_PYTHON_CLIENT_MEM_FRACTION` caps XLA's allocator at that fraction of the GPU's memory, and
  `XLA_PYTHON_CLIENT_PREALLOCATE=false` makes it grow on demand instead of grabbing the cap up front.
  The fraction is lowered by `JAX_CONTEXT_HEADROOM_MIB` of the GPU (2% when the memory is unknown): the CUDA
  context, cuBLAS/cuDNN handles and module images live outside XLA's allocator but inside the share.
  JAX refuses to start when both `XLA_PYTHON_CLIENT_MEM_FRACTION` and `XLA_CLIENT_MEM_FRACTION` are set, so
  the jax hint is skipped whole when the user set either.
- tensorflow: `TF_FORCE_GPU_ALLOW_GROWTH=true` (TensorFlow has no fraction variable; growth avoids the grab).
- cupy: `CUPY_GPU_MEMORY_LIMIT=<percent>%` caps CuPy's memory pool.
- tgi: `CUDA_MEMORY_FRACTION` is Text Generation Inference's cap: its free memory for the KV cache is
  `max(0, free - (1 - fraction) * total)` (text-generation-inference server/text_generation_server/utils/
  import_utils.py, get_cuda_free_memory). Not under MPS: there the free memory is the client's capped share, so
  any fraction below 1 - share leaves it no KV cache, and its default (1) already stays within the share.
- generic: `GPU_MEMORY_FRACTION`, for any application to read.
- pytorch (opt-in): `per_process_memory_fraction:<f>` in `PYTORCH_CUDA_ALLOC_CONF` (merged into the user's
  `PYTORCH_ALLOC_CONF` instead when that is set); opt-in because PyTorch up to 2.9 rejects the unknown key.
- MPS mode, always: `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=<MiB>M` and `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`, which
  the MPS server enforces for the client's device 0 (the one device a shared container sees).

Values are rounded down so a container never gets more than its share.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from webhook.admission.base.envnames import (
    CUPY_LIMIT,
    GENERIC_FRACTION,
    JAX_FRACTION_VARS,
    JAX_PREALLOCATE,
    PYTORCH_ALLOC_CONF,
    PYTORCH_CUDA_ALLOC_CONF,
    PYTORCH_FRACTION_KEY,
    TF_ALLOW_GROWTH,
    TGI_FRACTION,
    whole_percent,
)
from webhook.admission.base.memo import BoundedMemo
from webhook.admission.base.quantity import format_fraction
from webhook.admission.policy.model import Policy
from webhook.admission.sharing.registry import backend_of

JAX_CONTEXT_HEADROOM_MIB = 512
JAX_DEFAULT_HEADROOM = Fraction(2, 100)


@dataclass(frozen=True, slots=True)
class EnvHint:
    framework: str
    name: str  # one of ENV_HINT_NAMES
    value: str
    # The container env entry, made once: mutation puts this one dict into every container that gets the hint
    # (making, and later freeing, two dicts per variable was a twentieth of a review). Results are read-only.
    entry: dict[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "entry", {"name": self.name, "value": self.value})


def jax_fraction(fraction: Fraction, gpu_memory_mib: int | None) -> Fraction:
    headroom = Fraction(JAX_CONTEXT_HEADROOM_MIB, gpu_memory_mib) if gpu_memory_mib else JAX_DEFAULT_HEADROOM
    lowered = fraction - headroom
    return lowered if lowered > 0 else fraction / 2


def hints_for(policy: Policy, fraction: int | Fraction) -> tuple[EnvHint, ...]:
    """Every variable this policy injects into a container that may use `fraction` of a GPU (memoized)."""
    return policy.derived("env-hints", _hints_memo)[fraction]


def _hints_memo(policy: Policy) -> BoundedMemo[int | Fraction, tuple[EnvHint, ...]]:
    # Fractions come from user input: bounded, on its own (the policy's other derived values stay).
    return BoundedMemo(lambda fraction: _hints(policy, Fraction(fraction)), limit=1024)


def _hints(policy: Policy, fraction: Fraction) -> tuple[EnvHint, ...]:
    f = format_fraction(fraction)
    memory = policy.gpu_memory_mib
    backend = backend_of(policy)
    skipped = backend.frameworks_skipped()  # TGI under MPS (module doc)
    hints: list[EnvHint] = []
    for framework in policy.framework_env:
        if framework == "jax":
            hints.append(EnvHint("jax", JAX_FRACTION_VARS[0], format_fraction(jax_fraction(fraction, memory))))
            hints.append(EnvHint("jax", JAX_PREALLOCATE, "false"))
        elif framework == "tensorflow":
            hints.append(EnvHint("tensorflow", TF_ALLOW_GROWTH, "true"))
        elif framework == "cupy":
            hints.append(EnvHint("cupy", CUPY_LIMIT, f"{whole_percent(fraction)}%"))
        elif framework == "tgi":
            if "tgi" not in skipped:
                hints.append(EnvHint("tgi", TGI_FRACTION, f))
        elif framework == "generic":
            hints.append(EnvHint("generic", GENERIC_FRACTION, f))
        elif framework == "pytorch":
            hints.append(EnvHint("pytorch", PYTORCH_CUDA_ALLOC_CONF, f"{PYTORCH_FRACTION_KEY}:{f}"))
    hints += [EnvHint(*hint) for hint in backend.env_hints(policy, fraction, memory)]  # MPS's client limits
    return tuple(hints)


def merge_alloc_conf(existing: str, hint_value: str) -> str | None:
    """The user's allocator config with our key added, or None when the user already chose one."""
    keys = [item.split(":", 1)[0].strip() for item in existing.split(",") if item.strip()]
    if PYTORCH_FRACTION_KEY in keys:
        return None
    return f"{existing.rstrip(',')},{hint_value}" if existing.strip() else hint_value


# --- A user's own memory variable, read back (validation denies one above the container's share) -------------

MEBIBYTE = 1024 * 1024
# The variables whose value says how much of the GPU's memory a framework may take, and who reads each.
MEMORY_VARIABLES = {
    JAX_FRACTION_VARS[0]: "JAX",
    JAX_FRACTION_VARS[1]: "JAX",
    TGI_FRACTION: "Text Generation Inference",
    GENERIC_FRACTION: "the application",
    CUPY_LIMIT: "CuPy",
    PYTORCH_CUDA_ALLOC_CONF: "PyTorch",
    PYTORCH_ALLOC_CONF: "PyTorch",
}


def memory_claim(name: str, value: str, gpu_memory_mib: int | None) -> Fraction | None:
    """The fraction of the GPU's memory that `name=value` lets its framework take, or None where the value
    says nothing this can judge (not a number, a CuPy byte count with the GPU's memory unknown, an allocator
    config without the fraction key). Frameworks read a decimal (`0.9`); CuPy a percentage or a byte count."""
    text = value.strip()
    if name in (PYTORCH_CUDA_ALLOC_CONF, PYTORCH_ALLOC_CONF):
        text = _alloc_conf_fraction(text) or ""
    elif name == CUPY_LIMIT:
        if text.endswith("%"):
            number = _decimal(text[:-1])
            return number / 100 if number is not None else None
        number = _decimal(text)
        return number / (gpu_memory_mib * MEBIBYTE) if number is not None and gpu_memory_mib else None
    return _decimal(text)


def memory_value(name: str, share: Fraction, gpu_memory_mib: int | None) -> str:
    """What to write in `name` for a container that may use `share` of a GPU, as the webhook's own hint for it
    writes it (for PyTorch's allocator config, the one key: the user's other keys stay)."""
    if name in JAX_FRACTION_VARS:
        return format_fraction(jax_fraction(share, gpu_memory_mib))
    if name == CUPY_LIMIT:
        return f"{whole_percent(share)}%"
    if name in (PYTORCH_CUDA_ALLOC_CONF, PYTORCH_ALLOC_CONF):
        return f"{PYTORCH_FRACTION_KEY}:{format_fraction(share)}"
    return format_fraction(share)


def _alloc_conf_fraction(conf: str) -> str | None:
    for item in conf.split(","):
        key, _, number = item.partition(":")
        if key.strip() == PYTORCH_FRACTION_KEY:
            return number
    return None


def _decimal(text: str) -> Fraction | None:
    """A non-negative decimal as frameworks parse it (`0.9`, `.93`, `1e-1`), exactly; None otherwise."""
    return _DECIMALS[text] if text and len(text) <= 32 else None


def _parse_decimal(text: str) -> Fraction | None:
    try:
        number = Fraction(text.strip())
    except (ValueError, ZeroDivisionError):
        return None
    return number if number >= 0 else None


# The same few values arrive in every review (the webhook's own hints among them): parsed once.
_DECIMALS = BoundedMemo(_parse_decimal, limit=1024)
