"""The sharing backends: one per `sharing.mode`, picked by the registry, and the only code outside the policy
package that knows the modes (the phases, DRA, the checks and the GPU budget ask the backend instead of
branching). The weight of each form lives with the code that maps it, once: each backend answers what its
resources weigh in GPU-equivalents."""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path

import pytest

from tests.engine_support import policy
from webhook.admission.policy.model import GPU, Backend, MigStrategy, Mode, Sharing
from webhook.admission.sharing.backend import SharingBackend
from webhook.admission.sharing.exclusive import Exclusive
from webhook.admission.sharing.memory import MemorySliced
from webhook.admission.sharing.mig import Mig
from webhook.admission.sharing.registry import BACKENDS, backend_for
from webhook.admission.sharing.replicas import Mps, Replicas

ROOT = Path(__file__).resolve().parent.parent
# The policy package defines the modes and reads them from files; the sharing backends are their one home.
MODE_HOMES = ("webhook/admission/sharing/", "webhook/admission/policy/")
# The GPU budget's modules: weighed through the backends, never by a branch on the mode of their own.
BUDGET_MODULES = (
    "webhook/admission/budgets/budget.py",
    "webhook/admission/budgets/tally.py",
    "webhook/admission/budgets/schedulers.py",
    "webhook/admission/cluster/quota.py",
    "webhook/admission/dra/claimweights.py",
    "webhook/cli/budgets.py",
    "webhook/server/budgets.py",
)
MODE_BRANCH = re.compile(r"\bMode\.[A-Z_]+|\bis_mig_single\b|\bmode\.is_shared\b|\bBackend\.(ACK|HAMI|VOLCANO)\b")


@pytest.mark.parametrize(
    ("mode", "kind"),
    [
        (Mode.EXCLUSIVE, Exclusive),
        (Mode.TIME_SLICING, Replicas),
        (Mode.MPS, Mps),
        (Mode.MIG, Mig),
        (Mode.MEMORY, MemorySliced),
    ],
)
def test_the_registry_picks_one_backend_per_mode(mode, kind):
    backend = backend_for(Sharing(mode=mode))
    assert type(backend) is kind and backend.name == mode.value


def test_every_mode_has_a_backend_and_every_backend_a_mode():
    assert sorted(BACKENDS) == sorted(mode.value for mode in Mode)
    assert all(isinstance(backend, SharingBackend) for backend in BACKENDS.values())


def test_no_module_outside_the_backends_and_the_policy_branches_on_the_mode():
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in sorted((ROOT / "webhook").rglob("*.py"))
        if not path.relative_to(ROOT).as_posix().startswith(MODE_HOMES)
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if MODE_BRANCH.search(line)
    ]
    assert found == []


def test_the_mode_grep_covers_the_budget_modules():
    """The budget's modules are read by the grep above (none of them is a home of the modes), and it would see
    the branches they used to hold."""
    for name in BUDGET_MODULES:
        assert (ROOT / name).is_file() and not name.startswith(MODE_HOMES), name
    assert not (ROOT / "webhook/admission/weights.py").exists()  # each form's weight is its mapper's
    for branch in ("if sharing.mode is Mode.MIG:", "sharing.is_mig_single and p", "spec.backend is Backend.ACK"):
        assert MODE_BRANCH.search(branch), branch


A100 = GPU(model="A100-80GB")


@pytest.mark.parametrize(
    ("sharing", "resource", "weight"),
    [
        (Sharing(), "nvidia.com/gpu", Fraction(1)),
        (Sharing(mode=Mode.TIME_SLICING, replicas=4), "nvidia.com/gpu.shared", Fraction(1, 4)),
        (Sharing(mode=Mode.TIME_SLICING, replicas=4), "nvidia.com/gpu", Fraction(1)),  # renamed: whole GPUs
        (Sharing(mode=Mode.MPS, replicas=8, resource_name="nvidia.com/gpu"), "nvidia.com/gpu", Fraction(1, 8)),
        (Sharing(mode=Mode.TIME_SLICING), "nvidia.com/gpu.shared", Fraction(1)),  # replicas auto: at most a GPU
        (
            Sharing(mode=Mode.MIG, mig_profile="1g.10gb", mig_strategy=MigStrategy.SINGLE),
            "nvidia.com/gpu",
            Fraction(1, 7),
        ),
        (Sharing(mode=Mode.MIG, mig_profile="1g.10gb"), "nvidia.com/gpu", Fraction(1)),  # mixed: a whole GPU
        (Sharing(mode=Mode.MEMORY, backend=Backend.HAMI), "nvidia.com/gpu", None),  # weighed with its memory
        (Sharing(mode=Mode.MEMORY, backend=Backend.ACK), "nvidia.com/gpu", Fraction(1)),
        (Sharing(), "example.com/fpga", None),
    ],
)
def test_each_backend_answers_what_one_unit_of_its_resources_weighs(sharing, resource, weight):
    pol = policy(sharing=sharing, gpu=A100)
    assert backend_for(sharing).unit_weight(pol, resource) == weight


def test_each_backend_lists_its_units_and_the_memory_backend_weighs_a_share_together():
    for mode in Mode:
        sharing = Sharing(mode=mode, backend=Backend.HAMI if mode is Mode.MEMORY else None)
        units = backend_for(sharing).weight_units(policy(sharing=sharing, gpu=A100))
        assert units and all(isinstance(weight, Fraction) and what for _, weight, what in units), mode
    hami = Sharing(mode=Mode.MEMORY, backend=Backend.HAMI)
    amounts = {"nvidia.com/gpu": Fraction(1), "nvidia.com/gpumem": Fraction(40960), "example.com/x": Fraction(1)}
    weight, together = backend_for(hami).share_weight(policy(sharing=hami, gpu=A100), amounts)
    assert (weight, together) == (Fraction(1, 2), frozenset({"nvidia.com/gpu", "nvidia.com/gpumem"}))
    assert backend_for(Sharing()).share_weight(policy(), amounts) == (0, frozenset())
