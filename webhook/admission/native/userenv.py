"""A container's own memory variables, as mutation's env step treats them (mutate._env, _merge_hints): a name the
container sets is never written again and its value is kept; JAX's pair is skipped whole where the container sets
either of JAX's fraction variables; PyTorch's hint is merged into the container's own allocator config, which the
native set does not do (its free-form text is parsed: scope.py leaves such a container to the webhook), nor does
it read a recorded fraction the container sets itself.

`outside` says where the native set stops: a container whose own memory variable has a value (validation
parses it as free-form text, as Python's Fraction reads a decimal, and judges it against the share), sets a
PyTorch allocator config (merged by parsing its keys) or a recorded fraction. What it covers are the variables
no validation line reads (XLA_PYTHON_CLIENT_PREALLOCATE, TF_FORCE_GPU_ALLOW_GROWTH, MPS's limits) and memory
variables read from a ConfigMap or Secret (`valueFrom`), which validation does not judge either.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from webhook.admission.base.envnames import (
    JAX_FRACTION_VARS,
    JAX_PREALLOCATE,
    PYTORCH_ALLOC_CONF,
    PYTORCH_CUDA_ALLOC_CONF,
)
from webhook.admission.native.cel import lit, strings
from webhook.admission.phases.envhints import MEMORY_VARIABLES
from webhook.admission.phases.mutate import RECORDED_FRACTION

PYTORCH_CONFS = (PYTORCH_CUDA_ALLOC_CONF, PYTORCH_ALLOC_CONF)


def sets(names: Iterable[str]) -> str:
    """`c` has an env entry named one of `names`."""
    listed = sorted(names)
    named = f"e.name == {lit(listed[0])}" if len(listed) == 1 else f"e.name in {strings(listed)}"
    return f"has(c.env) && c.env.exists(e, has(e.name) && {named})"


def appends(name: str, *also: str) -> str:
    """Mutation appends the policy's variable `name` to `c` (whose env is there): the container sets none of the
    names that keep it out (_merge_hints), nor any of `also`."""
    names = {name, *also}
    if name in (*JAX_FRACTION_VARS, JAX_PREALLOCATE):
        names |= set(JAX_FRACTION_VARS)  # JAX refuses both fraction variables: its hints are skipped whole
    if name in PYTORCH_CONFS:
        names |= set(PYTORCH_CONFS)  # merged into the container's own (not compiled: scope.py)
    return f"!({sets(names)})"


def holds_value(name: str, value: str) -> str:
    """`c` has the entry `name` with the value `value` (the policy's own, as mutation wrote it)."""
    return (
        f"has(c.env) && c.env.exists(e, has(e.name) && e.name == {lit(name)} && has(e.value) && "
        f"e.value == {lit(value)})"
    )


def outside(env: list[Any]) -> bool:
    """The container's own variables are more than the native set judges as the webhook does: a recorded fraction
    of its own, a PyTorch allocator config (merged, parsed), or a memory variable with a value (parsed and judged
    against the share by validation)."""
    for entry in env:
        if type(entry) is not dict:
            continue
        name = entry.get("name")
        if name == RECORDED_FRACTION or name in PYTORCH_CONFS:
            return True
        if name in MEMORY_VARIABLES and "value" in entry:
            return True
    return False
