"""The admission review of a GPUPolicy object: refused with the loader's lines where the object would not be
served, so that `kubectl apply` of a bad policy fails at once and says why, as a bad file fails `policy lint`.

Judged among the objects stored now (`objects.review_object`): a namespace another policy holds is refused as
well as a misspelt field. The engine never sees a GPUPolicy (it judges pod specs). Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from webhook.admission.base.violation import cut
from webhook.admission.policy.objects import GROUP, review_object
from webhook.admission.policy.policyfields import KIND
from webhook.admission.review import AdmissionRequest, WebhookMode

LINES_SHOWN = 10  # of the loader's lines in one refusal; the rest are counted
MESSAGE_MAX = 3_000  # characters of the refusal's message (kubectl prints it whole)
REFUSAL_CODE, REFUSAL_REASON = 422, "Invalid"  # as the API server refuses an object that fails validation


def is_policy_review(request: AdmissionRequest) -> bool:
    """A review of a GPUPolicy object (of any version of the group)."""
    return request.kind.get("kind") == KIND and request.kind.get("group") == GROUP


def refusal_message(lines: Iterable[str]) -> str:
    """The loader's lines, one a line: the first LINES_SHOWN, then how many more."""
    every = list(lines)
    shown = every[:LINES_SHOWN]
    if len(every) > LINES_SHOWN:
        shown.append(f"and {len(every) - LINES_SHOWN} more")
    message = "\n".join(shown)
    return cut(message, MESSAGE_MAX, "…")


def policy_problems(request: AdmissionRequest, others: Iterable[Mapping[str, Any]], mode: WebhookMode) -> list[str]:
    """What refuses the review: the candidate's lines at /validate for a CREATE or UPDATE, else nothing (/mutate
    changes nothing, a DELETE or a write of the status is never refused)."""
    if mode != "validate" or request.operation not in ("CREATE", "UPDATE") or request.object is None:
        return []
    if request.sub_resource:  # the status (the webhook's own writes): the object's spec is not what changes
        return []
    return list(review_object(request.object, others))


def policy_response(request: AdmissionRequest, problems: list[str]) -> dict[str, Any]:
    """The AdmissionReview answering a GPUPolicy review: allowed, or refused with the loader's lines."""
    response: dict[str, Any] = {"uid": request.uid, "allowed": not problems}
    if problems:
        response["status"] = {"code": REFUSAL_CODE, "reason": REFUSAL_REASON, "message": refusal_message(problems)}
    return {"apiVersion": request.api_version, "kind": "AdmissionReview", "response": response}
