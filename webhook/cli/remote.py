"""`check --server`: ask a running webhook, through real AdmissionReviews, what it decides.

The CLI does what the API server does: POST the object to /mutate, apply the returned JSON Patch, POST the
result to /validate. One kept-alive HTTPS connection serves every object. The answers become an engine
`Decision`, so the report is the same as in process. Only the standard library speaks HTTP here: `requests`
is not a runtime dependency.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
from typing import Any
from urllib.parse import urlsplit

import jsonpatch

from webhook.admission.base.podspec import default_requests_from_limits, pod_spec_path
from webhook.admission.customresources import BUILTIN, KindTable
from webhook.admission.engine import Decision
from webhook.admission.phases.mutate import POLICY_ANNOTATION
from webhook.admission.review import make_review
from webhook.cli.common import REQUEST_TIMEOUT_S, CommandError


class RemoteError(CommandError):
    """The webhook could not be asked or answered nonsense: one line naming the URL and what to do."""


class RemoteEvaluator:
    """An `Evaluator` (obj, namespace) -> Decision backed by a webhook at `url`."""

    def __init__(
        self,
        url: str,
        *,
        ca_file: str | None = None,
        insecure: bool = False,
        timeout: float = REQUEST_TIMEOUT_S,
        kinds: KindTable = BUILTIN,
    ):
        parts = urlsplit(url)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise RemoteError(f"--server {url}: expected https://HOST[:PORT] (the webhook's address)")
        self.url = url.rstrip("/")
        self._scheme = parts.scheme
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._base = parts.path.rstrip("/")
        self._timeout = timeout
        self._context = _tls_context(ca_file, insecure) if parts.scheme == "https" else None
        self._conn: http.client.HTTPConnection | None = None
        self._kinds = kinds  # custom resources: sent to /validate only, as the shipped configurations send them

    # --- the Evaluator interface ------------------------------------------------------------------------

    def __call__(self, obj: dict[str, Any], namespace: str) -> Decision:
        sent = default_requests_from_limits(obj)
        if pod_spec_path(sent) is None and self._kinds.lookup(sent) is not None:
            validate = self._review("validate", make_review(sent, namespace=namespace))
            allowed = bool(validate.get("allowed"))
            warnings = _strings(validate.get("warnings"))
            return Decision(
                allowed=allowed,
                verdict="deny" if not allowed else ("warn" if warnings else "allow"),
                policy=_policy_of(validate),
                warnings=warnings,
                violations=[] if allowed else _messages(validate),
                mutated=sent,
            )
        if pod_spec_path(sent) is None:
            # The webhook's rules never send such objects; neither does the CLI. The engine would skip it.
            return Decision(allowed=True, verdict="allow", policy="", mutated=sent, skipped=True)
        mutate = self._review("mutate", make_review(sent, namespace=namespace))
        patch = _decode_patch(mutate, self.url)
        try:
            mutated = jsonpatch.apply_patch(sent, patch) if patch else sent
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
            raise RemoteError(f"{self.url}/mutate returned a patch that does not apply: {exc}") from None
        warnings = _strings(mutate.get("warnings"))
        policy = _policy_of(mutate) or _policy_annotation(mutated)
        violations: list[str] = []
        validation_warnings: list[str] = []
        allowed = bool(mutate.get("allowed"))
        if allowed:
            validate = self._review("validate", make_review(mutated, namespace=namespace))
            allowed = bool(validate.get("allowed"))
            # /mutate's warnings announce changes; what /validate adds are violations under `warn`.
            validation_warnings = [w for w in _strings(validate.get("warnings")) if w not in warnings]
            warnings += validation_warnings
            policy = policy or _policy_of(validate)
            if not allowed:
                violations = _messages(validate)
        else:
            violations = _messages(mutate)
        return Decision(
            allowed=allowed,
            verdict="deny" if not allowed else ("warn" if validation_warnings else "allow"),
            policy=policy,
            patch=patch,
            warnings=warnings,
            violations=violations,
            mutated=mutated,
        )

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # --- HTTP ---------------------------------------------------------------------------------------------

    def _connect(self) -> http.client.HTTPConnection:
        if self._conn is None:
            if self._context is not None:
                self._conn = http.client.HTTPSConnection(
                    self._host, self._port, timeout=self._timeout, context=self._context
                )
            else:
                self._conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
        return self._conn

    def _post(self, path: str, body: bytes) -> tuple[int, bytes]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        for attempt in (1, 2):
            reused = self._conn is not None
            conn = self._connect()
            try:
                conn.request("POST", path, body=body, headers=headers)
                response = conn.getresponse()
                return response.status, response.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
                self.close()  # the server closed a kept-alive connection: one fresh try
                if not reused or attempt == 2:
                    raise RemoteError(f"{self.url}: the connection was closed ({exc})") from None
            except ssl.SSLCertVerificationError as exc:
                self.close()
                raise RemoteError(
                    f"{self.url}: TLS verification failed ({exc.verify_message}); pass --ca-file with the CA "
                    "that signed the webhook's certificate (or --insecure for a development server)"
                ) from None
            except ssl.SSLError as exc:
                self.close()
                raise RemoteError(f"{self.url}: TLS failed ({exc.reason or exc})") from None
            except ConnectionRefusedError:
                self.close()
                raise RemoteError(f"{self.url}: connection refused (is the webhook running there?)") from None
            except TimeoutError:
                self.close()
                raise RemoteError(f"{self.url}: no answer within {self._timeout:g} s") from None
            except OSError as exc:
                self.close()
                raise RemoteError(f"{self.url}: cannot connect ({exc.strerror or exc})") from None
        raise AssertionError("unreachable")

    def _review(self, endpoint: str, review: dict[str, Any]) -> dict[str, Any]:
        """POST one AdmissionReview; return its `response`."""
        url = f"{self.url}/{endpoint}"
        status, body = self._post(f"{self._base}/{endpoint}", json.dumps(review).encode())
        if status != 200:
            text = body.decode("utf-8", "replace").strip().splitlines()
            raise RemoteError(f"{url} answered HTTP {status}" + (f": {text[0][:200]}" if text else ""))
        try:
            answer = json.loads(body)
            response = answer["response"]
            if not isinstance(response, dict):
                raise TypeError("response is not an object")
        except (ValueError, KeyError, TypeError) as exc:
            raise RemoteError(f"{url} did not answer with an AdmissionReview ({exc})") from None
        uid = review.get("request", {}).get("uid")
        if uid is not None and response.get("uid") != uid:
            raise RemoteError(f"{url} answered for uid {response.get('uid')!r}, not {uid!r}")
        return response


def _tls_context(ca_file: str | None, insecure: bool) -> ssl.SSLContext:
    if insecure:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    try:
        return ssl.create_default_context(cafile=ca_file)
    except FileNotFoundError:
        raise RemoteError(f"--ca-file {ca_file}: no such file") from None
    except (ssl.SSLError, OSError) as exc:
        raise RemoteError(f"--ca-file {ca_file}: not a PEM CA bundle ({exc})") from None


def _decode_patch(response: dict[str, Any], url: str) -> list[dict[str, Any]]:
    encoded = response.get("patch")
    if not encoded:
        return []
    try:
        patch = json.loads(base64.b64decode(encoded))
    except ValueError as exc:
        raise RemoteError(f"{url}/mutate returned a patch that is not base64 JSON ({exc})") from None
    if not isinstance(patch, list):
        raise RemoteError(f"{url}/mutate returned a patch that is not a JSON Patch list")
    return patch


def _strings(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _messages(response: dict[str, Any]) -> list[str]:
    """A denial's lines: the webhook puts one violation per line in `status.message`."""
    status = response.get("status")
    message = status.get("message") if isinstance(status, dict) else None
    if not isinstance(message, str) or not message.strip():
        return ["denied by the webhook (no message)"]
    return [line.strip() for line in message.splitlines() if line.strip()]


def _policy_annotation(obj: dict[str, Any]) -> str:
    """The policy the webhook names on objects it changes (`gpu-admission.io/policy`)."""
    metadata = obj.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    value = annotations.get(POLICY_ANNOTATION) if isinstance(annotations, dict) else None
    return value if isinstance(value, str) else ""


def _policy_of(response: dict[str, Any]) -> str:
    """The policy name from the response's audit annotations (`...policy`), when the webhook sets one."""
    annotations = response.get("auditAnnotations")
    if isinstance(annotations, dict):
        for key, value in annotations.items():
            if key.endswith("policy") and isinstance(value, str):
                return value
    return ""
