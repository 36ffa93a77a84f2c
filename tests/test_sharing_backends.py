"""The sharing backends: one per `sharing.mode`, picked by the registry, and the only code outside the policy
package that knows the modes (the phases, DRA, the checks and the GPU budget ask the backend instead of
branching). The weight of each form lives with the code that maps it, once: each backend answers what its
resources weigh in GPU-equivalents."""

from __future__ import annotations

import ast
import re
from fractions import Fraction
from pathlib import Path

import pytest

from tests.engine_support import policy
from webhook.admission.policy.loader import _keeps_gpu_name
from webhook.admission.policy.model import GPU, Backend, Limits, MigStrategy, Mode, Sharing
from webhook.admission.sharing.backend import SharingBackend
from webhook.admission.sharing.exclusive import Exclusive
from webhook.admission.sharing.memory import MemorySliced
from webhook.admission.sharing.mig import Mig
from webhook.admission.sharing.registry import BACKENDS, backend_for
from webhook.admission.sharing.replicas import Mps, Replicas

ROOT = Path(__file__).resolve().parent.parent
# The sharing backends are the modes' one home; the loader reads them from files (it parses each mode's own
# fields, below the backends). The model defines the modes and may name one as a default, and branches on none.
MODE_HOMES = ("webhook/admission/sharing/", "webhook/admission/policy/loader.py")
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


def _default_lines(tree: ast.AST) -> set[int]:
    """The lines where a mode is only named as a default: a dataclass field's (`mode: Mode = Mode.EXCLUSIVE`) or
    a field table's (`default=Mode.EXCLUSIVE.value`)."""
    values = [node.value for node in ast.walk(tree) if isinstance(node, ast.AnnAssign) and node.value is not None]
    values += [node.value for node in ast.walk(tree) if isinstance(node, ast.keyword) and node.arg == "default"]
    return {value.lineno for value in values if isinstance(value, ast.Attribute)}  # a name, not an expression


def mode_branches(source: str) -> list[tuple[int, str]]:
    """The lines of `source` that name a sharing mode (or a memory backend) other than as a default."""
    defaults = _default_lines(ast.parse(source))
    return [
        (number, line.strip())
        for number, line in enumerate(source.splitlines(), 1)
        if MODE_BRANCH.search(line) and number not in defaults
    ]


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


def test_no_module_outside_the_backends_and_the_loader_names_a_mode():
    """The model and the JSON Schema included: a mode's answers (its per-container default, its replica
    resource, one replica's share) are its backend's, and the schema's rules between fields are the loader's."""
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line}"
        for path in sorted((ROOT / "webhook").rglob("*.py"))
        if not path.relative_to(ROOT).as_posix().startswith(MODE_HOMES)
        for number, line in mode_branches(path.read_text(encoding="utf-8"))
    ]
    assert found == []


def test_the_mode_grep_covers_the_model_and_the_schema():
    """Both are read by the grep above, a default is all it lets pass, and it sees what they used to hold."""
    for name in ("webhook/admission/policy/model.py", "webhook/admission/policy/schema.py"):
        assert (ROOT / name).is_file() and not name.startswith(MODE_HOMES), name
    assert mode_branches("class Sharing:\n    mode: Mode = Mode.EXCLUSIVE\n") == []
    assert mode_branches('Field("mode", "string", default=Mode.EXCLUSIVE.value)\n') == []
    for branch in (
        "return self.mode is Mode.MIG and self.mig_strategy is MigStrategy.SINGLE",
        "mode: Mode = Mode.MIG if mig else Mode.EXCLUSIVE",
        "mig = Mode.MIG.value",
        "SHARED_MODES = [Mode.TIME_SLICING.value, Mode.MPS.value]",
        "shared = device == 'replica' and self.sharing.mode.is_shared",
    ):
        assert mode_branches(branch + "\n"), branch


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


KEPT_NAME_CASES = [
    Sharing(),
    Sharing(mode=Mode.TIME_SLICING, replicas=4),
    Sharing(mode=Mode.TIME_SLICING, replicas=4, resource_name="nvidia.com/gpu"),
    Sharing(mode=Mode.MPS, replicas=2, resource_name="nvidia.com/gpu"),
    Sharing(mode=Mode.MPS, replicas=2),
    Sharing(mode=Mode.MIG, mig_profile="1g.10gb"),
    Sharing(mode=Mode.MIG, mig_profile="1g.10gb", mig_strategy=MigStrategy.SINGLE),
    Sharing(mode=Mode.MEMORY, backend=Backend.HAMI),
]


@pytest.mark.parametrize("sharing", KEPT_NAME_CASES)
def test_the_loader_reads_the_kept_name_as_the_backends_answer_it(sharing):
    """`spec.steering: auto` (the loader, below the backends) steers where `nvidia.com/gpu` is a replica or a
    slice: its reading of the mode gives the backends' `replica_resource`."""
    assert _keeps_gpu_name(sharing) is (backend_for(sharing).replica_resource(sharing) == "nvidia.com/gpu")


@pytest.mark.parametrize(
    ("sharing", "explicit", "most"),
    [
        (Sharing(), None, {"replica": 8, "mig-slice": 8, "whole": 8, None: 8}),
        (Sharing(mode=Mode.TIME_SLICING, replicas=4), None, {"replica": 1, "mig-slice": 8, "whole": 8, None: 1}),
        (Sharing(mode=Mode.MPS, replicas=4), None, {"replica": 1, "mig-slice": 8, "whole": 8, None: 1}),
        (Sharing(mode=Mode.MIG, mig_profile="1g.10gb"), None, {"replica": 8, "mig-slice": 1, "whole": 8, None: 1}),
        (Sharing(mode=Mode.MEMORY, backend=Backend.HAMI), None, {"replica": 8, "mig-slice": 8, "whole": 8, None: 8}),
        (Sharing(mode=Mode.MIG, mig_profile="1g.10gb"), 3, {"replica": 3, "mig-slice": 3, "whole": 3, None: 3}),
        (Sharing(mode=Mode.TIME_SLICING, replicas=4), 2, {"replica": 2, "mig-slice": 2, "whole": 2, None: 2}),
    ],
)
def test_each_backend_answers_the_most_one_container_may_hold(sharing, explicit, most):
    """`maxPerContainer`, else 1 replica under time-slicing and MPS, 1 MIG slice under mig, 8 of anything else;
    None asks for what the mode hands out (what a mapped `nvidia.com/gpu: N` is held to)."""
    pol = policy(sharing=sharing, limits=Limits(max_per_container=explicit))
    backend = backend_for(sharing)
    assert {device: backend.max_per_container(pol, device) for device in most} == most


def test_one_replicas_share_is_the_replica_backends_alone():
    shared = policy(sharing=Sharing(mode=Mode.MPS, replicas=4))
    assert backend_for(shared.sharing).share(shared) == Fraction(1, 4)
    assert backend_for(shared.sharing).shared_fraction(shared) == Fraction(1, 4)
    told = policy(sharing=Sharing(mode=Mode.TIME_SLICING, replicas=4), memory_fraction=Fraction(1, 8))
    assert backend_for(told.sharing).shared_fraction(told) == Fraction(1, 8)
    for sharing in (Sharing(), Sharing(mode=Mode.MIG, mig_profile="1g.10gb"), Sharing(mode=Mode.TIME_SLICING)):
        assert backend_for(sharing).share(policy(sharing=sharing)) is None
