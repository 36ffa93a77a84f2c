"""One rule for whole-GPU namespaces: a shared replica (`nvidia.com/gpu.shared`) and a MIG slice
(`nvidia.com/mig-3g.20gb`) are both another pool's GPUs, neither a whole GPU, and both are denied with the
same sentence (validate.py, `_served_resources`: what each sharing mode hands out; docs/rules.md)."""

from __future__ import annotations

import pytest

from webhook.admission.engine import evaluate
from webhook.admission.policy.model import PolicySet


def _pod(resource: str) -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"},
        "spec": {"containers": [{"name": "c", "image": "x",
                                 "resources": {"limits": {resource: 1}, "requests": {resource: 1}}}]},
    }  # fmt: skip


@pytest.mark.parametrize(
    ("resource", "what"),
    [("nvidia.com/gpu.shared", "a shared GPU"), ("nvidia.com/mig-3g.20gb", "a MIG slice"),
     ("nvidia.com/mig-1g.10gb.shared", "a shared GPU")],
)  # fmt: skip
def test_a_whole_gpu_namespace_denies_every_pool_but_its_own_with_one_rule(resource: str, what: str) -> None:
    decision = evaluate(_pod(resource), "team-a", PolicySet(()))
    assert decision.verdict == "deny"
    assert decision.violations == [
        f'container "c": {resource} 1 is {what}, but policy "built-in-default" gives this namespace whole GPUs '
        "(mode exclusive); request nvidia.com/gpu instead"
    ]


def test_a_whole_gpu_is_admitted() -> None:
    assert evaluate(_pod("nvidia.com/gpu"), "team-a", PolicySet(())).verdict == "allow"
