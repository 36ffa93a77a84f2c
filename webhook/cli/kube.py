"""Listing a cluster's Pods and workloads for `audit`, page by page, as plain API dicts.

Objects come back as the API's JSON (camelCase field names), not as the client's model classes, because the
engine reads manifests exactly as the API server sends them to a webhook. The `kubernetes` client is imported
only when a `KubeClient` is made: it alone takes longer to import than `check` may take to run.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from webhook.admission.policy import objects
from webhook.cli.common import CommandError

if TYPE_CHECKING:
    from webhook.admission.customresources import CustomKind

PAGE_SIZE = 500
REQUEST_TIMEOUT_S = 30


class ClusterError(CommandError):
    """The cluster could not be listed: one line saying what failed and what to do."""


class Forbidden(ClusterError):
    """HTTP 403 on one resource: RBAC, not the cluster, so the caller may skip the resource and list the rest
    (the built-in `view` role, for one, grants no podtemplates)."""

    def __init__(self, resource: Resource, namespace: str | None, detail: str):
        self.resource, self.namespace, self.detail = resource, namespace, detail
        super().__init__(f"forbidden (403) to list {resource.name} {self.where}: {detail}")

    @property
    def where(self) -> str:
        return f'in namespace "{self.namespace}"' if self.namespace else "at cluster scope"


@dataclass(frozen=True, slots=True)
class Resource:
    """One listable kind: which client class lists it and under which method name."""

    kind: str
    api_version: str
    name: str  # the resource as kubectl spells it (for messages and RBAC): "deployments.apps"
    api: str  # the `kubernetes.client` class
    method: str  # list_namespaced_<method> / list_<method>_for_all_namespaces (list_<method> if cluster-scoped)
    cluster_scoped: bool = False  # nodes: listed with no namespace, and the client has only list_<method>
    optional: bool = False  # not served by every supported version (DRA's, GA in 1.34): a 404 lists nothing
    absent: str = ""  # a custom resource's own 404 message (its CRD is not installed), instead of a wrong address

    @property
    def plural(self) -> str:
        return self.name.split(".")[0]

    def path(self, namespace: str | None) -> str:
        """The collection's URL path: `/apis/apps/v1/namespaces/ml/deployments`."""
        root = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        scope = f"/namespaces/{quote(namespace, safe='')}" if namespace else ""
        return f"{root}{scope}/{self.plural}"


# Nodes, for the cluster checks and the drift report (cluster-scoped: listed with no namespace).
NODES = Resource("Node", "v1", "nodes", "CoreV1Api", "node", cluster_scoped=True)
# DRA's devices and classes, for the cluster checks on nodes that DRA serves (404 on a cluster without them).
RESOURCE_SLICES = Resource("ResourceSlice", "resource.k8s.io/v1", "resourceslices.resource.k8s.io", "ResourceV1Api",
                           "resource_slice", cluster_scoped=True, optional=True)  # fmt: skip
DEVICE_CLASSES = Resource("DeviceClass", "resource.k8s.io/v1", "deviceclasses.resource.k8s.io", "ResourceV1Api",
                          "device_class", cluster_scoped=True, optional=True)  # fmt: skip
# Namespaces, for `policy lint --cluster`: a policy's namespaces entry that names none of them.
NAMESPACES = Resource("Namespace", "v1", "namespaces", "CoreV1Api", "namespace", cluster_scoped=True)
# ResourceQuotas, for the GPU budgets `audit` and `policy lint --cluster` show (budgets.py).
RESOURCE_QUOTAS = Resource("ResourceQuota", "v1", "resourcequotas", "CoreV1Api", "resource_quota")
# The policies themselves, for `--from-cluster` and `policy export` (cluster-scoped; listed raw, as custom
# resources are: no typed client class).
GPU_POLICIES = Resource(
    "GPUPolicy",
    f"{objects.GROUP}/{objects.VERSION}",
    objects.RESOURCE,
    "",
    "",
    cluster_scoped=True,
    absent=(
        f"the GPUPolicy API is not installed in this cluster (no CustomResourceDefinition {objects.RESOURCE}); "
        "install it or use --policies DIR"
    ),
)

# The native admission policies (`policy render native`), for `policy lint --from-cluster`: where any is
# installed, lint says what they cannot carry (listed raw; 404 before Kubernetes 1.30 lists none).
VALIDATING_ADMISSION_POLICIES = Resource(
    "ValidatingAdmissionPolicy",
    "admissionregistration.k8s.io/v1",
    "validatingadmissionpolicies.admissionregistration.k8s.io",
    "",
    "",
    cluster_scoped=True,
    optional=True,
)

