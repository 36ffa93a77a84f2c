"""What the native set does not carry, and why: one `Gap` per rule, named once here so that the compiler's
stderr, the docs and the tests' list of cases not compared read the same reasons.

`shape` says which of the policy's rules are compiled at all: whole GPUs (`exclusive`), replicas shared as
`nvidia.com/gpu.shared` (`time-slicing`, `mps`), MIG slices (`mig`, its backend says where), a memory backend's
shares (`memory`), or none but the limits copied from requests (every other mode).
"""

from __future__ import annotations

from typing import Literal

from webhook.admission.base.resources import NVIDIA_GPU
from webhook.admission.native.family import Family, Gap
from webhook.admission.policy.model import Policy
from webhook.admission.sharing.memshare import BackendSpec, spec_of
from webhook.admission.sharing.registry import backend_of

Shape = Literal["whole", "shared", "mig", "memory"] | None

# The most zeros of names judged by one prefix beside a GPU in one container whose lines the compiled rule puts in
# the webhook's order, by comparing them (maxima.in_order); more are outside the compiled set (BOTH_NAMES).
MOST_ZEROS = 3

BUILT_IN_REFUSAL = Gap(
    "fractional, negative or request != limit GPU quantities (e.g. nvidia.com/gpu: 500m)",
    "the API server's own validation refuses them before any ValidatingAdmissionPolicy runs (must be an integer, "
    "must be equal to the limit), with its own message; a MutatingAdmissionPolicy cannot deny",
)
NEAR_WHOLE = Gap(
    "a GPU quantity within a thousandth below a whole number that mutation does not convert, written otherwise "
    f"than the API server writes it (0.9999999, which it sends as 999999900n), or as {NVIDIA_GPU} under mode "
    "memory where its advice turns on what the policy does not know (ACK's past one GPU, where the GPU's memory "
    "is unknown) or is left to the webhook (below one GPU, beside the backend's own resources)",
    "the API server's own validation reads milli-units rounded up and takes it as whole, so no refusal of its own "
    "comes first; the webhook refuses it as fractional with its advice, the compiled line reads the canonical text "
    "(nanos or micros) and says advice that turns on the value only as MIG's (its 4 places) and ACK's (the GPUs "
    "and GiB it comes to) do: not compiled there (the native set lets it through, as the API server does)",
)
FRACTION_VARIABLES = Gap(
    f"fractional: shared ({NVIDIA_GPU} below 1 as one shared replica) with a memory variable whose value for the "
    "fraction the native set does not write",
    "not compiled; the native set leaves the fraction as written, and the API server refuses it as not an integer",
)
OTHER_RESOURCES = Gap(
    "a DeviceClass resource that is not a whole number or whose request differs from its limit, an Intel resource "
    "named as a replica (*.shared), and a nvidia.com/mig-* name the compiled pattern reads otherwise than the "
    "webhook",
    "validation refuses any DeviceClass quantity but a whole request = limit (a name the API server takes as "
    "written: it holds kubernetes.io/), and holds a *.shared name to the replicas' rules: not compiled (AMD's "
    "GPUs, the memory-sliced backends' resources, Intel's devices and amounts, the policy's own DeviceClass "
    "resources whole, and a whole DeviceClass resource of no GPU are)",
)
SAME_GPUS = Gap(
    "the same whole GPUs asked by two names in one pod (nvidia.com/gpu where it is whole GPUs, a GPU DeviceClass's "
    "resource: deviceclass.resource.kubernetes.io/gpu.nvidia.com) with an amount among them that is not a whole "
    "number",
    "validation sums them across names against the maxima (both names ask for the same GPUs), a fraction among "
    "them; the compiled lines sum whole numbers of devices: not compiled there",
)
PREFIXED_LIMITS = Gap(
    "a resource judged by prefix (a MIG profile, Intel's, a DeviceClass's) asked in requests only whose name holds "
    "a space or a comma",
    "the compiled limits from requests carry each such name as text, split at those characters, so its limit is "
    "not copied; the API server refuses the name either way, with its own message (no name it accepts holds one)",
)
BOTH_NAMES = Gap(
    "two GPU resources in one container that each say a line of their own, but counts judged by name, another "
    "pool's resources, values within a thousandth below a whole number of names judged by name, and up to "
    f"{MOST_ZEROS} judged by each prefix (one of a DeviceClass's), beside none judged by name of the same prefix: "
    f"more than {MOST_ZEROS} MIG names or Intel's devices judged by prefix, say; or more than "
    f"{MOST_ZEROS} zeros of names judged by one prefix (MIG slices, Intel's GPUs) beside a GPU",
    "the webhook says a container's lines resource by resource, by name, the compiled "
    "policies rule by rule (by name a near-whole value's line, another pool's line and the maxima, "
    f"each prefix's at its place, up to {MOST_ZEROS} of its names found among the container's limits put in "
    "order); "
    "and a CEL map's keys come in no order: the compiled rule puts the zeros' lines in the order of their names, "
    f"a list written in order for the names judged by name, and up to {MOST_ZEROS} of one prefix by comparing "
    "them; more would need a list sorted (Kubernetes 1.34's CEL) or a third iteration",
)
MEMORY_COUNTS = Gap(
    "a memory backend's count of vGPUs or GPUs, or ACK's GiB, in one container past what the compiled integers "
    "hold (millions: memshares.most_count, by the GPU's memory)",
    "the compiled lines weigh GPUs' worth of memory in CEL integers, units of 1/D of a GPU summed over a pod of "
    "as many containers as the API server's 3 MiB request holds, which such a count could overflow: judged by "
    "the webhook alone",
)
HUGE_COUNTS = Gap(
    "a GPU resource quantity of a trillion or more",
    "the API server holds a quantity of more than 18 digits (or a large binary one, such as 1Pi) as an "
    "arbitrary-precision decimal, whose CEL isInteger() is false even when whole, and the compiled pod totals "
    "sum counts in int64, which a pod of such counts could pass (an error, not the webhook's line): judged by the "
    "webhook alone",
)
ACK_PODS = Gap(
    "under ACK GPU sharing: the pod label aliyun.com/gpu-count, or aliyun.com/gpu-count among a container's "
    "limits, on a pod that holds no GPU resource (judged for a device path or variable alone); a label value the "
    "API server refuses; several containers' memory on a GPU of less than 1 GiB",
    "the compiled lines read the pod's resources, not its device paths; the API server refuses such a label after "
    "the webhook's line; the engine divides by the GPU's whole GiB: judged by the webhook alone",
)
EPHEMERAL = Gap("ephemeral containers (kubectl debug)", "judged by the webhook on the subresource only")
USER_VALUES = Gap(
    "a container's own memory variable whose value is not a plain decimal (ASCII digits, at most one point) with "
    "an exponent or none (`e` or `E`, a sign, one or two digits), of at most 12 characters, its mantissa's "
    "characters and its exponent's size at most 12 together, blanks around it (ASCII space, tab, line feed, form "
    "feed, carriage return) and a `+` before it allowed "
    "(CuPy's: a percent of one, or a whole byte count, no `-` in its exponent, where the GPU's memory is known; "
    "PyTorch's: its allocator config's fraction key's value)",
    "the webhook parses the value as free-form text (a decimal as Python's Fraction reads it: a/b, underscores, "
    "other whitespace, any script's digits, any exponent; CuPy's bytes as a decimal); CEL parses the plain "
    "decimal and its exponent only (ASCII digits and one point, as integers: a longer one or a larger exponent, or "
    "any under a share whose integers are past int64's reach, could overflow them); the native set keeps the "
    "container's value and adds each of its variables the container does not set",
)
USER_CONFIG = Gap(
    "a container's own PyTorch allocator config that is not plain (`key:value` items of letters, digits and `_`, "
    "values `.`, `+` and `-` too, or a bracketed list of sizes, or `>`, each with its count, joined by commas, ASCII "
    "spaces around them, a comma at the end: no other whitespace, other brackets, empty items), or a recorded "
    "fraction of its own",
    "the webhook parses the config's items as free-form text (each key stripped of any whitespace) and reads a "
    "recorded fraction as the container's share: not compiled",
)
ENGINES = Gap(
    "an inference engine's memory flag for a converted fraction whose argument is not the engine's text around "
    "the fraction's headroom value, or under memoryFraction one the compiled policies do not read back as a plain "
    "decimal (no engine's today)",
    "mutation writes the argument, and validation judges the flag against the recorded fraction and says the "
    "argument for it; the native set writes the headroom value in integer CEL and reads a plain decimal only: "
    "not compiled",
)
ENGINE_FLAGS = Gap(
    "an inference engine's memory flag in the container's own command line whose value is a number but not a plain "
    "decimal with a short exponent or none, as a memory variable's (at most 12 characters, blanks around it and a "
    "`+` before it allowed: a/b, other whitespace, more digits, a longer exponent)",
    "the webhook parses the value as Python's Fraction reads a decimal and judges it against the share; CEL parses "
    "the plain decimal and its exponent only, as a memory variable's (any, under a share whose integers are past "
    "int64's reach, or at a converted fraction whose argument the native set does not write): not compiled",
)
COMMAND_LINES = Gap(
    "a GPU container's command or args that is no list of strings, or an image that is no string",
    "the API server decodes none; the webhook reads such a container as no inference engine, the CEL cannot read it",
)
DEVICE_PATHS = Gap(
    "a device-list mount or a hostPath of the node's device nodes whose path the node resolves to another "
    "(`..`, `.`, repeated or trailing slashes, no leading slash)",
    "CEL cannot resolve a path: the native set reads each path as written, the webhook as the node resolves it",
)
STEERED_PRODUCT = Gap(
    "a steered pod's required node affinity In on nvidia.com/gpu.product where the pool's products both end with "
    "a tail and lack another (no sharing mode's today)",
    "not compiled: the compiled test reads the values joined, with one of the two",
)
STEERED_LABELS = Gap(
    "a steered pod's required node affinity term with several expressions of its own on a label where the policy "
    "admits values it does not name (NotIn: whole GPUs' sharing strategy; Exists: MIG single's slices where no "
    "profile is set), an In among them beside another In, a Gt, Lt or DoesNotExist, or beside NotIns that exclude "
    "other values when its values times theirs are more than 1024; or a NotIn beside a Gt or Lt; or a Gt or Lt "
    "bound that is an integer to Python but not plain ASCII digits of at most 18 (an underscore, a space, another "
    "script's digits)",
    "whether some node satisfies them all then turns on a value of the term's own that every other expression "
    "admits, one iteration deeper than the compiled policies go (the pod's terms, then a term's expressions; one "
    "In's values less its NotIns' are compared by sets.contains, whose cost is their product); CEL reads a bound "
    "as Go's ParseInt does: not compiled",
)
SPACED_PRODUCT = Gap(
    "a required node affinity value on the GPU product label that holds a space (no label value does)",
    "the compiled pin to a kept name, and steering's test of a term's products, read a term's values joined by spaces",
)
NUL_VALUES = Gap(
    "a steered pod's required node affinity value that holds a NUL character (which the API server accepts there)",
    "steering writes each term's values anew, joined and split at NUL (CEL cannot copy a list it read from the "
    "object into a JSON Patch value): such a value would come back as two",
)
BUDGETS = Gap("GPU budgets (cluster.quota)", "a count across the namespace's pods; a policy sees one object")
CLUSTER_CHECKS = Gap("cluster checks (fits, offered, drift) and auto values", "they need the node inventory")
DRA = Gap("DRA ResourceClaims", "the claims are other objects, which a policy on pods cannot read")
ANNOTATION = Gap(
    "the gpu-admission.io/policy annotation and the mutation warnings", "a policy cannot warn about a mutation"
)
CUSTOM_RESOURCES = Gap(
    "custom resources' pod templates (RayCluster, PyTorchJob, JobSet, ...)",
    "judged by the webhook only, at the places each kind names (docs/custom-resources.md); the pods their "
    "operators make are judged",
)
WORKLOAD_UPDATES = Gap(
    "workload updates (a Deployment's, Job's, ... or PodTemplate's pod template changed)",
    "the webhook tells the user's values from its own earlier output by the gpu-admission.io/requested record "
    "(JSON, which CEL cannot read) and leaves alone an update that keeps the template: the native set judges "
    "templates on CREATE, and the pods they make; it writes no record, so a re-apply of a template it changed "
    "is judged as written (docs/native-policies.md, Both; render with --beside-webhook there)",
)
RECORDED = Gap(
    "a workload created with the gpu-admission.io/requested record (copied from a live object)",
    "the webhook works out the user's input from the record; the native set takes the template as written",
)

