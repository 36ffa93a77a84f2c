"""The MIG tables and the device plugin's resource naming (sources: see webhook/admission/base/resources.py)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from webhook.admission.base.resources import (
    GPU_MODELS,
    is_managed,
    is_mig_profile_name,
    is_shared,
    mig_profile_of,
    mig_resource,
    smallest_profile_for,
)

REQUIRED_MODELS = (
    "A30-24GB",
    "A100-40GB",
    "A100-80GB",
    "H100-80GB",
    "H100-NVL-94GB",
    "H200-141GB",
    "GH200-96GB",
    "B200-180GB",
)


def test_every_model_the_issue_names_is_in_the_tables() -> None:
    assert set(REQUIRED_MODELS) <= set(GPU_MODELS)


@pytest.mark.parametrize(
    ("model", "profiles"),
    [
        # NVIDIA's MIG user guide, "Supported MIG Profiles", and mig-parted's config-default.yaml.
        ("A30-24GB", "1g.6gb 1g.6gb+me 2g.12gb 2g.12gb+me 4g.24gb"),
        ("A100-40GB", "1g.5gb 1g.5gb+me 1g.10gb 2g.10gb 3g.20gb 4g.20gb 7g.40gb"),
        ("A100-80GB", "1g.10gb 1g.10gb+me 1g.20gb 2g.20gb 3g.40gb 4g.40gb 7g.80gb"),
        ("H100-80GB", "1g.10gb 1g.10gb+me 1g.20gb 2g.20gb 3g.40gb 4g.40gb 7g.80gb"),
        ("H100-NVL-94GB", "1g.12gb 1g.12gb+me 1g.24gb 2g.24gb 3g.47gb 4g.47gb 7g.94gb"),
        ("H200-141GB", "1g.18gb 1g.18gb+me 1g.35gb 2g.35gb 3g.71gb 4g.71gb 7g.141gb"),
        ("GH200-96GB", "1g.12gb 1g.12gb+me 1g.24gb 2g.24gb 3g.48gb 4g.48gb 7g.96gb"),
        ("B200-180GB", "1g.23gb 1g.23gb+me 1g.45gb 2g.45gb 3g.90gb 4g.90gb 7g.180gb"),
    ],
)
def test_profile_tables_match_nvidia(model: str, profiles: str) -> None:
    assert GPU_MODELS[model].profile_names() == profiles.split()


@pytest.mark.parametrize("model", sorted(GPU_MODELS))
def test_every_profile_parses_and_is_consistent(model: str) -> None:
    gpu = GPU_MODELS[model]
    # NVML's figure where it is known to differ from the name (nvidia-smi's memory.total), else the name in GiB.
    assert gpu.memory_mib == {"H100-80GB": 81_559, "H200-141GB": 143_771}.get(model, gpu.memory_gb * 1024)
    assert gpu.memory_gb == int(model.rsplit("-", 1)[1].removesuffix("GB"))
    for profile in gpu.mig_profiles:
        assert is_mig_profile_name(profile.name), profile
        slices, memory = profile.name.removesuffix("+me").split(".")
        assert profile.compute_slices == int(slices.removesuffix("g"))
        assert profile.memory_gb == int(memory.removesuffix("gb"))
        assert 1 <= profile.compute_slices <= 7
        assert profile.memory_gb <= gpu.memory_gb
        assert profile.media_extensions == profile.name.endswith("+me")
        assert gpu.profile(profile.name) is profile
    # The largest profile is the whole GPU.
    assert max(p.memory_gb for p in gpu.mig_profiles) == gpu.memory_gb


@pytest.mark.parametrize("model", sorted(GPU_MODELS))
def test_resource_names_round_trip(model: str) -> None:
    for profile in GPU_MODELS[model].profile_names():
        resource = mig_resource(profile)
        assert "+" not in resource  # not a valid character in a Kubernetes resource name
        assert mig_profile_of(resource) == profile
        assert mig_profile_of(resource + ".shared") == profile
        assert is_managed(resource)


def test_media_extension_profiles_are_advertised_with_a_dot() -> None:
    # k8s-device-plugin, internal/rm/rm.go: strings.ReplaceAll("mig-"+profile, "+", ".")
    assert mig_resource("1g.10gb+me") == "nvidia.com/mig-1g.10gb.me"
    assert mig_profile_of("nvidia.com/mig-1g.10gb.me") == "1g.10gb+me"
    assert mig_resource("3g.40gb") == "nvidia.com/mig-3g.40gb"


@pytest.mark.parametrize(
    "resource", ["nvidia.com/gpu", "nvidia.com/mig-", "nvidia.com/mig-1g", "nvidia.com/mig-1g.10gb+me", "x/mig-1g.5gb"]
)
def test_what_is_not_a_mig_resource(resource: str) -> None:
    assert mig_profile_of(resource) is None


@pytest.mark.parametrize("name", ["1g.10gb", "7g.141gb", "2g.12gb+me"])
def test_well_formed_profile_names(name: str) -> None:
    assert is_mig_profile_name(name)


@pytest.mark.parametrize("name", ["1g10gb", "1g.10GB", "0g.10gb", "1g.10gb+", "1g.10gb.me", "mig-1g.10gb", ""])
def test_malformed_profile_names(name: str) -> None:
    assert not is_mig_profile_name(name)


@pytest.mark.parametrize(
    ("fraction", "expected"),
    [
        (Fraction(1, 4), "1g.20gb"),  # 20 GB: 1g.20gb and 2g.20gb fit; fewer slices wins
        (Fraction(1, 2), "3g.40gb"),  # 40 GB: 3g.40gb beats 4g.40gb
        (Fraction(1, 8), "1g.10gb"),  # never the +me twin, which holds the GPU's only decoders
        (Fraction(1, 100), "1g.10gb"),
        (Fraction(3, 4), "7g.80gb"),
        (Fraction(1), "7g.80gb"),
    ],
)
def test_smallest_profile_for_a100_80gb(fraction: Fraction, expected: str) -> None:
    profile = smallest_profile_for(GPU_MODELS["A100-80GB"], fraction)
    assert profile is not None and profile.name == expected


@pytest.mark.parametrize("model", sorted(GPU_MODELS))
def test_memory_shares_are_the_guides_slices_not_the_rounded_names(model: str) -> None:
    # NVIDIA's guide, "Fraction of Memory": eighths (quarters on the A30); the names' GB are rounded either way.
    eighths = [Fraction(n, 8) for n in (1, 1, 2, 2, 4, 4, 8)]  # 1g, 1g+me, 1g (double memory), 2g, 3g, 4g, 7g
    quarters = [Fraction(n, 4) for n in (1, 1, 2, 2, 4)]  # 1g, 1g+me, 2g, 2g+me, 4g
    expected = quarters if model == "A30-24GB" else eighths
    assert [p.memory_share for p in GPU_MODELS[model].mig_profiles] == expected


def test_a_quarter_of_an_h200_is_its_1g_35gb_slice_whose_name_rounds_down() -> None:
    # 141 GB / 4 = 35.25 GB > "35", but 1g.35gb is 2 of the 8 memory slices: exactly a quarter.
    profile = smallest_profile_for(GPU_MODELS["H200-141GB"], Fraction(1, 4))
    assert profile is not None and profile.name == "1g.35gb"
    profile = smallest_profile_for(GPU_MODELS["H200-141GB"], Fraction(1, 2))
    assert profile is not None and profile.name == "3g.71gb"


def test_smallest_profile_when_nothing_fits() -> None:
    assert smallest_profile_for(GPU_MODELS["A100-80GB"], Fraction(3, 2)) is None


@pytest.mark.parametrize(
    ("resource", "managed", "shared"),
    [
        ("nvidia.com/gpu", True, False),
        ("nvidia.com/gpu.shared", True, True),
        ("nvidia.com/mig-1g.10gb", True, False),
        ("nvidia.com/mig-1g.10gb.shared", True, True),
        ("amd.com/gpu", True, False),
        ("gpu.intel.com/i915", True, False),
        ("cpu", False, False),
        ("example.com/gpu", False, False),
    ],
)
def test_managed_and_shared_resources(resource: str, managed: bool, shared: bool) -> None:
    assert is_managed(resource) is managed
    if managed:
        assert is_shared(resource) is shared


def test_the_memos_judge_a_megabyte_name_every_time_and_do_not_hold_it() -> None:
    """The webhook sees objects before the API server validates them, so a resource or container "name" may be
    megabytes long: held by a memo of 4,096 keys, a stream of such reviews would hold gigabytes."""
    from webhook.admission.base.memo import MAX_KEY_LENGTH
    from webhook.admission.base.podspec import _LABELS, container_label

    huge = "x" * 1_000_000
    assert is_managed("nvidia.com/mig-" + huge) is True
    assert is_shared("nvidia.com/" + huge + ".shared") is True
    assert is_managed("example.com/" + huge) is False
    label = container_label("containers", 0, {"name": huge})
    assert label == f'container "{"x" * 60}..."'
    assert container_label("containers", 0, {"name": "train"}) == 'container "train"'  # a valid name is kept
    for memo in (is_managed.__self__, is_shared.__self__, *_LABELS.values()):  # type: ignore[attr-defined]
        assert max((len(key) for key in memo if isinstance(key, str)), default=0) <= MAX_KEY_LENGTH
    assert "train" in _LABELS["containers"]