# Workloads first (their templates are what a team fixes), then PodTemplates and bare Pods.
RESOURCES: tuple[Resource, ...] = (
    Resource("Deployment", "apps/v1", "deployments.apps", "AppsV1Api", "deployment"),
    Resource("StatefulSet", "apps/v1", "statefulsets.apps", "AppsV1Api", "stateful_set"),
    Resource("DaemonSet", "apps/v1", "daemonsets.apps", "AppsV1Api", "daemon_set"),
    Resource("ReplicaSet", "apps/v1", "replicasets.apps", "AppsV1Api", "replica_set"),
    Resource("ReplicationController", "v1", "replicationcontrollers", "CoreV1Api", "replication_controller"),
    Resource("CronJob", "batch/v1", "cronjobs.batch", "BatchV1Api", "cron_job"),
    Resource("Job", "batch/v1", "jobs.batch", "BatchV1Api", "job"),
    # DRA claims and templates before Pods: a pod's GPU total counts the devices of those it names.
    Resource(
        "ResourceClaimTemplate",
        "resource.k8s.io/v1",
        "resourceclaimtemplates.resource.k8s.io",
        "ResourceV1Api",
        "resource_claim_template",
        optional=True,
    ),
    Resource(
        "ResourceClaim",
        "resource.k8s.io/v1",
        "resourceclaims.resource.k8s.io",
        "ResourceV1Api",
        "resource_claim",
        optional=True,
    ),
    Resource("PodTemplate", "v1", "podtemplates", "CoreV1Api", "pod_template"),
    Resource("Pod", "v1", "pods", "CoreV1Api", "pod"),
)


