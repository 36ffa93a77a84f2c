"""AdmissionReview in and out: the API server's envelope around the object the engine decides on.

Pure: bytes in, a checked `AdmissionRequest` out; a `Decision` in, the response review out. The HTTP side
(content types, body limits, status codes) lives in `webhook.server`.

Two JSON choices, both stricter than `json.loads` by default, because the API server is a Go program that
reads the same bytes differently from Python where JSON is ambiguous:
- duplicate keys are rejected: Go keeps the last value, and a webhook that judged a different value than
  the one the API server stores would be a bypass. The API server itself serializes reviews from structs,
  so a duplicate key means the sender is not an API server;
- NaN and Infinity are not JSON; Python would accept them.
JSON nested deeper than the interpreter's recursion limit is answered as a bad review, not a crash.
"""

from __future__ import annotations

import base64
import json
import sys
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from webhook.admission.base.violation import WARNING_LIMIT, cut

if TYPE_CHECKING:
    from webhook.admission.engine import Decision

V1 = "admission.k8s.io/v1"
V1BETA1 = "admission.k8s.io/v1beta1"
SUPPORTED_VERSIONS = (V1, V1BETA1)
Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
OPERATIONS: tuple[Operation, ...] = ("CREATE", "UPDATE", "DELETE", "CONNECT")
WebhookMode = Literal["mutate", "validate"]  # which of the two webhooks answers: /mutate or /validate
# Kubernetes' advice for admission warnings ("limit warnings to 120 characters if possible"); the API
# server truncates every warning to 256 characters once the warnings of one request pass 4096 in total.
WARNING_MAX_CHARS = WARNING_LIMIT
WARNINGS_MAX_TOTAL_CHARS = 4096
# A Kubernetes UID is 36 characters; anything much longer is not from an API server.
MAX_UID_CHARS = 128


class ReviewError(ValueError):
    """A malformed AdmissionReview, in one line that says where and what (answered with 400)."""


@dataclass(frozen=True, slots=True)
class AdmissionRequest:
    """The parts of `request` the webhook uses, checked."""

    api_version: str  # of the review: the response is written in the same version
    uid: str
    kind: dict[str, str]  # GroupVersionKind of the object: {"group", "version", "kind"}
    operation: Operation
    namespace: str  # "" for cluster-scoped objects (and for a namespaced one the API server left it off)
    name: str  # "" when the API server has not named the object yet (generateName)
    object: dict[str, Any] | None
    old_object: dict[str, Any] | None
    dry_run: bool
    resource: dict[str, str] | None = None
    sub_resource: str = ""

    @property
    def evaluates(self) -> bool:
        """Whether the engine decides: CREATE and UPDATE of an object. DELETE and CONNECT pass untouched."""
        return self.operation in ("CREATE", "UPDATE") and self.object is not None

    @property
    def engine_namespace(self) -> str:
        """The namespace whose policy applies: the request's (the object's may not say otherwise: `parse_review`),
        else `default`."""
        return self.namespace or "default"

    @property
    def engine_object(self) -> dict[str, Any] | None:
        """The object as the engine reads it: its kind is the request's (`request.kind`; the object's may not say
        otherwise, and where it says nothing the request's is filled in)."""
        obj = self.object
        if obj is not None and not obj.get("kind"):
            obj = {**obj, "kind": self.kind["kind"]}
        return obj

    @property
    def object_name(self) -> str:
        """For logs: the name, else the object's name, else its generateName prefix."""
        if self.name:
            return self.name
        metadata = (self.object or self.old_object or {}).get("metadata")
        if isinstance(metadata, dict):
            for key in ("name", "generateName"):
                value = metadata.get(key)
                if isinstance(value, str) and value:
                    return value
        return ""


# ------------------------------------------------------------------------------------------------ parsing


