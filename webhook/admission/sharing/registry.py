"""The registry: the one place that picks a sharing backend, from the policy's `sharing.mode`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from webhook.admission.sharing.backend import SharingBackend
from webhook.admission.sharing.exclusive import Exclusive
from webhook.admission.sharing.memory import MemorySliced
from webhook.admission.sharing.mig import Mig
from webhook.admission.sharing.replicas import Mps, Replicas

if TYPE_CHECKING:
    from webhook.admission.policy.model import Policy, Sharing

# By mode name (`sharing.mode` is a str enum, so a policy's mode finds its backend here).
BACKENDS: dict[str, SharingBackend] = {
    backend.name: backend for backend in (Exclusive(), Replicas(), Mps(), Mig(), MemorySliced())
}


def backend_of(policy: Policy) -> SharingBackend:
    """The backend of the policy's sharing mode."""
    return BACKENDS[policy.sharing.mode]


def backend_for(sharing: Sharing) -> SharingBackend:
    """The backend of a `sharing` section (where no policy is at hand yet)."""
    return BACKENDS[sharing.mode]