class OneCluster:
    """One KubeClient for the several reads of one command (`policy lint --from-cluster --cluster`: the policies,
    whether native policies are installed, the nodes and budgets), made at the first and closed at the end, so that
    a kubeconfig's exec credential plugin (a cloud login) runs once, not once per read. A kubeconfig that cannot be
    loaded raises the same error at every use."""

    def __init__(self, kubeconfig: str | None, context: str | None) -> None:
        self._kubeconfig, self._context = kubeconfig, context
        self._client: KubeClient | None = None
        self._error: ClusterError | None = None

    def client(self) -> KubeClient:
        if self._error is not None:
            raise self._error
        if self._client is None:
            try:
                self._client = KubeClient(kubeconfig=self._kubeconfig, context=self._context)
            except ClusterError as exc:
                self._error = exc
                raise
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class KubeClient:
    """A connection to one cluster (kubeconfig context or in-cluster service account)."""

    def __init__(self, *, kubeconfig: str | None = None, context: str | None = None):
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException

        configuration = client.Configuration()
        self._files: str | None = None  # the kubeconfig files loaded (None in-cluster), to name an exec plugin
        self._context = context
        try:
            self.name = self._load(config, configuration, kubeconfig, context)
        except ConfigException as exc:
            raise ClusterError(f"kubeconfig: {_first_line(exc)}") from None
        except OSError as exc:
            raise ClusterError(f"kubeconfig: {exc.strerror or exc}") from None
        except ClusterError:
            raise
        except Exception as exc:  # the client trips over malformed files with assorted exceptions
            where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
            raise ClusterError(f"kubeconfig {where}: not a valid kubeconfig ({exc})") from None
        configuration.retries = False  # an unreachable cluster is one clear error, not three slow ones
        if not configuration.verify_ssl and configuration.host.startswith("https:"):
            _say_unverified(configuration.host, self.name)
        self.host = configuration.host
        self._client = client.ApiClient(configuration)
        self._apis: dict[str, Any] = {}
        self._module = client

    def _load(self, config: Any, configuration: Any, kubeconfig: str | None, context: str | None) -> str:
        """Load credentials into `configuration`; return the name to report (the context, or in-cluster)."""
        if kubeconfig is not None and not os.path.exists(kubeconfig):
            raise ClusterError(f"--kubeconfig {kubeconfig}: no such file")
        # $KUBECONFIG is a list of files that kubectl merges, skipping those that do not exist.
        chain = [os.path.expanduser(p) for p in os.environ.get("KUBECONFIG", "~/.kube/config").split(os.pathsep) if p]
        if kubeconfig is None and context is None and not any(os.path.exists(path) for path in chain):
            if not os.environ.get("KUBERNETES_SERVICE_HOST"):
                raise ClusterError(
                    "no kubeconfig (~/.kube/config or $KUBECONFIG) and not running in a cluster; pass --kubeconfig FILE"
                )
            config.load_incluster_config(client_configuration=configuration)
            return "in-cluster"
        # Named here, not left to the client's default, which it reads from $KUBECONFIG once, at import.
        files = self._files = kubeconfig if kubeconfig is not None else os.pathsep.join(chain)
        with _plugin_errors() as plugin_errors:  # the user's exec credential plugin runs here
            config.load_kube_config(
                config_file=files, context=context, client_configuration=configuration, persist_config=False
            )
        if plugin_errors:
            raise ClusterError(self._plugin_failure(plugin_errors[0]))
        if context:
            return context
        _, active = config.list_kube_config_contexts(files)
        return str(active.get("name")) if isinstance(active, dict) else "kubeconfig"

    def close(self) -> None:
        self._client.close()

    def custom_resources(self, kinds: Sequence[CustomKind]) -> list[Resource]:
        """The custom resource kinds the cluster serves, at their group's preferred version (one API discovery
        request, GET /apis); a group the cluster does not serve (its CRD is not installed) is left out."""
        if not kinds:
            return []
        if not hasattr(self._client, "param_serialize"):
            # Clients before the pydantic generator list through typed classes only, which custom resources lack.
            sys.stderr.write("gpu-webhook audit: custom resources are not listed: this kubernetes client is too "
                             "old to list them (install kubernetes>=32)\n")  # fmt: skip
            return []
        preferred: dict[str, str] = {}
        groups = self._discovery("/apis").get("groups")
        for group in groups if isinstance(groups, list) else []:
            version = group.get("preferredVersion") if isinstance(group, dict) else None
            name = group.get("name") if isinstance(group, dict) else None
            if isinstance(version, dict) and isinstance(name, str) and isinstance(version.get("groupVersion"), str):
                preferred[name] = version["groupVersion"]
        served: dict[str, set[str]] = {}  # groupVersion -> its resources (one request per group that is served)
        found = []
        for kind in kinds:
            version = preferred.get(kind.group)
            if version is None:
                continue  # no CRD of this group installed
            if version not in served:
                listed = self._discovery(f"/apis/{version}").get("resources")
                listed = listed if isinstance(listed, list) else []
                served[version] = {r["name"] for r in listed if isinstance(r, dict) and isinstance(r.get("name"), str)}
            if kind.resource in served[version]:
                found.append(Resource(kind.kind, version, f"{kind.resource}.{kind.group}", "", ""))
        return found

    def _discovery(self, path: str) -> dict[str, Any]:
        """GET `path` (/apis: the API groups and their preferred versions; /apis/GROUP/VERSION: its resources);
        {} where the server answers nothing usable (the list calls then say what is wrong)."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError, SSLError

        try:
            with _plugin_errors() as plugin_errors:  # an expired exec token is renewed here
                request = self._client.param_serialize(
                    method="GET", resource_path=path, header_params={"Accept": "application/json"},
                    auth_settings=["BearerToken"],
                )  # fmt: skip
                response = self._client.call_api(*request, _request_timeout=REQUEST_TIMEOUT_S)
                response.read()
            status, body = response.status, response.data
        except ApiException as exc:
            status, body = exc.status, exc.body
        except SSLError as exc:
            raise ClusterError(f"TLS with {self.host} failed: {_first_line(exc)}") from None
        except (HTTPError, OSError) as exc:
            cause = getattr(exc, "reason", None) or exc
            raise ClusterError(f"cannot reach the cluster at {self.host}: {_first_line(cause)}") from None
        if status == 401:
            if plugin_errors:
                raise ClusterError(self._plugin_failure(plugin_errors[0]))
            raise ClusterError(self._refusal(401, "", NODES))
        if status != 200:
            return {}
        try:
            page = json.loads(body or "")  # no body reads as none that parses
        except ValueError:
            return {}
        return page if isinstance(page, dict) else {}

    def list_objects(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        page_size: int = PAGE_SIZE,
        on_page: Callable[[Resource, int], None] | None = None,
    ) -> list[dict[str, Any]]:
        """Every object of `resource` (in `namespace`, or all), following `continue` tokens page by page.

        Every resource listed is GA in every Kubernetes the webhook supports, so a 404 means the kubeconfig
        does not point at a Kubernetes API (a wrong path or proxy): an error, never an empty and clean report.
        A continue token that expired (410, a listing slower than the API server's token lifetime) restarts
        that resource's listing once.
        """
        for attempt in (1, 2):
            try:
                return list(self._pages(resource, namespace, page_size, on_page))
            except _Expired:
                if attempt == 2:
                    raise ClusterError(
                        f"listing {resource.name} took longer than the API server keeps a continue token; "
                        "try again, or audit one namespace at a time"
                    ) from None
        return []

    def _pages(
        self,
        resource: Resource,
        namespace: str | None,
        page_size: int,
        on_page: Callable[[Resource, int], None] | None,
    ) -> Iterator[dict[str, Any]]:
        token: str | None = None
        seen = 0
        while True:
            page = self._get(resource, namespace, page_size, token)
            items = page.get("items") or []
            for obj in items:
                if isinstance(obj, dict):
                    # List items carry no kind/apiVersion; the engine needs them.
                    obj.setdefault("kind", resource.kind)
                    obj.setdefault("apiVersion", resource.api_version)
                    yield obj
            seen += len(items)
            if on_page is not None:
                on_page(resource, seen)
            metadata = page.get("metadata") or {}
            token = metadata.get("continue") if isinstance(metadata, dict) else None
            if not token:
                return

    def _request(self, resource: Resource, namespace: str | None, page_size: int, token: str | None) -> Any:
        """GET one page; returns an HTTP response with `.status`, `.reason` and `.data`.

        Newer clients (the pydantic generator) build every model class the first time an API class is used:
        seconds of start-up for objects we want raw anyway. There the request goes through the ApiClient
        itself; older clients go through the typed list methods, which are cheap there.
        """
        if hasattr(self._client, "param_serialize"):
            query: list[tuple[str, Any]] = [("limit", page_size)]
            if token:
                query.append(("continue", token))
            request = self._client.param_serialize(
                method="GET",
                resource_path=resource.path(namespace),
                query_params=query,
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
            )
            response = self._client.call_api(*request, _request_timeout=REQUEST_TIMEOUT_S)
            response.read()
            return response
        if not resource.api:  # a custom resource: only the newer clients list it raw
            raise ClusterError(f"this kubernetes client is too old to list {resource.name} (install kubernetes>=32)")
        api = self._apis.get(resource.api)
        if api is None:
            api = self._apis[resource.api] = getattr(self._module, resource.api)(self._client)
        kwargs: dict[str, Any] = {"limit": page_size, "_preload_content": False}
        if token:
            kwargs["_continue"] = token
        if namespace:
            method = getattr(api, f"list_namespaced_{resource.method}")
            return method(namespace, _request_timeout=REQUEST_TIMEOUT_S, **kwargs)
        scope = "" if resource.cluster_scoped else "_for_all_namespaces"
        method = getattr(api, f"list_{resource.method}{scope}")
        return method(_request_timeout=REQUEST_TIMEOUT_S, **kwargs)

    def _get(self, resource: Resource, namespace: str | None, page_size: int, token: str | None) -> dict[str, Any]:
        """One page as a dict."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError, SSLError

        try:
            with _plugin_errors() as plugin_errors:  # an expired exec token is renewed here
                response = self._request(resource, namespace, page_size, token)
            status, reason, body = response.status, response.reason, response.data
        except ApiException as exc:
            status, reason, body = exc.status, exc.reason, exc.body
        except SSLError as exc:
            raise ClusterError(f"TLS with {self.host} failed: {_first_line(exc)}") from None
        except (HTTPError, OSError) as exc:
            cause = getattr(exc, "reason", None) or exc
            raise ClusterError(f"cannot reach the cluster at {self.host}: {_first_line(cause)}") from None
        if status == 410:
            raise _Expired
        if status == 401 and plugin_errors:
            raise ClusterError(self._plugin_failure(plugin_errors[0]))
        if status == 403:
            raise Forbidden(resource, namespace, _status_message(body) or reason or "")
        if status == 404 and resource.optional:
            return {"items": []}  # an API server before DRA's v1: nothing of it to judge
        if status != 200:
            raise ClusterError(self._refusal(status, _status_message(body) or reason or "", resource))
        try:
            page = json.loads(body)
        except ValueError:
            raise ClusterError(f"{self.host} answered something that is not JSON listing {resource.name}") from None
        if not isinstance(page, dict):
            raise ClusterError(f"{self.host} answered a {type(page).__name__}, not a list, for {resource.name}")
        return page

    def _refusal(self, status: int, detail: str, resource: Resource) -> str:
        if status == 401:
            return (
                f"{self.host} rejected the credentials (401 Unauthorized): log in again or fix the user "
                f"of context {self.name}"
            )
        if status == 404 and resource.absent:
            return resource.absent
        if status == 404:
            return (
                f"{self.host} does not serve {resource.name} (404), which every Kubernetes API server does: "
                "check the server address (and any path after it) of the kubeconfig's cluster"
            )
        return f"{self.host} answered HTTP {status} listing {resource.name}: {detail}"

    def _plugin_failure(self, logged: str) -> str:
        """One line from what the client logged about the kubeconfig user's failed exec credential plugin."""
        user, command = _exec_plugin(self._files, self._context)
        who = f'kubeconfig user "{user}"' if user else "the kubeconfig user"
        plugin = f"exec credential plugin {command}" if command else "exec credential plugin"
        reason = logged.removeprefix("exec: ")
        # With stdout on a terminal the client hands the plugin our stderr (for a login prompt): what it said is
        # above, not in the message; and its non-zero exit then trips the client over the missing text.
        interactive = hasattr(sys.stdout, "isatty") and sys.stdout.isatty()
        if interactive and reason == "'NoneType' object has no attribute 'strip'":
            return f"{who}: {plugin} failed; see its output above"
        exited = re.fullmatch(r"process returned (-?\d+)(?:\. (.*))?", reason, re.DOTALL)
        if exited:
            said = "; ".join(line.strip() for line in (exited[2] or "").splitlines() if line.strip())
            if said:
                return f"{who}: {plugin} exited with status {exited[1]}: {said}"
            hint = "see its output above" if interactive else "run it by hand to see why"
            return f"{who}: {plugin} exited with status {exited[1]}; {hint}"
        oserror = re.fullmatch(r"\[Errno \d+\] (.*?)(?:: '.*')?", reason, re.DOTALL)  # the command cannot run
        if oserror:
            return f"{who}: cannot run {plugin}: {oserror[1]}; install it, or fix the exec command in the kubeconfig"
        return f"{who}: {plugin} failed: {_first_line(reason)}; fix the plugin or its exec section in the kubeconfig"


def _say_unverified(host: str, name: str) -> None:
    """One line of our own for a kubeconfig with `insecure-skip-tls-verify: true`, instead of urllib3's
    InsecureRequestWarning, which repeats on every request (ten for one audit) and names no setting to fix.
    Filtered by category only: a warning about anything else still shows."""
    import warnings

    from urllib3.exceptions import InsecureRequestWarning

    warnings.filterwarnings("ignore", category=InsecureRequestWarning)
    sys.stderr.write(
        f"gpu-webhook: warning: the API server's certificate is not verified ({host}): context {name} sets "
        "insecure-skip-tls-verify; set certificate-authority(-data) in the kubeconfig instead\n"
    )


class _Expired(Exception):
    """HTTP 410: the continue token is too old."""


class _PluginErrorFilter(logging.Filter):
    """Takes what the client logs about a failed exec credential plugin off the root logger.

    The client logs the failure and carries on without credentials, which would show as its log line and
    then a puzzling 401; the audit says it in one line of its own instead.
    """

    def __init__(self, caught: list[str]):
        super().__init__()
        self.caught = caught

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "root" and record.funcName == "_load_from_exec_plugin":
            self.caught.append(record.getMessage())
            return False
        return True


@contextmanager
def _plugin_errors() -> Iterator[list[str]]:
    """The messages the client logs about the exec credential plugin while the block runs, kept off stderr."""
    caught: list[str] = []
    root = logging.getLogger()
    errors = _PluginErrorFilter(caught)
    # A handler, so that the client's logging.error() finds one and does not basicConfig() one that prints.
    placeholder = logging.NullHandler()
    root.addFilter(errors)
    root.addHandler(placeholder)
    try:
        yield caught
    finally:
        root.removeHandler(placeholder)
        root.removeFilter(errors)


def _exec_plugin(files: str | None, context: str | None) -> tuple[str | None, str | None]:
    """The active context's user and its exec command, to name them; (None, None) when they cannot be read."""
    if files is None:
        return None, None
    try:
        from kubernetes.config.kube_config import KubeConfigMerger

        merged = KubeConfigMerger(files).config
        name = context or merged["current-context"]
        user = merged["contexts"].get_with_name(name)["context"]["user"]
        command = merged["users"].get_with_name(user)["user"]["exec"]["command"]
        return str(user), str(command)
    except Exception:  # best effort: the message stays one line without the names
        return None, None


def _status_message(body: Any) -> str:
    """The `message` of a Kubernetes Status body, when there is one."""
    if not body:
        return ""
    try:
        status = json.loads(body)
    except (TypeError, ValueError):
        return _first_line(body)
    return str(status.get("message", "")) if isinstance(status, dict) else ""


def _first_line(value: Any) -> str:
    text = str(value).strip()
    return text.splitlines()[0] if text else type(value).__name__
