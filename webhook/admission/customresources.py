"""Pod templates inside custom resources (RayCluster, PyTorchJob, InferenceService, ...): where they live, and
the verdict on a custom resource from the verdicts on its templates.

A custom resource is judged, never changed: its operator makes the Pods, and the mutating webhook mutates those
as usual. What is judged is each template as its pods will be, after mutation: every template goes through
`engine.evaluate` as a PodTemplate of its own (so every rule lives once, in the engine), and the custom resource
is denied when one of them would be, each line led by the template's place in the object
(`workerGroupSpecs[0] (gpu-group) container "ray-worker": ...`). Per-pod caps apply per template: each is one
pod, whatever its replicas.

`BUILTIN_KINDS` is the one table: the engine reads it here, and `webhook.cli.webhooks` writes the webhook
configurations' entries and their matchConditions from it (`make manifests`). Adding a kind is one entry. The
paths are those of each project's own Go types (docs/custom-resources.md cites the files).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from webhook.admission.base.podspec import controller_reference, get_path
from webhook.admission.base.resources import is_managed
from webhook.admission.base.violation import WARNING_LIMIT, WARNING_PREFIX, cut
from webhook.admission.budgets.budget import Usage
from webhook.admission.cluster.nodes import ClusterView
from webhook.admission.dra.podclaims import ClaimsView
from webhook.admission.engine import Decision, Verdict
from webhook.admission.engine import evaluate as evaluate_workload
from webhook.admission.policy.model import Enforcement, PolicySet

# The pod spec's container sections, as a template's pods will have them.
POD_SECTIONS = ("containers", "initContainers")


@dataclass(frozen=True, slots=True)
class Site:
    """One place where a custom resource holds the parts of a pod.

    `path` leads from the object's root to the object that holds them: dotted keys, `[*]` for every item of a
    list and `{*}` for every value of a map (`spec.workerGroupSpecs[*].template.spec`). Under it, `containers`
    and `init_containers` name the lists of containers (a dotted path each: Argo's `containerSet.containers`),
    `single` the keys that hold one container each (KServe's `model`, Argo's `container`), and `volumes` the
    pod's volumes. `resources` is the key of a single container's resource requirements (Kubeflow Trainer's
    TrainJob calls it `resourcesPerNode`). A list item is named in messages by its `name_key`.
    """

    path: str
    containers: tuple[str, ...] = ("containers",)
    init_containers: tuple[str, ...] = ("initContainers",)
    single: tuple[str, ...] = ()
    volumes: str = "volumes"
    resources: str = "resources"
    name_key: str = "name"

    @property
    def steps(self) -> tuple[str, ...]:
        return tuple(_split(self.path))


@dataclass(frozen=True, slots=True)
class CustomKind:
    """A custom resource kind (namespaced) whose objects hold pod templates: where, and how the API server
    names it (`group`, `kind`, and `resource`, its plural, for the webhook configurations' rules)."""

    group: str
    kind: str
    resource: str
    sites: tuple[Site, ...]
    source: str = ""  # where the paths come from (the project's Go types), for the docs

    @property
    def key(self) -> tuple[str, str]:
        return self.group, self.kind


def _split(path: str) -> list[str]:
    """`spec.workerGroupSpecs[*].template` -> ["spec", "workerGroupSpecs", "[*]", "template"]."""
    steps: list[str] = []
    for part in path.split("."):
        match = re.fullmatch(r"([A-Za-z0-9_-]+)((?:\[\*\]|\{\*\})*)", part)
        if match is None:
            raise ValueError(f"{path!r}: {part!r} is not a key, optionally followed by [*] or {{*}}")
        steps.append(match.group(1))
        steps += re.findall(r"\[\*\]|\{\*\}", match.group(2))
    return steps


_RAY_CLUSTER = (
    Site("spec.headGroupSpec.template.spec"),
    Site("spec.workerGroupSpecs[*].template.spec", name_key="groupName"),
)
_KSERVE_FRAMEWORKS = (
    "model", "sklearn", "xgboost", "tensorflow", "pytorch", "triton", "onnx", "huggingface", "pmml", "lightgbm",
    "paddle",
)  # fmt: skip


class _Lists(TypedDict):
    """Where a Site's containers are, for kinds that share the layout."""

    containers: tuple[str, ...]
    single: tuple[str, ...]


_ARGO_TEMPLATE = _Lists(containers=("containerSet.containers", "sidecars"), single=("container", "script"))


def _training(kind: str, resource: str, key: str, source: str) -> CustomKind:
    """A Kubeflow training job: a map of replica types (Master, Worker, ...) to replica specs with a template."""
    return CustomKind("kubeflow.org", kind, resource, (Site(f"spec.{key}{{*}}.template.spec"),), source)


_TRAINING_V1 = "kubeflow/training-operator pkg/apis/kubeflow.org/v1"
_KSERVE = "kserve/kserve pkg/apis/serving"

BUILTIN_KINDS: tuple[CustomKind, ...] = (
    # KubeRay: ray-project/kuberay ray-operator/apis/ray/v1 (raycluster_types.go, rayjob_types.go,
    # rayservice_types.go). A RayJob's submitter pod is a template of its own.
    CustomKind("ray.io", "RayCluster", "rayclusters", _RAY_CLUSTER, "ray-operator/apis/ray/v1/raycluster_types.go"),
    CustomKind(
        "ray.io",
        "RayJob",
        "rayjobs",
        (
            *(Site(s.path.replace("spec.", "spec.rayClusterSpec.", 1), name_key=s.name_key) for s in _RAY_CLUSTER),
            Site("spec.submitterPodTemplate.spec"),
        ),
        "ray-operator/apis/ray/v1/rayjob_types.go",
    ),
    CustomKind(
        "ray.io",
        "RayService",
        "rayservices",
        tuple(Site(s.path.replace("spec.", "spec.rayClusterConfig.", 1), name_key=s.name_key) for s in _RAY_CLUSTER),
        "ray-operator/apis/ray/v1/rayservice_types.go",
    ),
    # Kubeflow training operator (v1): replica specs by replica type, each with a PodTemplateSpec.
    _training("PyTorchJob", "pytorchjobs", "pytorchReplicaSpecs", f"{_TRAINING_V1}/pytorch_types.go"),
    _training("TFJob", "tfjobs", "tfReplicaSpecs", f"{_TRAINING_V1}/tensorflow_types.go"),
    _training("MPIJob", "mpijobs", "mpiReplicaSpecs", f"{_TRAINING_V1}/mpi_types.go; kubeflow/mpi-operator v2beta1"),
    _training("PaddleJob", "paddlejobs", "paddleReplicaSpecs", f"{_TRAINING_V1}/paddlepaddle_types.go"),
    _training("XGBoostJob", "xgboostjobs", "xgbReplicaSpecs", f"{_TRAINING_V1}/xgboost_types.go"),
    _training("JAXJob", "jaxjobs", "jaxReplicaSpecs", f"{_TRAINING_V1}/jax_types.go"),
    # Kubeflow Trainer (v2): a TrainJob asks resources per node of its runtime's trainer container; a
    # TrainingRuntime holds a JobSet template.
    CustomKind(
        "trainer.kubeflow.org",
        "TrainJob",
        "trainjobs",
        (
            Site(
                "spec", containers=(), init_containers=(), single=("trainer",), volumes="", resources="resourcesPerNode"
            ),
        ),
        "kubeflow/trainer pkg/apis/trainer/v1alpha1/trainjob_types.go",
    ),
    CustomKind(
        "trainer.kubeflow.org",
        "TrainingRuntime",
        "trainingruntimes",
        (Site("spec.template.spec.replicatedJobs[*].template.spec.template.spec"),),
        "kubeflow/trainer pkg/apis/trainer/v1alpha1/trainingruntime_types.go",
    ),
    # JobSet: kubernetes-sigs/jobset api/jobset/v1alpha2/jobset_types.go (ReplicatedJob.Template: a JobTemplateSpec).
    CustomKind(
        "jobset.x-k8s.io",
        "JobSet",
        "jobsets",
        (Site("spec.replicatedJobs[*].template.spec.template.spec"),),
        "kubernetes-sigs/jobset api/jobset/v1alpha2/jobset_types.go",
    ),
    # LeaderWorkerSet: kubernetes-sigs/lws api/leaderworkerset/v1/leaderworkerset_types.go.
    CustomKind(
        "leaderworkerset.x-k8s.io",
        "LeaderWorkerSet",
        "leaderworkersets",
        (Site("spec.leaderWorkerTemplate.leaderTemplate.spec"), Site("spec.leaderWorkerTemplate.workerTemplate.spec")),
        "kubernetes-sigs/lws api/leaderworkerset/v1/leaderworkerset_types.go",
    ),
    # KServe: a component is a PodSpec inline, and a predictor's framework (model, sklearn, ...) one container
    # inline (v1beta1 predictor.go, transformer.go, explainer.go, component.go); a ServingRuntime's spec is a
    # pod spec inline (v1alpha1 servingruntime_types.go); an LLMInferenceService holds *corev1.PodSpec
    # (v1alpha1 llm_inference_service_types.go: template, worker, prefill.{template,worker}).
    CustomKind(
        "serving.kserve.io",
        "InferenceService",
        "inferenceservices",
        (
            Site("spec.predictor", single=_KSERVE_FRAMEWORKS),
            Site("spec.predictor.workerSpec"),
            Site("spec.transformer"),
            Site("spec.explainer", single=("art",)),
        ),
        f"{_KSERVE}/v1beta1/predictor.go, transformer.go, explainer.go",
    ),
    CustomKind(
        "serving.kserve.io",
        "ServingRuntime",
        "servingruntimes",
        (Site("spec"), Site("spec.workerSpec")),
        f"{_KSERVE}/v1alpha1/servingruntime_types.go",
    ),
    CustomKind(
        "serving.kserve.io",
        "LLMInferenceService",
        "llminferenceservices",
        (Site("spec.template"), Site("spec.worker"), Site("spec.prefill.template"), Site("spec.prefill.worker")),
        f"{_KSERVE}/v1alpha1/llm_inference_service_types.go",
    ),
    # Volcano: volcano-sh/apis pkg/apis/batch/v1alpha1/job.go (TaskSpec.Template).
    CustomKind(
        "batch.volcano.sh",
        "Job",
        "jobs",
        (Site("spec.tasks[*].template.spec"),),
        "volcano-sh/apis pkg/apis/batch/v1alpha1/job.go",
    ),
    # Argo Workflows: argoproj/argo-workflows pkg/apis/workflow/v1alpha1/workflow_types.go (Template: container,
    # script, containerSet, initContainers, sidecars, volumes); a CronWorkflow holds a WorkflowSpec.
    CustomKind(
        "argoproj.io",
        "Workflow",
        "workflows",
        (Site("spec.templates[*]", **_ARGO_TEMPLATE),),
        "argoproj/argo-workflows pkg/apis/workflow/v1alpha1/workflow_types.go",
    ),
    CustomKind(
        "argoproj.io",
        "WorkflowTemplate",
        "workflowtemplates",
        (Site("spec.templates[*]", **_ARGO_TEMPLATE),),
        "argoproj/argo-workflows pkg/apis/workflow/v1alpha1/workflow_template_types.go",
    ),
    CustomKind(
        "argoproj.io",
        "CronWorkflow",
        "cronworkflows",
        (Site("spec.workflowSpec.templates[*]", **_ARGO_TEMPLATE),),
        "argoproj/argo-workflows pkg/apis/workflow/v1alpha1/cron_workflow_types.go",
    ),
    # Kubeflow Notebook: kubeflow/kubeflow components/notebook-controller/api/v1/notebook_types.go.
    CustomKind(
        "kubeflow.org",
        "Notebook",
        "notebooks",
        (Site("spec.template.spec"),),
        "kubeflow/kubeflow components/notebook-controller/api/v1/notebook_types.go",
    ),
)


@dataclass(frozen=True)
class KindTable:
    """The kinds judged here, by (API group, kind): the built-in ones and an admin's own."""

    kinds: Mapping[tuple[str, str], CustomKind] = field(default_factory=dict)

    @classmethod
    def of(cls, *groups: tuple[CustomKind, ...]) -> KindTable:
        table: dict[tuple[str, str], CustomKind] = {}
        for kinds in groups:
            for kind in kinds:
                table[kind.key] = kind  # an admin's entry replaces the built-in one of the same group and kind
        return cls(table)

    def lookup(self, obj: Any) -> CustomKind | None:
        if type(obj) is not dict:
            return None
        kind, api_version = obj.get("kind"), obj.get("apiVersion")
        if type(kind) is not str or type(api_version) is not str:
            return None
        group = api_version.rpartition("/")[0]
        return self.kinds.get((group, kind))


BUILTIN = KindTable.of(BUILTIN_KINDS)


# ------------------------------------------------------------------------------------------ an admin's own kinds


def parse_kinds(document: Any, source: str) -> tuple[CustomKind, ...]:
    """An admin's kinds from a parsed document (`kind: CustomResourceTemplates`), or a one-line ValueError.

    ```yaml
    apiVersion: gpu-admission.io/v1
    kind: CustomResourceTemplates
    kinds:
      - group: example.com
        kind: TrainingRun
        resource: trainingruns
        templates: ["spec.launcher.template.spec", "spec.workers[*].template.spec"]
    ```
    """
    if type(document) is not dict or document.get("kind") != "CustomResourceTemplates":
        raise ValueError(f"{source}: not a CustomResourceTemplates document (kind: CustomResourceTemplates)")
    entries = document.get("kinds")
    if type(entries) is not list or not entries:
        raise ValueError(f"{source}: kinds: a list of {{group, kind, resource, templates}} entries")
    kinds: list[CustomKind] = []
    for index, entry in enumerate(entries):
        where = f"{source}: kinds[{index}]"
        if type(entry) is not dict:
            raise ValueError(f"{where}: an entry is a map of group, kind, resource and templates")
        unknown = sorted(set(entry) - {"group", "kind", "resource", "templates", "nameKey"})
        if unknown:
            raise ValueError(f"{where}: unknown key {unknown[0]!r} (group, kind, resource, templates, nameKey)")
        values: dict[str, Any] = {key: entry.get(key) for key in ("group", "kind", "resource")}
        for key, value in values.items():
            if type(value) is not str or not value:
                raise ValueError(f"{where}.{key}: a non-empty string")
        templates = entry.get("templates")
        if type(templates) is not list or not templates or not all(type(t) is str and t for t in templates):
            raise ValueError(f"{where}.templates: a list of paths to pod specs, such as spec.workers[*].template.spec")
        name_key = entry.get("nameKey", "name")
        sites = []
        for path in templates:
            try:
                _split(path)
            except ValueError as exc:
                raise ValueError(f"{where}.templates: {exc}") from None
            sites.append(Site(path, name_key=name_key))
        kinds.append(CustomKind(values["group"], values["kind"], values["resource"], tuple(sites), source))
    return tuple(kinds)


# ------------------------------------------------------------------------------------------ templates


@dataclass(frozen=True, slots=True)
class Template:
    """One pod template found in an object: its place, for people, and the pod spec its pods will have."""

    place: str
    spec: dict[str, Any]


def _walk(node: Any, steps: tuple[str, ...], taken: tuple[str, ...], site: Site) -> Iterator[tuple[str, Any]]:
    """(place, holder) for every holder `steps` reach from `node`; `taken` is the place so far, as words."""
    if not steps:
        yield ".".join(taken), node
        return
    step, rest = steps[0], steps[1:]
    if step == "[*]":
        if type(node) is list:
            for index, item in enumerate(node):
                label = f"{taken[-1]}[{index}]"
                name = item.get(site.name_key) if type(item) is dict else None
                if type(name) is str and name:
                    label += f" ({cut(name, 63)})"
                yield from _walk(item, rest, (*taken[:-1], label), site)
        return
    if step == "{*}":
        if type(node) is dict:
            for key, item in node.items():
                yield from _walk(item, rest, (*taken, str(key)), site)
        return
    if type(node) is dict and step in node:
        yield from _walk(node[step], rest, (*taken, step), site)


def _place(words: str) -> str:
    """The place as people read it: without the leading `spec`, and without the `template`/`spec` steps that
    every template path ends in (`workerGroupSpecs[0] (gpu-group)`, `pytorchReplicaSpecs.Worker`)."""
    parts = words.split(".")
    if parts == ["spec"]:
        return ""  # the spec itself (a ServingRuntime's): the container names the place
    if len(parts) > 1 and parts[0] == "spec":
        parts = parts[1:]
    while len(parts) > 1 and parts[-1] in ("template", "spec"):
        parts.pop()
    return ".".join(parts)


def _pod_spec(holder: dict[str, Any], site: Site) -> dict[str, Any]:
    """The pod spec `holder`'s pods will have: its own fields, the containers gathered from `site`'s places."""
    spec = {k: v for k, v in holder.items() if k not in site.single}
    sections: dict[str, list[Any]] = {"containers": [], "initContainers": []}
    for section, paths in (("containers", site.containers), ("initContainers", site.init_containers)):
        for path in paths:
            found = get_path(holder, tuple(path.split(".")))
            if type(found) is list:
                sections[section] += found
            elif found is not None:
                sections[section].append(found)  # malformed: validation says so in its own words
    for key in site.single:
        body = holder.get(key)
        if type(body) is dict:
            container = dict(body)
            if site.resources != "resources":
                container = {k: v for k, v in body.items() if k != site.resources}
                if site.resources in body:
                    container["resources"] = body[site.resources]
            container.setdefault("name", key)
            sections["containers"].append(container)
    for section, containers in sections.items():
        if containers:
            spec[section] = containers
        else:
            spec.pop(section, None)
    if site.volumes != "volumes":
        spec.pop("volumes", None)
        if site.volumes and site.volumes in holder:
            spec["volumes"] = holder[site.volumes]
    return spec


def templates(obj: dict[str, Any], kind: CustomKind) -> list[Template]:
    """Every pod template of `obj`, in the table's order."""
    found: list[Template] = []
    for site in kind.sites:
        for words, holder in _walk(obj, site.steps, (), site):
            if type(holder) is dict:
                found.append(Template(_place(words), _pod_spec(holder, site)))
    return found


# ------------------------------------------------------------------------------------------ the verdict


def evaluate(
    obj: dict[str, Any],
    namespace: str,
    policies: PolicySet,
    old: Any = None,
    nodes: ClusterView | None = None,
    claims: ClaimsView | None = None,
    kinds: KindTable = BUILTIN,
    budget: Sequence[Usage] | None = None,
) -> Decision:
    """`engine.evaluate`, and custom resources of `kinds` judged by their templates: the server's /validate
    and the CLI call this. `claims` (DRA) count with a pod's GPUs; a custom resource's templates name no claim
    that exists yet, so they are judged without. `budget`: the namespace's GPU quotas, for a Pod (budget.py)."""
    kind = kinds.lookup(obj)
    if kind is not None:
        return judge(obj, kind, namespace, policies, old, nodes)
    decision = evaluate_workload(obj, namespace, policies, old, nodes, claims, budget)
    if decision.skipped and decision.skip_reason == NO_POD_SPEC and _custom_group(obj):
        where = gpu_mention(obj)
        if where:  # a kind nobody told gpu-admission about, asking for GPUs: say so, never pass it quietly
            decision.skip_reason = unread_reason(obj, where)
    return decision


def _custom_group(obj: dict[str, Any]) -> bool:
    """Whether `obj`'s API group is a custom resource's: a domain name, and not one of Kubernetes' own
    (`*.k8s.io`, such as an AdmissionReview's `admission.k8s.io`; `x-k8s.io` is the SIGs' CRDs' and counts)."""
    api_version = obj.get("apiVersion")
    group = api_version.rpartition("/")[0] if type(api_version) is str else ""
    return "." in group and not group.endswith(".k8s.io")


NO_POD_SPEC = "it has no pod spec"  # engine.evaluate's reason for an object of a kind it does not know
UNREAD = "gpu-admission does not read"  # how unread_reason begins: the CLI shows these as SKIP lines


def unread_reason(obj: dict[str, Any], where: str) -> str:
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    group = api_version.rpartition("/")[0] if type(api_version) is str else ""
    named = f"{kind} ({group})" if group else str(kind)
    return (
        f"{UNREAD} {named}, which asks for {where}: not judged; name its pod templates in a "
        "--custom-resources file (docs/custom-resources.md)"
    )


def gpu_mention(node: Any, path: str = "", depth: int = 0) -> str:
    """The first managed GPU resource anywhere in `node`, as `nvidia.com/gpu at spec.x.resources.limits`, or
    "" (depth-first, in the object's order; nesting past 64 levels is not looked into)."""
    if depth > 64:
        return ""
    if type(node) is dict:
        for key, value in node.items():
            if type(key) is not str:
                continue
            if is_managed(key) and path.rpartition(".")[2] in ("limits", "requests", "resourcesPerNode"):
                return f"{key} at {path}"
            found = gpu_mention(value, f"{path}.{key}" if path else key, depth + 1)
            if found:
                return found
    elif type(node) is list:
        for index, item in enumerate(node):
            found = gpu_mention(item, f"{path}[{index}]", depth + 1)
            if found:
                return found
    return ""


def judge(
    obj: dict[str, Any],
    kind: CustomKind,
    namespace: str,
    policies: PolicySet,
    old: Any = None,
    nodes: ClusterView | None = None,
) -> Decision:
    """The verdict on a custom resource: each template judged as the pods it makes will be (after mutation), its
    lines led by its place; nothing is ever patched. Left alone, as workloads are (engine._left_alone): an
    object being deleted, one whose controller made it (a RayJob's RayCluster: judged in the RayJob), and an
    update that leaves every template as it was."""
    policy = policies.for_namespace(namespace)
    found = templates(obj, kind)
    reason = ""
    if type(old) is dict and _being_deleted(old):
        reason = "it is being deleted"
    elif controller_reference(obj) is not None:
        reason = "its pod templates come from its controller"
    elif type(old) is dict and templates(old, kind) == found:
        reason = "this update leaves its pod templates as they were"
    elif not found:
        reason = f"it has no pod template where a {kind.kind} holds them"
        where = gpu_mention(obj)
        if where:  # a layout the table does not know (another version?): say so, never pass it quietly
            paths = ", ".join(site.path for site in kind.sites)
            reason = (
                f"{UNREAD} this {kind.kind} ({kind.group}): no pod template at {paths}, but it asks for {where}: "
                "not judged; name its pod templates in a --custom-resources file (docs/custom-resources.md)"
            )
    if reason:
        return Decision(True, "allow", policy.name, mutated=obj, skipped=True, skip_reason=reason)
    metadata = obj.get("metadata")
    name = metadata.get("name") if type(metadata) is dict else None
    violations: list[str] = []
    refusals: list[str] = []
    shorts: list[str] = []
    for template in found:
        view = {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": name if type(name) is str else "", "namespace": namespace},
            "template": {"spec": copy.deepcopy(template.spec)},
        }
        decision = evaluate_workload(view, namespace, policies, None, nodes)
        lead = f"{template.place} " if template.place else ""
        violations += [lead + line for line in decision.violations]
        refusals += [lead + line for line in decision.refusals]
        if policy.enforcement is Enforcement.WARN:
            # The engine appends one short form per violation it did not deny (refusals are denied) last.
            count = len(decision.violations) - len(decision.refusals)
            for short in decision.warnings[len(decision.warnings) - count :] if count else ():
                placed = f"{WARNING_PREFIX}{lead}{short.removeprefix(WARNING_PREFIX)}"
                shorts.append(placed if len(placed) <= WARNING_LIMIT else short)
    if not violations:
        return Decision(True, "allow", policy.name, mutated=obj)
    if policy.enforcement is Enforcement.ENFORCE:
        return Decision(False, "deny", policy.name, [], [], violations, obj, [], refusals)
    if refusals:
        return Decision(False, "deny", policy.name, [], [], violations, obj, [], refusals, True)
    verdict: Verdict = "warn" if policy.enforcement is Enforcement.WARN else "audit"
    return Decision(True, verdict, policy.name, [], shorts, violations, obj, [], [])


def _being_deleted(obj: dict[str, Any]) -> bool:
    metadata = obj.get("metadata")
    return type(metadata) is dict and bool(metadata.get("deletionTimestamp"))
