"""MIG slices (`sharing.mode: mig`): under migStrategy mixed, `nvidia.com/gpu: N` renamed to the policy's profile
(`nvidia.com/mig-<migProfile>`, mutate.py step 3, the rename replicas.mapping writes); under `fractional: mig`
on a known model, `nvidia.com/gpu` below 1 becomes one of the smallest slice that holds the fraction (step 2,
`_fractional`): mixed, renamed to that slice's resource; single (every GPU of a node cut into `migProfile`,
advertised as `nvidia.com/gpu`), `"1"` in place where the profile holds it.

Which slice a fraction becomes is the engine's table (resources.slices_fractions_become: each slice with the
largest fraction that becomes it, read from smallest_profile_for), compared in CEL on the fraction as a whole
number `k` of nanos (`k * b <= a * 10^9` for a bound a/b: exact). A fraction no offered slice holds is left as
written: the API server refuses it as not an integer (gaps.BUILT_IN_REFUSAL). The maxima of the slices, MIG's
"one slice per container" among them, are maxima.py's; MIG adds no variables.
"""

from __future__ import annotations

from fractions import Fraction

from webhook.admission.base.quantity import NANO
from webhook.admission.base.resources import GPU_MODELS, NVIDIA_GPU, mig_resource, slices_fractions_become
from webhook.admission.native.cel import all_of, bind, lit, nanos
from webhook.admission.native.containers import holds, replaced, value
from webhook.admission.native.family import Family, Mutation
from webhook.admission.native.gaps import shape
from webhook.admission.native.replicas import mapping
from webhook.admission.phases.validate import Rules
from webhook.admission.policy.model import Fractional, Policy
from webhook.admission.sharing.registry import backend_of


def fraction_slices(policy: Policy) -> list[tuple[Fraction, str]]:
    """What `nvidia.com/gpu` below 1 becomes, as mutate._fractional converts it: (the largest fraction that
    becomes it, the resource), smallest first; `nvidia.com/gpu` itself where the nodes offer one profile under
    that name. None under another `fractional`, or on a model the engine does not know."""
    model = GPU_MODELS.get(policy.gpu.model or "") if policy.fractional is Fractional.MIG else None
    if model is None:
        return []
    single = backend_of(policy).single_slice(policy)
    if single is not None:
        profile = model.profile(single)
        return [(profile.memory_share, NVIDIA_GPU)] if profile is not None else []
    return [(bound, mig_resource(p.name)) for bound, p in slices_fractions_become(model, policy.sharing.mig_profiles)]


def slice_names(policy: Policy) -> list[str]:
    """The MIG resources of the policy's pool, by name (the backend's `serves`: the mapping's target, the model's
    profiles or those the nodes offer, which hold every slice a fraction becomes), whose maxima the native set
    judges by name; none outside MIG. A profile asked for by another name (one the model does not have, one the
    nodes do not offer, any where the model is unknown) is judged by prefix (pools.py, maxima.py)."""
    if shape(policy) != "mig":
        return []
    served = Rules.of(policy).served
    assert {name for _, name in fraction_slices(policy)} <= served
    return sorted(served - {NVIDIA_GPU})


class MigSlices(Family):
    name = "MIG slices"

    def mutations(self, policy: Policy) -> list[Mutation]:
        if shape(policy) != "mig":
            return []
        found = []
        if Rules.of(policy).mapping_target is not None:
            found.append(mapping(policy))
        slices = fraction_slices(policy)
        if slices:
            found.append(_fractions(slices))
        return found


def _fractions(slices: list[tuple[Fraction, str]]) -> Mutation:
    """`nvidia.com/gpu` in (0, 1), request = limit, as one slice of the smallest profile that holds it: `"1"` in
    each map that held it (renamed, or in place where the slice keeps the name), as _fractional does. The slice
    is chosen in CEL from the fraction's nanos (the first whose bound holds it), so that each operation passes
    over a section once; none where no slice holds it."""
    limit, k = value("limits", NVIDIA_GPU), "k"
    chosen = lit("")  # no slice holds it: left as written
    for bound, target in reversed(slices):
        chosen = f"{k} * {bound.denominator} <= {bound.numerator * NANO} ? {lit(target)} : {chosen}"
    slice_of = bind(nanos(limit), k, chosen)
    renamed = any(target != NVIDIA_GPU for _, target in slices)
    terms = [
        holds("limits", NVIDIA_GPU),
        f"quantity({limit}).compareTo(quantity('0')) > 0",
        f"quantity({limit}).compareTo(quantity('1')) < 0",
        f"!({holds('requests', NVIDIA_GPU)}) || quantity({value('requests', NVIDIA_GPU)}).compareTo("
        f"quantity({limit})) == 0",
        # _rename: left alone where the container already holds the slice
        bind(
            slice_of,
            "t",
            "t != '' && (t == " + lit(NVIDIA_GPU) + " || !(has(c.resources.requests) && t in c.resources.requests) "
            "&& !(t in c.resources.limits))",
        ),
    ]
    converted = all_of(terms)
    parts = replaced(converted, [(slice_of, "'1'")], removed=renamed)
    return Mutation(f"{NVIDIA_GPU} below 1 to the smallest MIG slice that holds it", " + ".join(parts))
