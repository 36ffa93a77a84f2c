"""Another pool's resource (validate.py `_served`): under whole GPUs, the shared replica
`nvidia.com/gpu.shared` is another team's pool, said with validation's own sentence."""

from __future__ import annotations

from webhook.admission.base.quantity import quantity_text
from webhook.admission.base.resources import NVIDIA_GPU_SHARED
from webhook.admission.native.cel import all_of, fill, slot
from webhook.admission.native.containers import count, value, whole_limit
from webhook.admission.native.family import ContainerRule, Family
from webhook.admission.native.gaps import shape
from webhook.admission.phases import validate
from webhook.admission.phases.validate import Rules
from webhook.admission.policy.model import Policy
from webhook.admission.sharing.registry import backend_of


class Pools(Family):
    name = "another pool's resource"

    def container_rules(self, policy: Policy) -> list[ContainerRule]:
        rules = Rules.of(policy)
        name = NVIDIA_GPU_SHARED
        if shape(policy) != "whole" or name in rules.served:
            return []
        gives, instead, _ = backend_of(policy).pool_words(policy, rules.served)
        shown = quantity_text(slot("shown"))  # a quantity as the API server serializes it: a short string, quoted
        sentence = validate.not_served_line(name, shown, validate.served_what(name), policy.name, gives, instead)
        condition = all_of([whole_limit(name), f"{count(name)} > 0"])
        return [ContainerRule(condition, fill(sentence, {"shown": value("limits", name)}))]
