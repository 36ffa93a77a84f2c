"""Device selection past the device plugin, as validation judges it in an unprivileged container where the
policy blocks it (`blockVisibleDevicesOverride`, validate._visible_devices and _device_mounts): the container's
own NVIDIA_VISIBLE_DEVICES (but one read from a ConfigMap key under a scheduler the policy trusts), an envFrom
prefix that makes it of a key, and a mount of the container toolkit's device list or of a hostPath of the node's
GPU device nodes. The sentences are validation's templates, their varying parts its tables (VISIBLE_STATES,
VISIBLE_FIXES); the key an envFrom prefix reads is looked up among every prefix of NVIDIA_VISIBLE_DEVICES's.

A path is compared as written: CEL cannot resolve `..`, `.` and repeated slashes as the node does, so a path
whose resolved form reads otherwise is left to the webhook (scope.py, gaps.DEVICE_PATHS).
"""

from __future__ import annotations

from webhook.admission.base.podspec import DEVICE_LIST_ROOTS, DEVICE_NODES_DIR, DEVICE_NODES_PREFIX, VISIBLE_DEVICES
from webhook.admission.native.cel import all_of, any_of, bind, fill, lit, slot, strings
from webhook.admission.native.containers import SPEC, counted, has_map
from webhook.admission.native.family import ContainerRule, Family
from webhook.admission.native.gaps import shape
from webhook.admission.phases import validate
from webhook.admission.phases.validate import Rules
from webhook.admission.policy.model import Policy

UNPRIVILEGED = "!(has(c.securityContext) && has(c.securityContext.privileged) && c.securityContext.privileged)"
NAMED = f"has(e.name) && e.name == {lit(VISIBLE_DEVICES)}"
WRITTEN = f"has(c.env) && c.env.exists(e, {NAMED})"
FIRST = f"c.env.filter(e, {NAMED})[0]"
# Every prefix that makes NVIDIA_VISIBLE_DEVICES of a key (podspec.visible_devices_prefix), and the key.
PREFIXES = {VISIBLE_DEVICES[:n]: VISIBLE_DEVICES[n:] for n in range(1, len(VISIBLE_DEVICES) + 1)}
PREFIX_MAP = "{" + ", ".join(f"{lit(p)}: {lit(k)}" for p, k in PREFIXES.items()) + "}"
PREFIXED = f"has(s.prefix) && s.prefix != '' && {lit(VISIBLE_DEVICES)}.startsWith(s.prefix)"
LISTED = f"{strings(DEVICE_LIST_ROOTS)}.exists(r, m.mountPath.startsWith(r))"
# The pod's hostPath volumes of the node's GPU device nodes, their names and paths in one order, bound (`names`,
# `paths`) for a container that mounts volumes (a volume's name is unique in the pod): no expression iterates over
# the volumes inside the containers' mounts.
NODES_PATH = f"(v.hostPath.path == {lit(DEVICE_NODES_DIR)} || v.hostPath.path.startsWith({lit(DEVICE_NODES_PREFIX)}))"
NODES = f"(has({SPEC}.volumes) ? {SPEC}.volumes.filter(v, has(v.hostPath) && {NODES_PATH}) : [])"
VOLUME = "m.name in names"
HOST_PATH = "paths[names.indexOf(m.name)]"


def _with_nodes(expression: str) -> str:
    """`expression` with `names` and `paths` bound to the pod's device-node volumes."""
    return bind(f"{NODES}.map(v, v.name)", "names", bind(f"{NODES}.map(v, v.hostPath.path)", "paths", expression))


def device_nodes_path(path: str) -> bool:
    """What the compiled policies read as the node's GPU device nodes: the hostPath as written (NODES_PATH)."""
    return path == DEVICE_NODES_DIR or path.startswith(DEVICE_NODES_PREFIX)


def device_list_path(path: str) -> bool:
    """What the compiled policies read as a mount of the toolkit's device list: the mount path as written."""
    return path.startswith(DEVICE_LIST_ROOTS)


def _by_gpu(table: dict[bool, str]) -> str:
    """The table's text for the container: `g`, whether it holds a GPU, bound by `_held`."""
    return f"(g ? {lit(table[True])} : {lit(table[False])})"


