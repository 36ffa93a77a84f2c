"""The pod's own node constraints (nodeSelector, node affinity), where validation reads them: a pod that holds
the renamed shared replica and pins itself to nodes whose replicas keep the name `nvidia.com/gpu`
(validate.py `_pinned_to_kept_name`, steering.kept_name_pin), said with validation's own sentence.

The webhook's steering (the node affinity it adds, and the constraints that contradict the policy's pool) is
not here: scope.py keeps the pods it steers outside the compiled set (gaps.STEERING).
"""

from __future__ import annotations

from webhook.admission.cluster.nodes import PRODUCT_LABEL as PRODUCT
from webhook.admission.native.cel import all_of, any_of, fill, lit, slot
from webhook.admission.native.containers import SPEC, count, whole_limit
from webhook.admission.native.family import SECTIONS, Family, Lines
from webhook.admission.native.gaps import shape
from webhook.admission.phases import steering, validate
from webhook.admission.phases.steering import REQUIRED
from webhook.admission.phases.validate import Rules
from webhook.admission.policy.model import Policy

SHARED_PRODUCT = "-SHARED"  # GPU feature discovery's suffix on a product shared without renaming


class KeptNamePin(Family):
    name = "pinned to a kept name"

    def lines(self, policy: Policy) -> list[Lines]:
        renamed = Rules.of(policy).renamed_replica
        if shape(policy) != "shared" or renamed is None:
            return []
        holder = all_of([whole_limit(renamed), f"{count(renamed)} > 0"])
        held = any_of(f"has({SPEC}.{section}) && {SPEC}.{section}.exists(c, {holder})" for section in SECTIONS)
        product = f"{SPEC}.nodeSelector[{lit(PRODUCT)}]"
        by_selector = (
            f"has({SPEC}.nodeSelector) && {lit(PRODUCT)} in {SPEC}.nodeSelector && "
            f"{product}.endsWith({lit(SHARED_PRODUCT)})"
        )
        affinity = f"{SPEC}.affinity"
        terms = f"{affinity}.nodeAffinity.{REQUIRED}.nodeSelectorTerms"
        # a term's `In` on the product whose every value ends in -SHARED, read from its values joined by spaces
        # (no deeper nesting: scope.py keeps a value with a space, which no label value holds, outside)
        pins = (
            f"e.key == {lit(PRODUCT)} && e.operator == 'In' && has(e.values) && size(e.values) > 0 && "
            f"(e.values.join(' ') + ' ').matches({lit(f'^([^ ]*{SHARED_PRODUCT} )+$')})"
        )
        by_affinity = all_of(
            [
                f"has({affinity}) && has({affinity}.nodeAffinity) && has({affinity}.nodeAffinity.{REQUIRED})",
                f"has({terms}) && size({terms}) > 0",
                f"{terms}.all(t, has(t.matchExpressions) && t.matchExpressions.exists(e, {pins}))",
            ]
        )
        # each term's first such `In`, as kept_name_pin names them
        products = f"{terms}.map(t, t.matchExpressions.filter(e, {pins})[0].values.join(',')).join(',')"
        by_selector_words = fill(steering.selector_pin_words(slot("product")), {"product": product})
        by_affinity_words = fill(steering.affinity_pin_words(slot("products")), {"products": products})
        sentence = validate.kept_name_pin_line(slot("pinned"), policy.sharing.mode, policy.name, renamed)
        pinned = f"({by_selector}) ? {by_selector_words} : {by_affinity_words}"
        line = fill(validate.labelled("pod", sentence), {"pinned": pinned})
        return [Lines(f"(({held}) && (({by_selector}) || ({by_affinity}))) ? [{line}] : []")]