# Said once for every policy: rules no native policy carries.
EVERY_POLICY = (CUSTOM_RESOURCES, WORKLOAD_UPDATES, RECORDED, BUDGETS, CLUSTER_CHECKS, DRA, ANNOTATION)


def shape(policy: Policy) -> Shape:
    """Which of the policy's GPU rules the native set carries (None: the limits copied from requests only): its
    sharing backend's answer."""
    found = backend_of(policy).native_shape(policy)
    shapes: dict[str | None, Shape] = {"whole": "whole", "shared": "shared", "mig": "mig", "memory": "memory"}
    return shapes.get(found)


def compiled_spec(policy: Policy) -> BackendSpec | None:
    """The policy's memory backend where the native set carries it, else None."""
    return spec_of(policy) if shape(policy) == "memory" else None


def product_judged(policy: Policy) -> bool:
    """Whether the compiled policies tell a term's `In` on the product label that names no product of the pool
    (native/nodes.py: the backend's ProductFit as a test on the values joined, a tail they must end with, or tails
    and parts they must not have, not both)."""
    fit = backend_of(policy).product_fit(policy)
    return not (fit.ends and (fit.not_ends or fit.not_holds))


def mode_gap(policy: Policy) -> Gap:
    """Where `shape` is None: what the policy's mode keeps out of the native set, and why (its backend's words)."""
    return Gap(*backend_of(policy).native_gap())


class Unsupported(Family):
    """The policy's rules that no family compiles."""

    name = "not compiled"

    def gaps(self, policy: Policy) -> list[Gap]:
        found = [BUILT_IN_REFUSAL, NEAR_WHOLE, HUGE_COUNTS, PREFIXED_LIMITS, OTHER_RESOURCES, SAME_GPUS, BOTH_NAMES]
        found.append(EPHEMERAL)
        found.append(DEVICE_PATHS)
        if shape(policy) is None:
            found.append(mode_gap(policy))
        if shape(policy) == "shared":
            found += [USER_VALUES, USER_CONFIG, ENGINE_FLAGS, COMMAND_LINES, SPACED_PRODUCT]
        if policy.steering:
            found += [STEERED_LABELS, NUL_VALUES]  # the rest of steering: native/nodes.py
            if not product_judged(policy):
                found.append(STEERED_PRODUCT)
            if shape(policy) != "shared":
                found.append(SPACED_PRODUCT)  # read joined, as the pin to a kept name reads them
        return found
