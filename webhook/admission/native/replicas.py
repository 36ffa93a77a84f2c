"""Time-slicing and MPS replicas as `nvidia.com/gpu.shared`: `nvidia.com/gpu: N` renamed (mutate.py step 3,
requests and limits, by JSON Patch: an apply configuration cannot remove a key; `mapping`, which MIG's rename
shares), then the memory variables of one replica's share added to a container that holds a replica, each that it
does not set itself (step 4, userenv.py; the names and values are the engine's own entries,
validate.Rules.own_env_tail)."""

from __future__ import annotations

from webhook.admission.base.envnames import PYTORCH_CUDA_ALLOC_CONF
from webhook.admission.base.resources import NVIDIA_GPU, SHARED_SUFFIX
from webhook.admission.native.cel import all_of, jsonpatch, lit
from webhook.admission.native.commandline import runs_engine
from webhook.admission.native.containers import any_managed, each_of, has_map, holds, path, replaced, value
from webhook.admission.native.family import SECTIONS, Family, Mutation
from webhook.admission.native.gaps import shape
from webhook.admission.native.userenv import HELD, HOLDERS, IDLE, appends, merges, over_holders, sets
from webhook.admission.phases.envhints import hints_for
from webhook.admission.phases.mutate import RECORDED_FRACTION, mps_only
from webhook.admission.phases.validate import Rules
from webhook.admission.policy.model import Policy
from webhook.admission.sharing.registry import backend_of


def mapping(policy: Policy) -> Mutation:
    """`nvidia.com/gpu: N` (whole, 1 <= N <= the container maximum, request = limit) to the policy's target (a
    shared replica, a MIG profile), as mutate._mapping does; left alone where the container already names the
    target."""
    rules = Rules.of(policy)
    target = rules.mapping_target
    assert target is not None
    maximum = backend_of(policy).max_per_container(policy)
    limit = f"quantity({value('limits', NVIDIA_GPU)})"
    renamed = all_of(
        [
            holds("limits", NVIDIA_GPU),
            f"!({holds('requests', target)})",
            f"!({holds('limits', target)})",
            f"{limit}.isInteger()",
            f"{limit}.asInteger() >= 1",
            f"{limit}.asInteger() <= {maximum}",
            f"!({holds('requests', NVIDIA_GPU)}) || quantity({value('requests', NVIDIA_GPU)}).compareTo({limit}) == 0",
        ]
    )
    # the limit's text goes to both maps, as _rename does
    parts = replaced(renamed, [(lit(target), value("limits", NVIDIA_GPU))])
    return Mutation(f"{NVIDIA_GPU} to {target}", " + ".join(parts))


class SharedReplicas(Family):
    name = "shared replicas"

    def mutations(self, policy: Policy) -> list[Mutation]:
        if shape(policy) != "shared":
            return []
        return [mapping(policy), *self._env(policy)]

    @staticmethod
    def _env(policy: Policy) -> list[Mutation]:
        """The policy's memory variables for one replica's share, where the container holds a replica (the
        target, or any managed `*.shared`, above 0): each it does not set itself (userenv.appends), PyTorch's
        merged into its own allocator config (userenv.merges)."""
        rules = Rules.of(policy)
        entries = rules.own_env_tail
        if not entries:
            return []
        holder = holds_replica(policy)
        fraction = backend_of(policy).shared_fraction(policy)
        assert fraction is not None
        # A container that runs an inference engine gets the MPS variables alone (mutate._env).
        engine = runs_engine()
        kept = {hint.name for hint in mps_only(hints_for(policy, fraction))}
        alone = [entry for entry in entries if entry["name"] in kept]
        listed = "[" + ", ".join(_entry(entry) for entry in entries) + "]"
        whole = "!has(c.env)"
        if len(alone) < len(entries):
            if alone:
                listed = f"({engine}) ? [{', '.join(_entry(entry) for entry in alone)}] : {listed}"
            else:
                whole += f" && !({engine})"
        # Each section's holders are found once, then those with an env, and of those the ones that run no
        # engine (userenv.over_holders).
        unrecorded = f"!({sets([RECORDED_FRACTION])})"
        parts = []
        for section in SECTIONS:
            ops = [each_of(HOLDERS, whole, jsonpatch("add", path(section, "/env"), listed))]
            for entry in entries:
                among = HELD if entry["name"] in kept else IDLE
                # nothing where it records a fraction of its own (not compiled: userenv.py)
                keep = appends(entry["name"], RECORDED_FRACTION)
                ops.append(each_of(among, keep, jsonpatch("add", path(section, "/env/-"), _entry(entry))))
                if entry["name"] == PYTORCH_CUDA_ALLOC_CONF:  # or merged into the container's own config
                    ops.append(merges(section, among, unrecorded, lit(entry["value"])))
            parts.append(over_holders(section, holder, ops, engine if len(alone) < len(entries) else None))
        return [Mutation("memory variables", " + ".join(parts))]


def holds_replica(policy: Policy) -> str:
    """CEL of `c`: it holds a shared replica (the policy's, or any managed `*.shared`, above 0), as mutation's
    env step reads it once the mapping is done (mutate._holds_shared_gpu)."""
    target = Rules.of(policy).shared_resource
    assert target is not None
    replica = (
        f"{has_map('limits')} && c.resources.limits.exists(n, (n == {lit(target)} || "
        f"n.endsWith({lit(SHARED_SUFFIX)})) && quantity(c.resources.limits[n]).compareTo(quantity('0')) > 0)"
    )
    return all_of([any_managed(), replica])


def _entry(entry: dict[str, str]) -> str:
    return "{" + ", ".join(f"{lit(key)}: {lit(text)}" for key, text in entry.items()) + "}"