def _type_name(value: Any) -> str:
    """JSON's name for a Python value, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    return "object"


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ReviewError(
                    f"body: duplicate key {key[:60]!r} in one JSON object; Kubernetes keeps the last value "
                    "and Python would too, but the sender and the webhook might not agree: send each key once"
                )
            seen.add(key)
    return obj


def _no_constants(literal: str) -> Any:
    raise ReviewError(f"body: {literal} is not valid JSON (JSON has no NaN or Infinity): send a number")


# Made once (json.loads and json.dumps with options build a decoder or encoder per call). Both are safe to
# share between threads, as json's own default ones are. The patch is the engine's lists and dicts, never
# circular: the encoder skips that check (a fifth of its time).
_DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys, parse_constant=_no_constants)
_COMPACT = json.JSONEncoder(separators=(",", ":"), check_circular=False)


def _load_json(body: bytes) -> Any:
    if not body.strip():
        raise ReviewError("body: empty; POST an AdmissionReview (JSON) as the API server does")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ReviewError(f"body: not UTF-8 (invalid byte at offset {exc.start}); send UTF-8 JSON") from None
    try:
        if text.startswith("\ufeff"):  # what json.loads says (JSONDecoder.decode does not look)
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        return _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        raise ReviewError(f"body: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise ReviewError(
            "body: JSON nested too deeply (over several hundred levels); no Kubernetes object is"
        ) from None
    except ReviewError:
        raise  # a duplicate key or a NaN, said by the hooks (ReviewError is a ValueError too)
    except ValueError:  # an integer past Python's limit on digits (4,300): int() refuses to convert it
        raise ReviewError(
            f"body: a number with more than {sys.get_int_max_str_digits()} digits; no Kubernetes field holds one "
            "(an int64 has 19 digits): send it as a quantity string"
        ) from None


def _field(
    container: dict[str, Any], key: str, at: str, expected: type, *, required: bool = True, nullable: bool = False
) -> Any:
    """`container[key]`, checked: a precise ReviewError names `at.key`, what was expected and what came."""
    where = f"{at}.{key}" if at else key
    if key not in container:
        if required:
            raise ReviewError(f"{where}: missing")
        return None
    value = container[key]
    if value is None and nullable:
        return None
    if not isinstance(value, expected):
        raise ReviewError(f"{where}: expected {_expected_name(expected)}, got {_type_name(value)}")
    return value


def _expected_name(expected: type) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(expected, expected.__name__)


def _string_map(value: Any, where: str) -> dict[str, str]:
    """A GroupVersionKind/Resource: an object whose present fields are strings."""
    for key, item in value.items():
        if not isinstance(item, str):
            shown = key if len(key) <= 60 and key.isprintable() else repr(key[:60])  # any size, any character
            raise ReviewError(f"{where}.{shown}: expected a string, got {_type_name(item)}")
    checked: dict[str, str] = value
    return checked


def parse_review(body: bytes) -> AdmissionRequest:
    """Parse and check an AdmissionReview request; raise ReviewError naming the first problem."""
    doc = _load_json(body)
    if not isinstance(doc, dict):
        raise ReviewError(f"body: expected an AdmissionReview object, got {_type_name(doc)}")
    api_version = _field(doc, "apiVersion", "", str)
    if api_version not in SUPPORTED_VERSIONS:
        raise ReviewError(f"apiVersion: {api_version[:80]!r} is not supported; send {V1} (or {V1BETA1})")
    kind = _field(doc, "kind", "", str)
    if kind != "AdmissionReview":
        raise ReviewError(f"kind: expected 'AdmissionReview', got {kind[:80]!r}")
    request = _field(doc, "request", "", dict)

    uid = _field(request, "uid", "request", str)
    if not uid:
        raise ReviewError("request.uid: empty; the response must echo the request's uid")
    if len(uid) > MAX_UID_CHARS:
        raise ReviewError(f"request.uid: {len(uid)} characters; a Kubernetes UID has 36 (at most {MAX_UID_CHARS})")
    if not uid.isprintable():
        raise ReviewError("request.uid: contains control characters; a Kubernetes UID has none")

    gvk = _string_map(_field(request, "kind", "request", dict), "request.kind")
    if not gvk.get("kind"):
        raise ReviewError("request.kind.kind: missing; the API server sends the object's kind, e.g. Pod")
    resource = _field(request, "resource", "request", dict, required=False, nullable=True)
    if resource is not None:
        _string_map(resource, "request.resource")
    sub_resource = _field(request, "subResource", "request", str, required=False) or ""

    operation = _field(request, "operation", "request", str)
    if operation not in OPERATIONS:
        raise ReviewError(f"request.operation: {operation[:40]!r} is not one of {', '.join(OPERATIONS)}")
    namespace = _field(request, "namespace", "request", str, required=False) or ""
    name = _field(request, "name", "request", str, required=False) or ""
    dry_run = _field(request, "dryRun", "request", bool, required=False, nullable=True) or False

    needs_object = operation in ("CREATE", "UPDATE")
    if needs_object and request.get("object") is None:
        raise ReviewError(f"request.object: missing; {operation} reviews carry the object")
    obj = _field(request, "object", "request", dict, required=False, nullable=True)
    old_object = _field(request, "oldObject", "request", dict, required=False, nullable=True)
    for value, where in ((obj, "request.object"), (old_object, "request.oldObject")):
        if value is None:
            continue
        for key in ("apiVersion", "kind"):  # what every Kubernetes object says of itself, as strings
            _field(value, key, where, str, required=False, nullable=True)
        metadata = _field(value, "metadata", where, dict, required=False, nullable=True)
        if metadata is not None:
            for key in ("name", "namespace", "generateName"):
                _field(metadata, key, f"{where}.metadata", str, required=False, nullable=True)
        _agrees_with_request(value, where, gvk, namespace)

    return AdmissionRequest(
        api_version=api_version,
        uid=uid,
        kind=gvk,
        operation=operation,
        namespace=namespace,
        name=name,
        object=obj,
        old_object=old_object,
        dry_run=dry_run,
        resource=resource,
        sub_resource=sub_resource,
    )


def _agrees_with_request(obj: dict[str, Any], where: str, gvk: dict[str, str], namespace: str) -> None:
    """The policy is chosen by `request.namespace` and the pod spec found by `request.kind`: what the API server
    authorized and will store. An object that says another namespace, kind or version is not what an API server
    sends (it sets an empty namespace to the request's and refuses a different one before admission), so the
    review is refused rather than judged under a policy or a kind of the sender's choosing."""
    metadata = obj.get("metadata")
    stated = metadata.get("namespace") if isinstance(metadata, dict) else None
    if stated and stated != namespace:
        said = f"request.namespace {namespace[:80]!r}" if namespace else "no request.namespace"
        raise ReviewError(
            f"{where}.metadata.namespace: {stated[:80]!r} differs from {said}; the API server sends the namespace "
            "the object is stored in: send the two equal"
        )
    kind = obj.get("kind")
    if kind and kind != gvk["kind"]:
        raise ReviewError(
            f"{where}.kind: {kind[:80]!r} differs from request.kind.kind {gvk['kind'][:80]!r}; the API server sends "
            "the kind it admits: send the two equal"
        )
    api_version = obj.get("apiVersion")
    if api_version and "version" in gvk:
        expected = f"{gvk['group']}/{gvk['version']}" if gvk.get("group") else gvk["version"]
        if api_version != expected:
            raise ReviewError(
                f"{where}.apiVersion: {api_version[:80]!r} differs from request.kind ({expected[:80]!r}); the API "
                "server sends the object in the version it names: send the two equal"
            )


# ----------------------------------------------------------------------------------------------- response


def _clean_warning(text: str) -> str:
    """One printable line of at most WARNING_MAX_CHARS: the API server drops warnings with control characters,
    and a line or paragraph separator, or a no-break space, would break or hide in the user's terminal."""
    if not text.isprintable():
        text = "".join(ch if ch.isprintable() else " " for ch in text).strip()
    return cut(text, WARNING_MAX_CHARS)


def limit_warnings(warnings: list[str]) -> list[str]:
    """Warnings as the API server will show them: clean, deduplicated, within its size limits.

    Each is cut to 120 characters; once 4096 characters are used the rest are dropped with a last line
    saying how many, so the API server never has to truncate (which would cut every warning to 256).
    """
    if (
        all(len(w) <= WARNING_MAX_CHARS and w.isprintable() and w for w in warnings)
        and sum(map(len, warnings)) <= WARNINGS_MAX_TOTAL_CHARS - WARNING_MAX_CHARS
        and len(set(warnings)) == len(warnings)
    ):
        return list(warnings)  # the usual case: nothing to cut
    out: list[str] = []
    seen: set[str] = set()
    total = 0
    for index, raw in enumerate(warnings):
        text = _clean_warning(str(raw))
        if not text or text in seen:
            continue
        if total + len(text) > WARNINGS_MAX_TOTAL_CHARS - WARNING_MAX_CHARS:
            out.append(f"... and {len(warnings) - index} more warning(s): see the webhook's log")
            break
        seen.add(text)
        out.append(text)
        total += len(text)
    return out


AUDIT_ANNOTATION_LIMIT = 2048


def build_response(request: AdmissionRequest, decision: Decision | None, *, mode: WebhookMode) -> dict[str, Any]:
    """The AdmissionReview answering `request`, in its version, echoing its uid.

    `mode` "mutate": allowed with the JSON Patch when there is one, unless the API server's own validation
    would refuse the mutated object (`decision.refusals`): then denied here, whatever the enforcement, so that
    the user reads the webhook's lines rather than the API server's (which runs between the two webhooks).
    `mode` "validate": allowed unless the decision denies; a denial carries status 403 and the engine's
    lines. Both carry the warnings. `decision` None (DELETE, CONNECT) allows untouched.
    """
    if mode not in ("mutate", "validate"):
        raise ValueError(f"mode must be 'mutate' or 'validate', not {mode!r}")
    response: dict[str, Any] = {"uid": request.uid, "allowed": True}
    if decision is not None:
        if not decision.allowed and (mode == "validate" or decision.refusals):
            lines = decision.denials or decision.violations or [f"denied by policy {decision.policy}"]
            response["allowed"] = False
            response["status"] = {"code": 403, "reason": "Forbidden", "message": "\n".join(lines)}
        elif mode == "mutate" and decision.patch:
            patch = _COMPACT.encode(decision.patch).encode("utf-8")
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(patch).decode("ascii")
        warnings = limit_warnings(decision.warnings) if decision.warnings else []
        if warnings:
            response["warnings"] = warnings
        # Recorded in the cluster's audit log (keys prefixed with the webhook's name): which policy decided,
        # and under `audit` enforcement the lines that the user is not shown.
        annotations = {"policy": decision.policy, "decision": decision.verdict}
        if decision.verdict == "audit":
            annotations["violations"] = "; ".join(decision.violations)[:AUDIT_ANNOTATION_LIMIT]
        response["auditAnnotations"] = annotations
    return {"apiVersion": request.api_version, "kind": "AdmissionReview", "response": response}


# ---------------------------------------------------------------------------------------------- requests


def make_review(
    obj: dict[str, Any],
    *,
    namespace: str,
    operation: Operation = "CREATE",
    uid: str | None = None,
    version: str = V1,
    old: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An AdmissionReview request for `obj`, as the API server would send it (the CLI's --server, tests).

    `old` is the UPDATE's oldObject (default: `obj` itself, an update that changes nothing).
    """
    if version not in SUPPORTED_VERSIONS:
        raise ValueError(f"version must be one of {', '.join(SUPPORTED_VERSIONS)}, not {version!r}")
    if operation not in OPERATIONS:
        raise ValueError(f"operation must be one of {', '.join(OPERATIONS)}, not {operation!r}")
    api_version = str(obj.get("apiVersion", "v1"))
    group, _, obj_version = api_version.rpartition("/")
    kind = str(obj.get("kind", ""))
    metadata = found if isinstance(found := obj.get("metadata"), dict) else {}
    resource = kind.lower() + "s"  # pods, deployments, jobs, cronjobs, statefulsets, ...
    gvk = {"group": group, "version": obj_version, "kind": kind}
    gvr = {"group": group, "version": obj_version, "resource": resource}
    request: dict[str, Any] = {
        "uid": uid or str(uuid.uuid4()),
        "kind": gvk,
        "resource": gvr,
        "requestKind": gvk,
        "requestResource": gvr,
        "name": str(metadata.get("name", "")),
        "namespace": namespace,
        "operation": operation,
        "userInfo": {"username": "gpu-webhook", "groups": ["system:authenticated"]},
        "object": None if operation in ("DELETE", "CONNECT") else obj,
        "oldObject": (obj if old is None else old) if operation in ("UPDATE", "DELETE") else None,
        "dryRun": False,
    }
    return {"apiVersion": version, "kind": "AdmissionReview", "request": request}
