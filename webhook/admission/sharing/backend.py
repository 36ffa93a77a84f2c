"""`SharingBackend`: what one sharing mode knows, asked by the phases instead of a branch on the mode.

Shaped after HAMi's pkg/device (one `Devices` interface that each vendor's package implements; its webhook
only loops over the registered devices) and the scheduler framework's plugins (one small interface per
extension point, a registry that picks). A backend is stateless: every method takes the policy, whose
`sharing` section holds the mode's settings, and returns plain data (names, lines, label requirements as
`(key, operator, values)`), so that the phases above (mutate, validate, steering), DRA and the cluster checks
build their own objects from it. Each group of methods is one question a phase asks:

- what the pool serves: `serves`, `holds`, `steered_resource`, `shared_resource`, `replica_resource`,
  `mapping_target`, `pool_words`, `offer`, `short_offer`;
- how much one container may hold: `max_per_container` (the one home of the per-container defaults), `share`,
  `shared_fraction`;
- converting a request (mutate): `converts_itself`, `convert`, `maps_to_shared`, `single_slice`, `kept_name_words`,
  `pod_gpus`;
- its container and pod rules (validate): `rules`, `many_replicas`, `fraction_advice`, `served_profile`;
- its node requirements (steering): `node_requirements`, `whole_requirements`, `multi_requirements`,
  `product_rule`, `product_fit`, `steering_advice`, `drops_single_strategy`;
- its drift against a node and its nodes' pool: `node_pool`, `node_drift`, `layout_drift`, `pool_drift`,
  `gpu_config_strategy`, `config_mismatch`;
- its fit on a node: `not_offered`;
- env and engine hints: `env_hints`, `frameworks_skipped`, `judges_variable`, `engine_flags`;
- lines for people: `describe`, `explain_mode`, `explain_share`;
- its GPU budget weights (docs/budgets.md), in GPU-equivalents: `unit_weight`, `share_weight`, `weight_units`,
  `device_profile`, `amount_words`, `quota_entry`, `not_per_unit`, `kept_name_units`.

A new per-mode rule is one more method here, with a default where most modes have nothing to say, and one
override in each backend that has.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal

from webhook.admission.base.resources import NVIDIA_GPU, GPUModel, is_shared
from webhook.admission.cluster.nodes import STRATEGY_LABEL
from webhook.admission.policy.model import DEFAULT_MAX_PER_CONTAINER

if TYPE_CHECKING:
    from webhook.admission.cluster.nodes import NodeInfo
    from webhook.admission.policy.model import Policy, Sharing

# What `SharingBackend.max_per_container` counts: shared replicas (whole GPUs where none are shared), MIG slices,
# whole devices.
DeviceKind = Literal["replica", "mig-slice", "whole"]
# A node label requirement: (key, operator, values), as a nodeSelectorTerm's matchExpressions write it.
LabelRequirement = tuple[str, str, tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class ProductFit:
    """Which values of GPU feature discovery's product label a policy's nodes carry, as tests on its text (the
    native policies write the same tests in CEL): it ends with `ends`, with none of `not_ends`, and holds none
    of `not_holds`."""

    ends: str = ""
    not_ends: tuple[str, ...] = ()
    not_holds: tuple[str, ...] = ()

    def fits(self, product: str) -> bool:
        return (
            product.endswith(self.ends)
            and not any(product.endswith(tail) for tail in self.not_ends)
            and not any(part in product for part in self.not_holds)
        )


# (field, nodes_say, policy_says, effect, fix): one disagreement between a policy and one node.
NodeDrift = tuple[str, str, str, str, str]
ONE_GPU: tuple[int, tuple[tuple[str, str], ...]] = (1, ())
# A GPU held alone weighs one GPU-equivalent, the budget's unit, whichever mode or route hands it out.
WHOLE_GPU = Fraction(1)
# Said of every native quota entry: the API server cannot count DRA's routes in it.
DRA_APART = "; DRA claims and deviceclass resources are the webhook's budget alone"


@dataclass(frozen=True, slots=True)
class QuotaEntry:
    """The one resource a native ResourceQuota can hold a namespace's whole GPU budget in, or why none can."""

    resource: str | None  # "nvidia.com/gpu.shared"; None: no one resource carries the budget
    per_gpu: Fraction  # how much of the resource one GPU is
    note: str