def holds_gpu(rules: Rules) -> str:
    """CEL: `c` holds a GPU, as validation reads it (a count above 0: containers.counted, which the covered pods
    hold as limits; an amount of one GPU, or a DeviceClass of no GPU, is none)."""
    above = "quantity(c.resources.limits[n]).compareTo(quantity('0')) > 0"
    limits = has_map("limits")
    return f"{limits} && c.resources.limits.exists(n, {counted('n', rules.class_names)} && {above})"


def _held(sentence: str, rules: Rules) -> str:
    """`sentence` with `g` bound to whether the container holds a GPU (evaluated once)."""
    return bind(holds_gpu(rules), "g", sentence)


class DeviceRules(Family):
    name = "device rules"

    def container_rules(self, policy: Policy) -> list[ContainerRule]:
        rules = Rules.of(policy)
        if not rules.block_visible_devices or shape(policy) is None:
            return []  # a mode the native set does not carry: whether a container holds a GPU is its backend's
        states = {held: validate.VISIBLE_STATES[held][0] for held in (True, False)}
        whys = {held: validate.VISIBLE_STATES[held][1] for held in (True, False)}
        fixes = {held: validate.VISIBLE_FIXES[held][0] for held in (True, False)}
        prefix_fixes = {held: validate.VISIBLE_FIXES[held][1] for held in (True, False)}
        from_map = "has(e.valueFrom) && has(e.valueFrom.configMapKeyRef)"
        trusted = (
            f"has({SPEC}.schedulerName) && {SPEC}.schedulerName in {strings(rules.trusted_schedulers)}"
            if rules.trusted_schedulers
            else "false"
        )
        scheduler = fill(validate.scheduler_named(slot("name")), {"name": f"{SPEC}.schedulerName"})
        named = f"(has({SPEC}.schedulerName) ? {scheduler} : {lit(validate.scheduler_named(None))})"
        trust = fill(validate.trust_fix(slot("named")), {"named": named})
        fix = f"{_by_gpu(fixes)} + ([{FIRST}].exists(e, {from_map}) ? {trust} : '')"
        written = ContainerRule(
            all_of([WRITTEN, UNPRIVILEGED, f"![{FIRST}].exists(e, ({from_map}) && ({trusted}))"]),
            _held(
                fill(
                    validate.visible_devices_line(slot("state"), slot("why"), policy.name, slot("fix")),
                    {"state": _by_gpu(states), "why": _by_gpu(whys), "fix": fix},
                ),
                rules,
            ),
        )
        prefix = f"c.envFrom.filter(s, {PREFIXED})[0].prefix"
        prefixed = ContainerRule(
            all_of([f"has(c.envFrom) && c.envFrom.exists(s, {PREFIXED})", UNPRIVILEGED, f"!({WRITTEN})"]),
            _held(
                fill(
                    validate.visible_prefix_line(
                        slot("prefix"), slot("key"), slot("state"), slot("why"), policy.name, slot("fix")
                    ),
                    {
                        "prefix": prefix,
                        "key": f"{PREFIX_MAP}[{prefix}]",
                        "state": _by_gpu(states),
                        "why": _by_gpu(whys),
                        "fix": _by_gpu(prefix_fixes),
                    },
                ),
                rules,
            ),
        )
        listed = fill(
            validate.device_list_line(slot("volume"), slot("path"), policy.name),
            {"volume": "m.name", "path": "m.mountPath"},
        )
        nodes = fill(
            validate.device_nodes_line(slot("path"), slot("volume"), policy.name),
            {"volume": "m.name", "path": HOST_PATH},
        )
        mounted = any_of([LISTED, VOLUME])
        mounts_one = bind(f"{NODES}.map(v, v.name)", "names", f"c.volumeMounts.exists(m, {mounted})")
        mounts = ContainerRule(
            all_of([f"has(c.volumeMounts) && {mounts_one}", UNPRIVILEGED]),
            _with_nodes(f"c.volumeMounts.filter(m, {mounted}).map(m, ({LISTED}) ? {listed} : {nodes})"),
            many=True,
        )
        return [written, prefixed, mounts]
