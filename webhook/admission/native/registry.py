"""The registry: every rule family, in the order their mutations run and their lines are said (validation says
a value the API server takes as whole and another pool's resource before its maximum, at its name's place among
the maxima: maxima.py, wholes.py; a converted fraction over one replica's share after both, then its memory
variables, an engine's own memory flag, a container's device rules last, and a pin to a kept name after every
container's lines, before the pod's total)."""

from __future__ import annotations

from webhook.admission.native.devices import DeviceRules
from webhook.admission.native.engineflags import EngineFlags, UserFlags
from webhook.admission.native.family import Family
from webhook.admission.native.fractions import FractionalShares
from webhook.admission.native.gaps import Unsupported
from webhook.admission.native.limits import LimitsFromRequests
from webhook.admission.native.maxima import Maxima
from webhook.admission.native.memshares import MemoryShares
from webhook.admission.native.memvars import MemoryVariables
from webhook.admission.native.migslices import MigSlices
from webhook.admission.native.nodes import KeptNamePin, Steering
from webhook.admission.native.replicas import SharedReplicas

FAMILIES: tuple[Family, ...] = (
    LimitsFromRequests(),
    SharedReplicas(),
    MigSlices(),
    KeptNamePin(),
    Maxima(),
    MemoryShares(),  # after the maxima: validation says a memory share's lines after its counts'
    EngineFlags(),  # before the fractions' rename: a converted fraction's flag reads the fraction
    FractionalShares(),
    MemoryVariables(),
    UserFlags(),  # validation says an engine's own flag after the memory variables
    DeviceRules(),
    Steering(),
    Unsupported(),
)
