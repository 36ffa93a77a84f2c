"""The sharing backends: one per `sharing.mode`, picked by the registry, and the only code outside the policy
package that knows the modes (the phases, DRA and the checks ask the backend instead of branching)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from webhook.admission.policy.model import Mode
from webhook.admission.sharing.backend import SharingBackend
from webhook.admission.sharing.exclusive import Exclusive
from webhook.admission.sharing.memory import MemorySliced
from webhook.admission.sharing.mig import Mig
from webhook.admission.sharing.registry import BACKENDS, backend_for
from webhook.admission.sharing.replicas import Mps, Replicas

ROOT = Path(__file__).resolve().parent.parent
# The policy package defines the modes and reads them from files; the sharing backends are their one home.
MODE_HOMES = ("webhook/admission/sharing/", "webhook/admission/policy/")
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
    from webhook.admission.policy.model import Sharing

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