@dataclass(frozen=True, slots=True)
class ModeRules:
    """What validation reads of the mode (validate.Rules takes these whole)."""

    exclusive: bool = False  # whole GPUs only
    mig_model: GPUModel | None = None  # the MIG model whose profiles are judged
    offered: tuple[str, ...] | None = None  # the MIG profiles the nodes offer (None: every one)
    one_shared_replica: bool = False  # one replica per container unless the policy says more
    one_mig_slice: bool = False  # one MIG slice per container unless the policy says more
    mig_single_resource: str | None = None  # `nvidia.com/gpu` where it is a MIG slice (migStrategy single)
    any_mig_profile: bool = False  # any MIG profile is this pool's (an unknown model, none listed)
    unshared_classes: bool = False  # NVIDIA's whole-GPU DeviceClasses are another pool
    counts_memory: bool = False  # the maxima count GPUs' worth of memory, not devices (memory slices)
    pod_spread: bool = False  # a pod's memory spreads over the GPUs its label names (ACK), with rules of its own


class SharingBackend(ABC):
    """One sharing mode. Subclasses override what their mode has; the defaults are a mode that has nothing to
    say on that point."""

    name: str  # the mode's name, as `sharing.mode` writes it
    hands_out: DeviceKind = "replica"  # what a mapped `nvidia.com/gpu: N` counts as (MIG: slices)

    # --- What it serves --------------------------------------------------------------------------------

    @abstractmethod
    def serves(self, policy: Policy, mig_model: GPUModel | None) -> frozenset[str]:
        """The NVIDIA resources the namespace's pool hands out; anything else of NVIDIA's is another pool."""

    def holds(self, policy: Policy) -> Callable[[str], bool]:
        """Whether a node resource is one the policy's GPU pods hold after mutation."""
        return NVIDIA_GPU.__eq__

    def steered_resource(self, policy: Policy) -> str:
        """The resource whose holders steering keeps on the policy's nodes."""
        return NVIDIA_GPU

    def shared_resource(self, sharing: Sharing) -> str | None:
        """The resource that is one time-slicing or MPS replica (`nvidia.com/gpu.shared`, or `nvidia.com/gpu`
        where the device plugin keeps the name); None where GPUs are not shared so."""
        return None

    def replica_resource(self, sharing: Sharing) -> str | None:
        """The resource that is one shared replica or one MIG slice here and is not named so (`*.shared`,
        `nvidia.com/mig-*`): `nvidia.com/gpu` where the device plugin keeps the name; None elsewhere."""
        return None

    def mapping_target(self, sharing: Sharing) -> str | None:
        """What `nvidia.com/gpu: N` is renamed to where the name is not kept; None: nothing is renamed."""
        return None

    @abstractmethod
    def pool_words(self, policy: Policy, served: frozenset[str]) -> tuple[str, str, str]:
        """What the pool is, what to request instead of another pool's resource, and that in short."""

    def offer(self, policy: Policy) -> str:
        """What the namespace gives instead of a fraction, as advice."""
        where = f'policy "{policy.name}"'
        return f"request a whole number of GPUs ({where} gives whole GPUs only; ask for a namespace with sharing)"

    def short_offer(self, policy: Policy) -> str:
        """`offer` in a few words."""
        return "ask for whole GPUs (none are shared here)"

    # --- How much one container may hold ----------------------------------------------------------------

    def max_per_container(self, policy: Policy, device: DeviceKind | None = None) -> int:
        """The most devices of one kind a container may hold (None: what this mode hands out, `hands_out`, what a
        mapped `nvidia.com/gpu: N` is held to and `policy explain` shows): `maxPerContainer`, else the mode's
        default for that kind (`default_per_container`). The one home of that rule."""
        explicit = policy.limits.max_per_container
        if explicit is not None:
            return explicit
        return self.default_per_container(device or self.hands_out)

    def default_per_container(self, device: DeviceKind) -> int:
        """The most devices of one kind a container may hold where the policy sets no `maxPerContainer`."""
        return DEFAULT_MAX_PER_CONTAINER

    def share(self, policy: Policy) -> Fraction | None:
        """One replica's share of a GPU (1/replicas): the most memory a shared container may be told it has,
        since the scheduler packs `replicas` of them onto one GPU; None where GPUs are not shared so."""
        return None

    def shared_fraction(self, policy: Policy) -> Fraction | None:
        """The memory fraction a shared container may use: `memoryFraction`, else one replica's `share`."""
        return policy.memory_fraction if policy.memory_fraction is not None else self.share(policy)

    # --- Converting a request (mutate) -----------------------------------------------------------------

    def converts_itself(self, policy: Policy) -> bool:
        """Whether the backend converts `nvidia.com/gpu` itself (`convert`), not the generic mapping."""
        return False

    def convert(
        self,
        requests: dict[str, Any],
        limits: dict[str, Any],
        gpu: tuple[str, int | Fraction],
        policy: Policy,
        maximum: int,
        kinds: list[str],
        texts: list[str],
    ) -> None:
        """The conversion of a backend that `converts_itself`."""
        raise NotImplementedError(f"{self.name} converts through the generic mapping")

    def maps_to_shared(self, policy: Policy) -> bool:
        """Whether `nvidia.com/gpu: N` mapped here becomes a shared replica (its env and engine hints follow)."""
        return False

    def single_slice(self, policy: Policy) -> str | None:
        """The MIG profile one `nvidia.com/gpu` is where the nodes offer one profile under that name (the
        device plugin's migStrategy single; "" where the policy names none); None elsewhere."""
        return None

    def kept_name_words(self, policy: Policy) -> str:
        """What one `nvidia.com/gpu` is where a fraction became `nvidia.com/gpu: 1`."""
        return f"{policy.sharing.mode} replica"

    def pod_gpus(
        self, obj: dict[str, Any], spec_path: tuple[str, ...], policy: Policy
    ) -> tuple[int, tuple[tuple[str, str], ...]]:
        """The GPUs the pod's share spreads over, and the problems with saying so, each (line, short): one GPU
        and none where the mode spreads nothing."""
        return ONE_GPU

    # --- Container and pod rules (validate) ------------------------------------------------------------

    def rules(self, policy: Policy) -> ModeRules:
        return ModeRules()

    def many_replicas(self, policy: Policy, n: int | Fraction | str) -> str:
        """What becomes of a request for `n` > 1 replicas (only modes that hand out replicas are asked); `n` may be
        text (the native policies fill it in CEL)."""
        return ""

    def fraction_advice(
        self, shown: str, value: int | Fraction, policy: Policy, written: str
    ) -> tuple[str, str] | None:
        """The line and short form for a fraction mutation could not convert; None: the generic advice."""
        return None

    def served_profile(
        self, name: str, shown: str, profile: str, policy: Policy, rules: ModeRules
    ) -> tuple[str, str] | bool | None:
        """A MIG resource asked for in this pool: (line, short form after the name) when it is not served, True
        when it is served whatever `serves` says, None to judge it by `serves`."""
        return None

    # --- Node requirements (steering) ------------------------------------------------------------------

    def node_requirements(self, policy: Policy) -> tuple[LabelRequirement, ...]:
        """The labels every GPU pod of the namespace needs of its node."""
        return ()

    def whole_requirements(self, policy: Policy) -> tuple[LabelRequirement, ...]:
        """Those of pods that hold whole GPUs and no share (a pool that serves only one of them)."""
        return ()

    def multi_requirements(self, policy: Policy) -> tuple[LabelRequirement, ...]:
        """Those of a share spread over several GPUs."""
        return ()

    def product_rule(self, policy: Policy, product_label: str) -> str | None:
        """What GPU feature discovery's product label says on the policy's nodes; None: nothing."""
        return None

    def product_fit(self, policy: Policy) -> ProductFit:
        """The product label's values on the policy's nodes (any, unless the backend says)."""
        return ProductFit()

    def product_fits(self, policy: Policy, product: str) -> bool:
        return self.product_fit(policy).fits(product)

    def steering_advice(self) -> str:
        """What to do with a user's node constraint that contradicts the policy's pool."""
        return "remove it, or make it select the policy's pool"

    def drops_single_strategy(self) -> bool:
        """Whether steering takes `nvidia.com/mig.strategy notin (single)` out of the user's terms."""
        return False

    # --- Drift against a node, and the nodes' pool -----------------------------------------------------

    def node_pool(self, policy: Policy, nodes: Sequence[NodeInfo]) -> tuple[NodeInfo, ...]:
        """The nodes the policy was probably written for where none is reached: compared all the same."""
        return ()

    def node_drift(self, policy: Policy, node: NodeInfo) -> list[NodeDrift]:
        """The mode's disagreements with one of its nodes on how it shares (strategy, replicas): said before
        the GPU's model and memory."""
        return []

    def layout_drift(self, policy: Policy, node: NodeInfo) -> list[NodeDrift]:
        """Those on what the node is cut into (a MIG layout, a memory backend's labels): said after them."""
        return []

    def pool_drift(self, policy: Policy, nodes: Sequence[NodeInfo]) -> list[tuple[NodeInfo, NodeDrift]]:
        """Disagreements that only the nodes together show."""
        return []

    def gpu_config_strategy(self) -> str | None:
        """The strategy of NVIDIA's GpuConfig that shares GPUs this way (DRA), or None."""
        return None

    def config_mismatch(self, policy: Policy) -> tuple[str, str]:
        """Why a GpuConfig's other strategy is not this namespace's, and what to do."""
        return f'policy "{policy.name}" gives this namespace whole GPUs (mode exclusive)', "remove sharing"

    # --- Fit on a node ---------------------------------------------------------------------------------

    def not_offered(self, policy: Policy, resource: str) -> tuple[str, str, str] | None:
        """Why a resource no node advertises is the policy's (why, fix, short fix); None: not its own."""
        return None

    # --- Env and engine hints --------------------------------------------------------------------------

    def env_hints(self, policy: Policy, fraction: Fraction, memory: int | None) -> tuple[tuple[str, str, str], ...]:
        """The mode's own variables for a share: (group, name, value)."""
        return ()

    def frameworks_skipped(self) -> frozenset[str]:
        """Framework hints that do not apply in this mode."""
        return frozenset()

    def judges_variable(self, name: str) -> bool:
        """Whether a user's memory variable `name` can take more than the share here."""
        return True

    def engine_flags(self) -> frozenset[str]:
        """The inference engines whose memory flag is added and judged in this mode."""
        return frozenset()

    # --- The API server's own admission policies (webhook/admission/native/, docs/native-policies.md) -----

    def native_shape(self, policy: Policy) -> str | None:
        """Which compiled rule set carries this mode's GPU rules in the native policies: "whole" (whole GPUs),
        "shared" (replicas as nvidia.com/gpu.shared), "mig" (MIG slices: native/migslices.py), "memory" (a memory
        backend's shares: native/memshares.py), or None (only the limits copied from requests)."""
        return None

    def native_gap(self) -> tuple[str, str]:
        """Where `native_shape` is None: the rule the native policies do not carry, and why."""
        return (f"mode {self.name}", "not compiled yet")

    # --- For people ------------------------------------------------------------------------------------

    @abstractmethod
    def describe(self, policy: Policy) -> str:
        """The policy's pool in a few words, for lines that name it."""

    @abstractmethod
    def explain_mode(self, policy: Policy) -> str:
        """The mode's settings in one phrase (`policy explain`, `policy lint`)."""

    def explain_share(self, policy: Policy) -> str:
        """What one container may get here (`policy explain`)."""
        return "whole GPUs only"

    # --- Its GPU budget weights (docs/budgets.md) ----------------------------------------------------------

    def unit_weight(self, policy: Policy, resource: str) -> Fraction | None:
        """What one unit of `resource` weighs in GPU-equivalents under this mode, where it weighs alone; None:
        no GPU, or an amount weighed with the container's others (`share_weight`). MIG profile resources and
        DeviceClasses weigh the same in every mode (mig.slice_weight, DRA): they are not asked here. The
        default: `nvidia.com/gpu` a whole GPU, another NVIDIA `.shared` resource a replica of a sharing this
        pool does not have (as much as a GPU, the most it can be)."""
        if resource == NVIDIA_GPU or (is_shared(resource) and resource.startswith("nvidia.com/")):
            return WHOLE_GPU
        return None

    def share_weight(self, policy: Policy, amounts: dict[str, Fraction]) -> tuple[Fraction, frozenset[str]]:
        """What a container's amounts that weigh only together weigh (a memory share: its memory, cores and
        vGPUs), and which of `amounts` those are; (0, none) where every resource weighs alone."""
        return Fraction(0), frozenset()

    def weight_units(self, policy: Policy) -> list[tuple[str, Fraction, str]]:
        """What one of each resource this mode serves weighs: (resource, weight, what it is), for `policy
        explain` and the schedulers' configurations (DRA's DeviceClasses are added by the budget)."""
        return [(NVIDIA_GPU, WHOLE_GPU, "a whole GPU")]

    def device_profile(self, policy: Policy) -> str | None:
        """The MIG profile a DRA MIG device is taken to be where its claim's selector names none; None: the
        device weighs a whole GPU."""
        return None

    def amount_words(self, policy: Policy, resource: str, count: str, amount: Fraction) -> str | None:
        """A container's amount of one of this mode's resources for people (`2 replicas of 4`); None: the
        generic words. `count` is `amount` as format_gpus writes it."""
        return None

    def quota_entry(self, policy: Policy) -> QuotaEntry:
        """The native ResourceQuota entry that can hold the namespace's budget (`policy render --native`)."""
        return QuotaEntry(
            None, Fraction(0), "whole GPUs: the admin's own requests.nvidia.com/gpu is the budget" + DRA_APART
        )

    def not_per_unit(self, policy: Policy) -> dict[str, str]:
        """The served resources whose weight is not per unit (a linear transformation cannot count them), with
        why."""
        return {}

    def kept_name_units(self, policy: Policy) -> str:
        """What the API server counts as `nvidia.com/gpu` where the device plugin keeps the name for a share."""
        return "GPUs"


def strategy_drift(policy: Policy, node: NodeInfo, expected: str) -> list[NodeDrift]:
    """The node's sharing strategy label against the one the mode expects (older device plugins set none:
    never drift)."""
    strategy = node.labels.get(STRATEGY_LABEL)
    if strategy is None or strategy == expected:
        return []
    return [
        (
            "sharing.mode",
            f"sharing-strategy {strategy}",
            str(policy.sharing.mode),
            "the environment the webhook sets is for another sharing mode",
            f"set sharing.mode: {'exclusive' if strategy == 'none' else strategy}, or change the device "
            "plugin's sharing config",
        )
    ]
