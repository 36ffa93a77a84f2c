"""The admission engine, rule by rule: each case states the object sent, the policy, and the exact result.

`run` (engine_support) also checks on every case that the patch applies with the API server's semantics to
give the mutated object, that the input is untouched, and that a second pass changes nothing.
"""

import json
from typing import Any

import pytest

from tests.engine_support import (
    EXCLUSIVE,
    GPU,
    MIG,
    MIG_FRACTIONAL,
    MPS,
    NS,
    TIME_SLICING,
    TIME_SLICING_FRACTIONAL,
    Enforcement,
    Fraction,
    Fractional,
    Limits,
    Mode,
    Sharing,
    container,
    env_of,
    pod,
    policy,
    run,
)

ANNOTATION = {"gpu-admission.io/policy": "team"}


def annotated(obj: dict) -> dict:
    obj["metadata"]["annotations"] = dict(ANNOTATION)
    return obj


# --- requests into limits -----------------------------------------------------------------------------


def test_requests_only_gets_the_limit():
    decision = run(pod(container(requests={"nvidia.com/gpu": "1", "cpu": "2"})))
    assert decision.verdict == "allow"
    assert decision.mutated == annotated(
        pod(container(requests={"nvidia.com/gpu": "1", "cpu": "2"}, limits={"nvidia.com/gpu": "1"}))
    )
    assert decision.patch == [
        {"op": "add", "path": "/metadata/annotations", "value": ANNOTATION},
        {
            "op": "replace",
            "path": "/spec/containers/0/resources",
            "value": {"requests": {"nvidia.com/gpu": "1", "cpu": "2"}, "limits": {"nvidia.com/gpu": "1"}},
        },
    ]
    assert decision.warnings == [
        'gpu-admission: container "app": set limits nvidia.com/gpu from requests (GPUs need request = limit)'
    ]
    assert decision.mutation_kinds == ["requests-into-limits"]


def test_limit_added_into_existing_limits_map_keeps_its_entries():
    decision = run(pod(container(requests={"nvidia.com/gpu": 2}, limits={"cpu": "1"})))
    resources = {"requests": {"nvidia.com/gpu": 2}, "limits": {"cpu": "1", "nvidia.com/gpu": 2}}
    assert {"op": "replace", "path": "/spec/containers/0/resources", "value": resources} in decision.patch
    assert decision.mutated["spec"]["containers"][0]["resources"] == resources


def test_the_patch_sets_resources_whole_and_appends_env_entries():
    """One operation for `resources`, with its value after mutation; `env` gets the entries mutation adds, one
    `add` each at its end, so that the user's entries (literal values, secrets among them) are never in the
    patch, which the API server may keep in audit logs. An `env` that is absent or null is added whole: it
    holds the webhook's entries alone."""
    body = {"name": "app", "image": "x", "resources": {"requests": {"nvidia.com/gpu": "1"}, "claims": [{"name": "c"}]}}
    for env in ({}, {"env": None}, {"env": [{"name": "A", "value": "s3cret"}]}):
        decision = run(pod({**body, **env}), TIME_SLICING)
        mutated = decision.mutated["spec"]["containers"][0]
        users = env.get("env") or []
        env_ops = [{"op": "add", "path": "/spec/containers/0/env/-", "value": e} for e in mutated["env"][len(users) :]]
        if not users:
            env_ops = [{"op": "add", "path": "/spec/containers/0/env", "value": mutated["env"]}]
        assert decision.patch[1:] == [
            {"op": "replace", "path": "/spec/containers/0/resources", "value": mutated["resources"]},
            *env_ops,
        ]
        assert "s3cret" not in json.dumps(decision.patch)
        assert mutated["resources"]["claims"] == [{"name": "c"}]
        assert mutated["env"][: len(users)] == users
    # Already mapped: only the env hints are missing, so only `env` is in the patch.
    decision = run(pod(container(limits={"nvidia.com/gpu.shared": "1"})), TIME_SLICING)
    assert [op["path"] for op in decision.patch] == ["/metadata/annotations", "/spec/containers/0/env"]


def test_null_limits_map_is_replaced_by_a_map():
    decision = run(pod(container(requests={"amd.com/gpu": "1"}, limits=None)))
    decision = run(pod({"name": "app", "resources": {"requests": {"amd.com/gpu": "1"}, "limits": None}}))
    assert decision.mutated["spec"]["containers"][0]["resources"]["limits"] == {"amd.com/gpu": "1"}


@pytest.mark.parametrize("resource", ["amd.com/gpu", "gpu.intel.com/i915", "nvidia.com/mig-1g.10gb"])
def test_every_managed_resource_gets_its_limit(resource):
    decision = run(pod(container(requests={resource: "1"})))
    assert decision.mutated["spec"]["containers"][0]["resources"]["limits"] == {resource: "1"}


def test_limits_only_is_left_alone():
    decision = run(pod(container(limits={"nvidia.com/gpu": "1"})))
    assert (decision.verdict, decision.patch, decision.warnings) == ("allow", [], [])


@pytest.mark.parametrize("value", ["1000m", "1e0", "1.0", "1", 1])
def test_whole_values_in_any_spelling_are_allowed_as_written(value):
    decision = run(pod(container(requests={"nvidia.com/gpu": value}, limits={"nvidia.com/gpu": value})))
    assert (decision.verdict, decision.patch) == ("allow", [])


def test_a_boolean_is_no_quantity_even_beside_the_number_python_thinks_it_equals():
    decision = run(pod(container(requests={"nvidia.com/gpu": True}, limits={"nvidia.com/gpu": 1})), TIME_SLICING)
    assert decision.patch == []
    assert decision.violations == [
        'container "app": nvidia.com/gpu request true is not a quantity (true/false) (the API server '
        "refuses it anyway); set a whole number of "
        'devices such as "1"'
    ]


def test_init_containers_are_mutated_too():
    decision = run(pod(container(), init=(container("setup", requests={"nvidia.com/gpu": "1"}),)))
    assert decision.mutated["spec"]["initContainers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert decision.warnings[0].startswith('gpu-admission: init container "setup": set limits')


def test_containers_without_gpus_are_untouched():
    decision = run(pod(container(requests={"cpu": "1"}), container("b", requests={"memory": "1Gi"})))
    assert (decision.verdict, decision.patch, decision.warnings) == ("allow", [], [])


# --- fractional -----------------------------------------------------------------------------------------


def test_fractional_is_denied_under_reject_with_what_the_namespace_offers():
    decision = run(pod(container("train", requests={"nvidia.com/gpu": "500m"})))
    assert decision.verdict == "deny"
    assert decision.violations == [
        'container "train": nvidia.com/gpu "500m" (0.5 GPU) is fractional, but GPUs are whole devices (the API '
        "server refuses it anyway); request a whole "
        'number of GPUs (policy "team" gives whole GPUs only; ask for a namespace with sharing)'
    ]


def test_fractional_in_a_time_slicing_namespace_points_at_the_replica():
    decision = run(pod(container(requests={"nvidia.com/gpu": "0.5"})), TIME_SLICING)
    assert decision.violations == [
        'container "app": nvidia.com/gpu "0.5" is fractional, but GPUs are whole devices (the API '
        "server refuses it anyway); request nvidia.com/gpu: 1,"
        ' which policy "team" turns into one of 4 time-slicing shares of a GPU (nvidia.com/gpu.shared)'
    ]


def test_fractional_becomes_a_shared_replica_with_its_memory_fraction():
    decision = run(pod(container(requests={"nvidia.com/gpu": "0.2"})), TIME_SLICING_FRACTIONAL)
    assert decision.verdict == "allow"
    resources = decision.mutated["spec"]["containers"][0]["resources"]
    assert resources == {"requests": {"nvidia.com/gpu.shared": "1"}, "limits": {"nvidia.com/gpu.shared": "1"}}
    assert env_of(decision) == {
        "GPU_ADMISSION_MEMORY_FRACTION": "0.2",  # recorded: gpu.shared 1 alone no longer says 0.2
        "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.18",
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
        "TF_FORCE_GPU_ALLOW_GROWTH": "true",
        "CUPY_GPU_MEMORY_LIMIT": "20%",
        "CUDA_MEMORY_FRACTION": "0.2",
        "GPU_MEMORY_FRACTION": "0.2",
    }
    assert decision.mutation_kinds == ["requests-into-limits", "fractional", "env"]


def test_a_user_set_recorded_fraction_is_neither_duplicated_nor_replaced():
    env = [{"name": "GPU_ADMISSION_MEMORY_FRACTION", "value": "0.1"}]
    decision = run(pod(container(requests={"nvidia.com/gpu": "0.2"}, env=env)), TIME_SLICING_FRACTIONAL)
    names = [e["name"] for e in decision.mutated["spec"]["containers"][0]["env"]]
    assert names.count("GPU_ADMISSION_MEMORY_FRACTION") == 1
    assert env_of(decision)["GPU_ADMISSION_MEMORY_FRACTION"] == "0.1"
    assert env_of(decision)["GPU_MEMORY_FRACTION"] == "0.2"  # the conversion's own fraction


def test_a_second_pass_over_a_converted_fraction_keeps_it_silently():
    # The API server calls the webhook again (reinvocation, then /validate); a template's pods arrive mutated.
    first = run(pod(container(requests={"nvidia.com/gpu": "0.25"})), TIME_SLICING_FRACTIONAL)
    again = run(first.mutated, TIME_SLICING_FRACTIONAL)
    assert (again.patch, again.warnings, again.verdict) == ([], [], "allow")


@pytest.mark.parametrize(
    ("value", "profile"),
    [("0.25", "1g.20gb"), ("0.5", "3g.40gb"), ("100m", "1g.10gb"), ("0.75", "7g.80gb"), ("0.125", "1g.10gb")],
)
def test_fractional_becomes_the_smallest_mig_slice_that_fits(value, profile):
    decision = run(pod(container(requests={"nvidia.com/gpu": value})), MIG_FRACTIONAL)
    resources = decision.mutated["spec"]["containers"][0]["resources"]
    resource = f"nvidia.com/mig-{profile}"
    assert resources == {"requests": {resource: "1"}, "limits": {resource: "1"}}
    assert "env" not in decision.mutated["spec"]["containers"][0]  # a MIG slice has its own memory
    assert decision.verdict == "allow"


def test_fractional_with_request_and_limit_disagreeing_is_not_converted():
    obj = pod(container(requests={"nvidia.com/gpu": "0.5"}, limits={"nvidia.com/gpu": "1"}))
    decision = run(obj, TIME_SLICING_FRACTIONAL)
    assert decision.patch == []
    assert decision.violations == [
        'container "app": nvidia.com/gpu request "0.5" differs from limit "1"; GPUs cannot be '
        "overcommitted (the API server refuses it anyway): "
        "set request and limit to the same whole number"
    ]


def test_a_quantity_the_api_server_rewrote_is_named_with_its_value():
    # The API server sends 0.5 to webhooks as "500m": every line names what arrived and what it means.
    decision = run(pod(container(requests={"nvidia.com/gpu": "250m"})), TIME_SLICING_FRACTIONAL)
    assert decision.warnings[1] == (
        'gpu-admission: container "app": nvidia.com/gpu "250m" (0.25 GPU) became nvidia.com/gpu.shared 1'
    )
    obj = pod(container(requests={"nvidia.com/gpu": "250m"}, limits={"nvidia.com/gpu": "1"}))
    assert run(obj, TIME_SLICING).violations == [
        'container "app": nvidia.com/gpu request "250m" (0.25 GPU) differs from limit "1"; GPUs cannot be '
        "overcommitted (the API server refuses it anyway): set request and limit to the same whole number"
    ]
    decision = run(pod(container(limits={"nvidia.com/gpu": "5e-1", "amd.com/gpu": "500m"})))
    assert decision.violations == [  # by name, as the API server sends the maps
        'container "app": amd.com/gpu "500m" (0.5 GPU) is fractional, but GPUs are whole devices (the API server '
        "refuses it anyway); request a whole number",
        'container "app": nvidia.com/gpu "5e-1" (0.5 GPU) is fractional, but GPUs are whole devices (the API '
        'server refuses it anyway); request a whole number of GPUs (policy "team" gives whole GPUs only; ask for '
        "a namespace with sharing)",
    ]
    assert decision.warnings == []  # the short forms name the text alone (under enforce: no warnings)


def test_a_containers_lines_come_by_resource_name_whatever_the_order_written():
    """The API server sends a Pod's resource maps with their keys sorted; a file (the CLI's dry run) or the webhook's
    own mutation (a limit copied from a request) may hold them in another order, and the lines are the same."""
    written = [{"nvidia.com/gpu": "5e-1", "amd.com/gpu": "500m"}, {"amd.com/gpu": "500m", "nvidia.com/gpu": "5e-1"}]
    said = [run(pod(container(limits=limits))).violations for limits in written]
    assert said[0] == said[1] and [line.split(": ")[1].split()[0] for line in said[0]] == [
        "amd.com/gpu",
        "nvidia.com/gpu",
    ]
    copied = run(pod(container(requests={"amd.com/gpu": "500m"}, limits={"nvidia.com/gpu": "5e-1"}))).violations
    assert copied == said[0]


# --- mapping --------------------------------------------------------------------------------------------


def test_time_slicing_maps_whole_gpus_to_the_shared_resource():
    decision = run(pod(container(requests={"nvidia.com/gpu": "1"})), TIME_SLICING)
    assert decision.mutated == annotated(
        pod(
            container(
                requests={"nvidia.com/gpu.shared": "1"},
                limits={"nvidia.com/gpu.shared": "1"},
                env=[
                    {"name": "XLA_PYTHON_CLIENT_MEM_FRACTION", "value": "0.23"},
                    {"name": "XLA_PYTHON_CLIENT_PREALLOCATE", "value": "false"},
                    {"name": "TF_FORCE_GPU_ALLOW_GROWTH", "value": "true"},
                    {"name": "CUPY_GPU_MEMORY_LIMIT", "value": "25%"},
                    {"name": "CUDA_MEMORY_FRACTION", "value": "0.25"},
                    {"name": "GPU_MEMORY_FRACTION", "value": "0.25"},
                ],
            )
        )
    )
    assert decision.warnings == [
        'gpu-admission: container "app": set limits nvidia.com/gpu from requests (GPUs need request = limit)',
        'gpu-admission: container "app": nvidia.com/gpu 1 became nvidia.com/gpu.shared 1 (time-slicing policy)',
        'gpu-admission: container "app": set 6 memory env vars for GPU fraction 0.25',
    ]


def test_mapping_uses_the_policys_resource_name():
    custom = policy(sharing=Sharing(mode=Mode.TIME_SLICING, replicas=2, resource_name="example.com/gpu-slice"))
    decision = run(pod(container(limits={"nvidia.com/gpu": "1"})), custom)
    assert decision.mutated["spec"]["containers"][0]["resources"] == {"limits": {"example.com/gpu-slice": "1"}}


def test_mps_injects_the_mps_limits_from_the_gpu_memory():
    decision = run(pod(container(limits={"nvidia.com/gpu": "1"})), MPS)
    env = env_of(decision)
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=20480M"  # a quarter of 80 GiB
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert env["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.2437"  # 0.25 less 512 MiB of 80 GiB


def test_memory_fraction_overrides_one_over_replicas():
    custom = policy(
        sharing=Sharing(mode=Mode.MPS, replicas=4), gpu=GPU(memory_mib=40960), memory_fraction=Fraction(1, 10)
    )
    env = env_of(run(pod(container(limits={"nvidia.com/gpu": "1"})), custom))
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=4096M"
    assert env["GPU_MEMORY_FRACTION"] == "0.1"
    assert env["CUPY_GPU_MEMORY_LIMIT"] == "10%"


def test_mig_maps_whole_gpus_to_the_policys_profile():
    decision = run(
        pod(container(requests={"nvidia.com/gpu": "2"})),
        policy(
            sharing=MIG.sharing,
            gpu=MIG.gpu,
            limits=Limits(max_per_container=2),  # slices per container, set
        ),
    )
    resources = decision.mutated["spec"]["containers"][0]["resources"]
    assert resources == {"requests": {"nvidia.com/mig-1g.10gb": "2"}, "limits": {"nvidia.com/mig-1g.10gb": "2"}}
    assert decision.mutation_kinds == ["requests-into-limits", "mapping"]


def test_a_container_that_already_holds_the_target_is_not_renamed():
    obj = pod(container(limits={"nvidia.com/gpu": "1", "nvidia.com/gpu.shared": "1"}))
    decision = run(obj, TIME_SLICING)
    assert decision.mutated["spec"]["containers"][0]["resources"]["limits"] == {
        "nvidia.com/gpu": "1",
        "nvidia.com/gpu.shared": "1",
    }


# --- env ------------------------------------------------------------------------------------------------


def test_user_set_variables_are_kept_with_a_warning():
    env = [  # within the share (1/4): kept as written
        {"name": "GPU_MEMORY_FRACTION", "value": "0.2"},
        {"name": "CUDA_MEMORY_FRACTION", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
    ]
    decision = run(pod(container(limits={"nvidia.com/gpu": "1"}, env=env)), TIME_SLICING)
    result = decision.mutated["spec"]["containers"][0]["env"]
    assert result[:2] == env
    assert [e["name"] for e in result[2:]] == [
        "XLA_PYTHON_CLIENT_MEM_FRACTION",
        "XLA_PYTHON_CLIENT_PREALLOCATE",
        "TF_FORCE_GPU_ALLOW_GROWTH",
        "CUPY_GPU_MEMORY_LIMIT",
    ]
    assert (
        'gpu-admission: container "app": kept CUDA_MEMORY_FRACTION as set (policy suggests 0.25)' in decision.warnings
    )
    assert 'gpu-admission: container "app": kept GPU_MEMORY_FRACTION as set (policy suggests 0.25)' in decision.warnings
    # Appended one by one: the user's entries (literal values, often secrets) are not copied into the patch.
    appended = [{"op": "add", "path": "/spec/containers/0/env/-", "value": e} for e in result[2:]]
    assert [op for op in decision.patch if "/env" in op["path"]] == appended


SHARED_A100 = policy(sharing=Sharing(mode=Mode.TIME_SLICING, replicas=4), gpu=GPU(model="A100-80GB"))


@pytest.mark.parametrize(
    ("name", "value", "line", "short"),
    [
        ("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.9",
         "XLA_PYTHON_CLIENT_MEM_FRACTION lets JAX take 0.9 of the GPU's memory, but this container's share is "
         '1/4 (time-slicing, policy "team"): set XLA_PYTHON_CLIENT_MEM_FRACTION=0.2437, or remove it and the '
         "webhook sets it",
         "XLA_PYTHON_CLIENT_MEM_FRACTION: 0.9 of the GPU is over the 1/4 share; set 0.2437"),
        ("CUDA_MEMORY_FRACTION", "0.93",
         "CUDA_MEMORY_FRACTION lets Text Generation Inference take 0.93 of the GPU's memory, but this "
         'container\'s share is 1/4 (time-slicing, policy "team"): set CUDA_MEMORY_FRACTION=0.25, or remove it and '
         "the webhook sets it",
         "CUDA_MEMORY_FRACTION: 0.93 of the GPU is over the 1/4 share; set 0.25"),
        ("CUPY_GPU_MEMORY_LIMIT", "50%",
         "CUPY_GPU_MEMORY_LIMIT lets CuPy take 0.5 of the GPU's memory, but this container's share is 1/4 "
         '(time-slicing, policy "team"): set CUPY_GPU_MEMORY_LIMIT=25%, or remove it and the webhook sets it',
         "CUPY_GPU_MEMORY_LIMIT: 0.5 of the GPU is over the 1/4 share; set 25%"),
        ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True,per_process_memory_fraction:0.9",
         "PYTORCH_CUDA_ALLOC_CONF lets PyTorch take 0.9 of the GPU's memory, but this container's share is 1/4 "
         '(time-slicing, policy "team"): set per_process_memory_fraction:0.25 in PYTORCH_CUDA_ALLOC_CONF, or remove '
         "it and the webhook sets it",
         "PYTORCH_CUDA_ALLOC_CONF: 0.9 of the GPU is over the 1/4 share; set its fraction to 0.25"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("enforcement", [Enforcement.ENFORCE, Enforcement.WARN])
def test_a_users_memory_variable_above_the_share_is_denied_with_the_value_to_write(
    name, value, line, short, enforcement
):
    pol = policy(sharing=SHARED_A100.sharing, gpu=SHARED_A100.gpu, enforcement=enforcement)
    decision = run(pod(container(limits={"nvidia.com/gpu": "1"}, env=[{"name": name, "value": value}])), pol)
    assert decision.violations == [f'container "app": {line}']
    if enforcement is Enforcement.ENFORCE:
        assert (decision.verdict, decision.warnings) == ("deny", [])
    else:
        assert decision.verdict == "warn"
        assert decision.warnings[-1] == f'gpu-admission: container "app": {short}'
        assert f"{name}={value}" in [f"{e['name']}={e.get('value')}" for e in env_of_list(decision)]  # kept


def env_of_list(decision) -> list[dict]:
    return decision.mutated["spec"]["containers"][0]["env"]


def test_a_memory_variable_within_the_share_is_kept_as_written():
    for value in ("0.25", "0.1"):
        env = [{"name": "CUDA_MEMORY_FRACTION", "value": value}]
        decision = run(pod(container(limits={"nvidia.com/gpu": "1"}, env=env)), TIME_SLICING)
        assert (decision.verdict, decision.violations) == ("allow", [])
        assert env_of(decision)["CUDA_MEMORY_FRACTION"] == value
    # A converted fraction's share is what it asked for: 0.2 here, so 0.25 is over it.
    env = [{"name": "GPU_MEMORY_FRACTION", "value": "0.25"}]
    decision = run(pod(container(requests={"nvidia.com/gpu": "0.2"}, env=env)), TIME_SLICING_FRACTIONAL)
    assert decision.violations == [
        'container "app": GPU_MEMORY_FRACTION lets the application take 0.25 of the GPU\'s memory, but this '
        'container\'s share is 0.2 (time-slicing, policy "team"): set GPU_MEMORY_FRACTION=0.2, or remove it and the '
        "webhook sets it"
    ]
    # Whole GPUs are not shared: a user's 0.9 is theirs to choose.
    env = [{"name": "CUDA_MEMORY_FRACTION", "value": "0.9"}]
    assert run(pod(container(limits={"nvidia.com/gpu": "1"}, env=env))).violations == []


EVERY_FRAMEWORK = policy(
    sharing=Sharing(mode=Mode.MPS, replicas=4),
    gpu=GPU(memory_mib=81920),
    framework_env=("jax", "tensorflow", "cupy", "tgi", "generic", "pytorch"),
)


EVERY_VARIABLE = sorted(env_of(run(pod(container(limits={"nvidia.com/gpu": "1"})), EVERY_FRAMEWORK)))


@pytest.mark.parametrize("variable", EVERY_VARIABLE)
def test_no_variable_a_policy_injects_is_ever_duplicated_or_overwritten(variable):
    """Each variable is set by the user first (with valueFrom, so no value can be merged): it stays alone."""
    env = [{"name": variable, "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]
    decision = run(pod(container(limits={"nvidia.com/gpu": "1"}, env=env)), EVERY_FRAMEWORK)
    result = decision.mutated["spec"]["containers"][0]["env"]
    assert result[0] == env[0]
    assert [e["name"] for e in result].count(variable) == 1


@pytest.mark.parametrize("variable", ["XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_CLIENT_MEM_FRACTION"])
def test_jax_hints_are_skipped_when_the_user_set_a_jax_fraction(variable):
    env = [{"name": variable, "value": ".2"}]
    decision = run(pod(container(limits={"nvidia.com/gpu": "1"}, env=env)), TIME_SLICING)
    names = [e["name"] for e in decision.mutated["spec"]["containers"][0]["env"]]
    assert "XLA_PYTHON_CLIENT_PREALLOCATE" not in names
    assert names.count(variable) == 1 and "XLA_PYTHON_CLIENT_MEM_FRACTION" not in names[1:]
    assert f'gpu-admission: container "app": kept {variable} as set; jax hints skipped' in decision.warnings


# PyTorch reads one of PYTORCH_CUDA_ALLOC_CONF and PYTORCH_ALLOC_CONF (which one first depends on the version):
# the hint goes into the one the user set, never into a second variable that would hide the user's settings.
@pytest.mark.parametrize("variable", ["PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"])
def test_pytorch_is_opt_in_and_merges_into_the_users_alloc_conf(variable):
    torch = policy(sharing=Sharing(mode=Mode.TIME_SLICING, replicas=4), framework_env=("pytorch",))
    env = [{"name": variable, "value": "expandable_segments:True"}]
    decision = run(pod(container(limits={"nvidia.com/gpu": "1"}, env=env)), torch)
    merged = "expandable_segments:True,per_process_memory_fraction:0.25"
    assert decision.mutated["spec"]["containers"][0]["env"] == [{"name": variable, "value": merged}]
    # The one entry merged into is replaced alone.
    env_op = {"op": "replace", "path": "/spec/containers/0/env/0", "value": {"name": variable, "value": merged}}
    assert decision.patch[-1] == env_op
    assert "PYTORCH_CUDA_ALLOC_CONF" not in env_of(run(pod(container(limits={"nvidia.com/gpu": "1"})), TIME_SLICING))


def test_a_users_pytorch_alloc_conf_from_a_secret_is_kept_with_a_notice():
    torch = policy(sharing=Sharing(mode=Mode.TIME_SLICING, replicas=4), framework_env=("pytorch",))
    from_secret = [{"name": "PYTORCH_ALLOC_CONF", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]
    decision = run(pod(container(limits={"nvidia.com/gpu": "1"}, env=from_secret)), torch)
    assert decision.mutated["spec"]["containers"][0]["env"] == from_secret
    assert "kept PYTORCH_ALLOC_CONF as set (policy suggests per_process_memory_fraction:0.25)" in decision.warnings[-1]


def test_visible_devices_variables_are_never_set():
    for pol in (TIME_SLICING, TIME_SLICING_FRACTIONAL, MPS, MIG, EXCLUSIVE):
        env = env_of(run(pod(container(limits={"nvidia.com/gpu": "1"})), pol))
        assert "NVIDIA_VISIBLE_DEVICES" not in env and "CUDA_VISIBLE_DEVICES" not in env


def test_exclusive_gpus_get_no_env():
    assert env_of(run(pod(container(limits={"nvidia.com/gpu": "1"})))) == {}


# --- validation -----------------------------------------------------------------------------------------


def test_request_and_limit_must_agree():
    decision = run(pod(container("x", requests={"nvidia.com/gpu": "1"}, limits={"nvidia.com/gpu": "2"})))
    assert decision.violations == [
        'container "x": nvidia.com/gpu request "1" differs from limit "2"; GPUs cannot be '
        "overcommitted (the API server refuses it anyway): "
        "set request and limit to the same whole number"
    ]


def test_per_container_maximum():
    decision = run(pod(container(limits={"nvidia.com/gpu": "9"})))
    assert decision.violations == [
        'container "app": nvidia.com/gpu "9" exceeds the per-container maximum of 8 (policy "team"); request at most 8'
    ]


def test_two_shared_replicas_are_not_two_gpus():
    decision = run(pod(container(limits={"nvidia.com/gpu": "2"})), TIME_SLICING)
    assert decision.patch == []  # left as written: the line names what the user wrote
    assert decision.violations == [
        'container "app": nvidia.com/gpu 2 (nvidia.com/gpu.shared 2 under time-slicing) exceeds 1 per container '
        '(policy "team"): 2 time-slicing replicas are not 2 GPUs: the device plugin hands them out '
        "(failRequestsGreaterThanOne is off by default), on one GPU or several, each still shared with other pods; "
        "request 1, or whole GPUs in a namespace that has them"
    ]


def test_two_mps_replicas_are_refused_by_the_device_plugin():
    # The device plugin turns failRequestsGreaterThanOne on for MPS unless its config turns it off.
    decision = run(pod(container(limits={"nvidia.com/gpu": "2"})), MPS)
    assert decision.verdict == "deny"
    assert decision.violations == [
        'container "app": nvidia.com/gpu 2 (nvidia.com/gpu.shared 2 under mps) exceeds 1 per container '
        '(policy "team"): 2 MPS replicas are not 2 GPUs, and the device plugin refuses them '
        "(its failRequestsGreaterThanOne is on by default under MPS: the kubelet fails the pod with "
        "UnexpectedAdmissionError); request 1, or whole GPUs in a namespace that has them"
    ]


def test_the_one_replica_rule_is_for_shared_replicas_only():
    # Under time-slicing, whole devices of another vendor keep the usual maximum of 8.
    obj = pod(container(limits={"amd.com/gpu": "2"}))
    assert run(obj, TIME_SLICING).violations == []
    decision = run(pod(container(limits={"amd.com/gpu": "9"})), TIME_SLICING)
    assert decision.violations == [
        'container "app": amd.com/gpu "9" exceeds the per-container maximum of 8 (policy "team"); request at most 8'
    ]


def test_intel_gpu_amounts_are_whole_numbers_but_not_device_counts():
    # Intel's GPU Aware Scheduling example: thousandths of a GPU's compute and bytes of its memory.
    gas = {"gpu.intel.com/i915": "1", "gpu.intel.com/millicores": "10", "gpu.intel.com/memory.max": "10M"}
    assert run(pod(container(limits=gas))).violations == []
    decision = run(pod(container(limits={"gpu.intel.com/i915": "1", "gpu.intel.com/millicores": "0.5"})))
    assert decision.violations[0].startswith('container "app": gpu.intel.com/millicores "0.5" is fractional')


def test_an_explicit_per_container_maximum_applies_under_sharing():
    custom = policy(sharing=Sharing(mode=Mode.TIME_SLICING, replicas=4), limits=Limits(max_per_container=2))
    assert run(pod(container(limits={"nvidia.com/gpu": "2"})), custom).verdict == "allow"


def gpu_pod(containers: list[Any], init: list[Any]) -> dict[str, Any]:
    """App containers `app0...` and init containers `init0...` with these GPU counts; `(n, "sidecar")` is a
    restartable init container (KEP-753)."""

    def gpu_container(index: int, spec: Any, prefix: str) -> dict[str, Any]:
        count, kind = spec if isinstance(spec, tuple) else (spec, None)
        extra = {"restartPolicy": "Always"} if kind == "sidecar" else {}
        return container(f"{prefix}{index}", limits={"nvidia.com/gpu": str(count)}, **extra)

    return pod(
        *[gpu_container(i, c, "app") for i, c in enumerate(containers)],
        init=tuple(gpu_container(i, c, "init") for i, c in enumerate(init)),
    )


@pytest.mark.parametrize(
    ("containers", "init", "allowed"),
    [
        ([4, 4], [], True),
        ([5, 4], [], False),
        ([4], [8], True),  # init containers run before the app: the peak is 8
        ([4], [(1, "sidecar"), 7], True),  # sidecar 1 + regular init 7 = 8
        ([4], [(1, "sidecar"), 8], False),  # 1 + 8 = 9
        ([7], [(2, "sidecar")], False),  # app 7 + sidecar 2 = 9
        ([6], [(2, "sidecar")], True),
        ([4], [8, (1, "sidecar")], True),  # the sidecar starts after the 8-GPU init container ends
    ],
)
def test_pod_total_is_computed_as_the_scheduler_does(containers, init, allowed):
    decision = run(gpu_pod(containers, init))
    assert decision.allowed is allowed
    if not allowed:
        assert decision.violations[0].startswith("pod: nvidia.com/gpu effective total 9 (containers running together: ")
        assert decision.violations[0].endswith(
            'exceeds the per-pod maximum of 8 (policy "team"); request fewer or split the pod'
        )


def test_visible_devices_without_a_gpu_is_denied():
    env = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    decision = run(pod(container("sneaky", env=env)))
    assert decision.violations == [
        'container "sneaky": sets NVIDIA_VISIBLE_DEVICES but requests no GPU; the NVIDIA container toolkit would '
        'expose GPUs without allocating them (policy "team"): remove the variable or request nvidia.com/gpu'
    ]
    assert run(pod(container(env=env)), policy(block_visible_devices_override=False)).verdict == "allow"


@pytest.mark.parametrize("prefix", ["NVIDIA_", "N", "NVIDIA_VISIBLE_"])
def test_an_env_from_prefix_that_can_make_visible_devices_is_denied(prefix):
    # A ConfigMap key VISIBLE_DEVICES under the prefix NVIDIA_ sets the variable without naming it.
    env_from = [{"configMapRef": {"name": "cm"}}, {"prefix": prefix, "configMapRef": {"name": "gpu"}}]
    decision = run(pod(container("sneaky", envFrom=env_from)))
    key = "NVIDIA_VISIBLE_DEVICES".removeprefix(prefix)
    assert decision.violations == [
        f'container "sneaky": envFrom prefix "{prefix}" can set NVIDIA_VISIBLE_DEVICES (from a key "{key}") but '
        'requests no GPU; the NVIDIA container toolkit would expose GPUs without allocating them (policy "team"): '
        "use another prefix or request nvidia.com/gpu"
    ]


def test_other_env_from_prefixes_are_fine():
    env_from = [{"prefix": "APP_", "configMapRef": {"name": "cm"}}, {"prefix": "", "secretRef": {"name": "s"}}]
    assert run(pod(container(envFrom=env_from))).violations == []


def test_visible_devices_from_a_secret_in_an_ephemeral_container_is_denied():
    env = [{"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]
    obj = pod(container(), ephemeralContainers=[{"name": "debug", "image": "busybox", "env": env}])
    assert run(obj).violations[0].startswith('ephemeral container "debug": sets NVIDIA_VISIBLE_DEVICES')


def test_a_mig_profile_that_the_model_lacks_is_denied():
    decision = run(pod(container(limits={"nvidia.com/mig-1g.5gb": "1"})), MIG)
    assert decision.violations == [
        'container "app": nvidia.com/mig-1g.5gb "1" asks for MIG profile 1g.5gb, which A100-80GB does not have '
        '(policy "team"); use one of 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb'
    ]
    assert run(pod(container(limits={"nvidia.com/mig-2g.20gb": "1"})), MIG).verdict == "allow"


def test_mig_advice_lists_only_the_profiles_the_policy_offers():
    # A profile the model lacks: the advice is what the nodes offer, not the model's whole table (following it
    # to 1g.20gb would be the next denial).
    offered = policy(
        sharing=Sharing(mode=Mode.MIG, mig_profile="1g.10gb", mig_profiles=("1g.10gb", "3g.40gb")),
        gpu=GPU(model="A100-80GB"),
    )
    decision = run(pod(container(limits={"nvidia.com/mig-1g.5gb": "1"})), offered)
    assert decision.violations == [
        'container "app": nvidia.com/mig-1g.5gb "1" asks for MIG profile 1g.5gb, which A100-80GB does not have '
        '(policy "team"); use one of 1g.10gb, 3g.40gb'
    ]
    decision = run(pod(container(limits={"nvidia.com/mig-1g.20gb": "1"})), offered)
    assert decision.violations == [
        'container "app": nvidia.com/mig-1g.20gb "1" asks for MIG profile 1g.20gb, which the nodes\' MIG layout '
        'does not offer (policy "team" offers 1g.10gb, 3g.40gb): the pod would stay Pending; use one of those'
    ]


def test_a_shared_resource_in_an_exclusive_namespace_is_denied():
    decision = run(pod(container(limits={"nvidia.com/gpu.shared": "1"})))
    assert decision.violations == [
        'container "app": nvidia.com/gpu.shared "1" is a shared GPU, but policy "team" gives this namespace whole '
        "GPUs (mode exclusive); request nvidia.com/gpu instead"
    ]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "-1",
            'nvidia.com/gpu limit "-1" is negative (the API server refuses it anyway); set a '
            "whole number of devices >= 0",
        ),
        (
            "lots",
            'nvidia.com/gpu limit "lots" is not a Kubernetes quantity (expected e.g. 1, 2, '
            "500m, 1e3, 2Ki) (the API server refuses it anyway); set",
        ),
        (
            "1e309",
            'nvidia.com/gpu limit "1e309" is too large (past int64) (the API server refuses it '
            "anyway); set a whole number",
        ),
        ("9223372036854775808", 'limit "9223372036854775808" is too large (past int64)'),
        (True, "nvidia.com/gpu limit true is not a quantity (true/false)"),
        ([1], "nvidia.com/gpu limit a list is not a quantity (expected a string or number, got list)"),
    ],
)
def test_bad_quantities_are_denied_with_the_text_quoted(value, message):
    decision = run(pod(container(limits={"nvidia.com/gpu": value})))
    assert decision.verdict == "deny"
    assert len(decision.violations) == 1
    assert message in decision.violations[0]
    assert decision.violations[0].startswith('container "app": ')


def test_every_problem_is_listed_not_just_the_first():
    obj = pod(
        container("a", limits={"nvidia.com/gpu": "0.5"}),
        container("b", requests={"nvidia.com/gpu": "1"}, limits={"nvidia.com/gpu": "3"}),
        container("c", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "0"}]),
    )
    assert [line.split(":")[0] for line in run(obj).violations] == ['container "a"', 'container "b"', 'container "c"']


def test_malformed_resources_are_explained_not_crashed_on():
    decision = run(pod({"name": "app", "resources": {"limits": ["nvidia.com/gpu"]}}))
    assert decision.violations == ['container "app": resources.limits must be a map, not list; fix the manifest']


def test_keys_that_are_not_strings_are_left_alone():
    """YAML allows `5: 3` as a key, and the CLI reads YAML: the engine must pass such keys by, not trip on them."""
    decision = run(pod(container(limits={5: "3", "nvidia.com/gpu.shared": "1"})), TIME_SLICING)
    assert decision.mutated["spec"]["containers"][0]["resources"]["limits"][5] == "3"
    assert env_of(decision)["CUDA_MEMORY_FRACTION"] == "0.25"


# --- enforcement ----------------------------------------------------------------------------------------


def test_warn_admits_and_tells_the_user():
    decision = run(pod(container(limits={"nvidia.com/gpu": "9"})), policy(enforcement=Enforcement.WARN))
    assert (decision.allowed, decision.verdict, decision.denials) == (True, "warn", [])
    assert decision.warnings == [  # the short form; the CLI and the log carry the whole line
        'gpu-admission: container "app": nvidia.com/gpu "9": at most 8 per container; ask for fewer'
    ]
    assert decision.violations == [
        'container "app": nvidia.com/gpu "9" exceeds the per-container maximum of 8 (policy "team"); request at most 8'
    ]


def test_audit_admits_silently_but_records_the_lines():
    decision = run(pod(container(limits={"nvidia.com/gpu": "9"})), policy(enforcement=Enforcement.AUDIT))
    assert (decision.allowed, decision.verdict, decision.warnings, decision.denials) == (True, "audit", [], [])
    assert len(decision.violations) == 1


def test_enforce_denies():
    decision = run(pod(container(limits={"nvidia.com/gpu": "9"})))
    assert (decision.allowed, decision.verdict) == (False, "deny")
    assert decision.denials == decision.violations


@pytest.mark.parametrize("enforcement", [Enforcement.ENFORCE, Enforcement.WARN])
def test_a_denied_objects_warnings_do_not_list_mutations_as_done(enforcement):
    # Requests into limits and the mapping would have been done, but the object is denied: nothing was done.
    # (Under warn, a refusal denies: its line is the denial, and the policy's own violation stays a warning.)
    obj = pod(
        container(requests={"nvidia.com/gpu": "1"}),
        container("big", limits={"nvidia.com/gpu": "9"}),
        container("half", requests={"amd.com/gpu": "0.5"}, limits={"amd.com/gpu": "0.5"}),
    )
    decision = run(obj, policy(enforcement=enforcement, sharing=Sharing(mode=Mode.TIME_SLICING, replicas=4)))
    assert (decision.allowed, decision.verdict) == (False, "deny")
    assert all("became" not in w and "set limits" not in w and "memory env" not in w for w in decision.warnings)
    if enforcement is Enforcement.ENFORCE:
        assert decision.warnings == []
    else:
        assert decision.warnings == [
            'gpu-admission: container "big": nvidia.com/gpu 9: one time-slicing share per container; ask for 1'
        ]
    assert decision.patch != []  # the patch is what /mutate would return had the object been admitted


# --- kinds ----------------------------------------------------------------------------------------------

TEMPLATE = {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [container(requests={"nvidia.com/gpu": "1"})]}}


@pytest.mark.parametrize(
    ("kind", "wrap", "path"),
    [
        ("Deployment", lambda t: {"spec": {"replicas": 2, "template": t}}, "/spec/template/spec"),
        ("StatefulSet", lambda t: {"spec": {"template": t}}, "/spec/template/spec"),
        ("DaemonSet", lambda t: {"spec": {"template": t}}, "/spec/template/spec"),
        ("ReplicaSet", lambda t: {"spec": {"template": t}}, "/spec/template/spec"),
        ("ReplicationController", lambda t: {"spec": {"template": t}}, "/spec/template/spec"),
        ("Job", lambda t: {"spec": {"template": t}}, "/spec/template/spec"),
        (
            "CronJob",
            lambda t: {"spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": t}}}},
            "/spec/jobTemplate/spec/template/spec",
        ),
        ("PodTemplate", lambda t: {"template": t}, "/template/spec"),
    ],
)
def test_workload_templates_are_mutated_where_their_pod_spec_lives(kind, wrap, path):
    obj = {"apiVersion": "x/v1", "kind": kind, "metadata": {"name": "w", "namespace": "team"}, **wrap(TEMPLATE)}
    decision = run(obj, TIME_SLICING)
    assert decision.verdict == "allow"
    resources = {"requests": {"nvidia.com/gpu.shared": "1"}, "limits": {"nvidia.com/gpu.shared": "1"}}
    assert {"op": "replace", "path": f"{path}/containers/0/resources", "value": resources} in decision.patch
    annotations = decision.mutated["metadata"]["annotations"]
    assert annotations["gpu-admission.io/policy"] == "team"
    # What the user wrote and what the webhook made of it, for the next apply of the same file (reapply.py).
    spec = decision.mutated
    for key in path.strip("/").split("/"):
        spec = spec[key]
    record = {"u": {"requests": {"nvidia.com/gpu": "1"}}, "s": resources, "e": spec["containers"][0]["env"]}
    assert json.loads(annotations["gpu-admission.io/requested"]) == {"containers/app": record}


def test_objects_without_a_pod_spec_are_skipped_untouched():
    for obj in (
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}},
    ):
        decision = run(obj)
        assert (decision.skipped, decision.allowed, decision.patch) == (True, True, [])


def workload(gpus: str, **metadata) -> dict:
    template = {"metadata": {}, "spec": pod(container(limits={"nvidia.com/gpu": gpus}))["spec"]}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "team", **metadata},
            "spec": {"replicas": 2, "template": template}}  # fmt: skip


def test_an_update_is_judged_only_when_it_changes_the_pod_spec():
    from webhook.admission.engine import evaluate
    from webhook.admission.policy.model import PolicySet

    policies = PolicySet((TIME_SLICING,))
    before = workload("9")  # made before the policy: over the maximum, and not mapped
    scaled = workload("9")
    scaled["spec"]["replicas"] = 0
    decision = evaluate(scaled, "team", policies, before)
    assert (decision.allowed, decision.patch, decision.warnings) == (True, [], [])
    assert decision.skip_reason == "this update leaves its pod spec as it was"
    changed = workload("1")
    decision = evaluate(changed, "team", policies, before)
    assert decision.skip_reason == "" and decision.mutation_kinds == ["mapping", "env"]
    assert evaluate(workload("9"), "team", policies).verdict == "deny", "a create (no old object) is judged"


@pytest.mark.parametrize(
    ("metadata", "reason"),
    [
        (
            {"ownerReferences": [{"kind": "MyOperator", "name": "o", "uid": "1", "controller": True}]},
            "its pod template comes from its controller",
        ),
    ],
)
def test_workloads_being_deleted_or_owned_by_a_controller_are_left_alone(metadata, reason):
    decision = run(workload("0.5", **metadata))
    assert (decision.allowed, decision.patch, decision.skipped, decision.skip_reason) == (True, [], True, reason)


def test_a_deletion_timestamp_counts_only_where_the_stored_object_is_being_deleted():
    from webhook.admission.engine import evaluate
    from webhook.admission.policy.model import PolicySet

    policies = PolicySet((EXCLUSIVE,))
    finalizing = workload("0.5", deletionTimestamp="2026-11-22T10:00:00Z", finalizers=["f"])
    done = workload("0.5", deletionTimestamp="2026-11-22T10:00:00Z")
    decision = evaluate(done, NS, policies, finalizing)  # the last finalizer removed
    assert (decision.allowed, decision.patch, decision.skip_reason) == (True, [], "it is being deleted")
    # On CREATE the timestamp is the client's own (the API server clears it after the mutating webhooks).
    assert evaluate(done, NS, policies).verdict == "deny"
    # Nor does an UPDATE of a stored object that is not being deleted skip the review.
    assert evaluate(done, NS, policies, workload("1")).verdict == "deny"


def test_owner_references_without_a_controller_and_owned_pods_are_still_judged():
    not_controller = [{"kind": "ConfigMap", "name": "c", "uid": "1"}, {"kind": "X", "name": "x", "controller": False}]
    assert run(workload("0.5", ownerReferences=not_controller)).verdict == "deny"
    owned_pod = pod(container(limits={"nvidia.com/gpu": "0.5"}))
    owned_pod["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "r", "uid": "1", "controller": True}]
    assert run(owned_pod).verdict == "deny", "every Pod is judged when it is created"


def test_ephemeral_containers_are_not_mutated():
    obj = pod(container(), ephemeralContainers=[{"name": "debug", "resources": {"requests": {"nvidia.com/gpu": "1"}}}])
    assert run(obj).patch == []


def test_the_annotation_names_the_policy_and_is_not_duplicated():
    obj = pod(container(requests={"nvidia.com/gpu": "1"}))
    obj["metadata"]["annotations"] = {"other": "x", "gpu-admission.io/policy": "old"}
    decision = run(obj)
    assert decision.mutated["metadata"]["annotations"] == {"other": "x", "gpu-admission.io/policy": "team"}
    assert {
        "op": "replace",
        "path": "/metadata/annotations/gpu-admission.io~1policy",
        "value": "team",
    } in decision.patch


def test_built_in_defaults_apply_without_a_matching_policy():
    decision = run(pod(container(limits={"nvidia.com/gpu": "9"})), namespace="elsewhere")
    assert decision.policy == "built-in-default"
    assert decision.verdict == "deny"


def test_fractional_mig_works_in_an_exclusive_namespace_too():
    a30 = policy(gpu=GPU(model="A30-24GB"), fractional=Fractional.MIG)
    decision = run(pod(container(limits={"nvidia.com/gpu": "0.9"})), a30)
    assert decision.mutated["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/mig-4g.24gb": "1"}}


def test_mutation_warnings_are_at_most_120_characters():
    long_name = "x" * 63
    decision = run(pod(container(long_name, requests={"nvidia.com/gpu": "1", "amd.com/gpu": "1"})), TIME_SLICING)
    assert decision.warnings and all(len(w) <= 120 for w in decision.warnings)


def test_many_distinct_fractions_keep_the_hints_memo_bounded_and_the_policys_other_derived_values():
    from webhook.admission.phases.envhints import hints_for

    run(pod(container(limits={"nvidia.com/gpu": "1"})), TIME_SLICING)
    plan = TIME_SLICING.memo["mutation-plan"]
    for denominator in range(2, 3000):  # fractions come from user input
        hints_for(TIME_SLICING, Fraction(1, denominator))
    assert len(TIME_SLICING.memo["env-hints"]) <= 1024
    assert TIME_SLICING.memo["mutation-plan"] is plan


@pytest.mark.parametrize(
    ("containers", "init", "named"),
    [
        ([1], [(1, "sidecar"), 8], '"init0"=1, "init1"=8'),  # the peak is the init container's: the app waits
        ([5, 4], [8], '"app0"=5, "app1"=4'),  # the app's 9 beat the init container's 8
        ([7], [(2, "sidecar"), 3], '"init0"=2, "app0"=7'),  # sidecars run beside the app
    ],
)
def test_the_pod_total_names_the_containers_that_run_together(containers, init, named):
    assert run(gpu_pod(containers, init)).violations == [
        f"pod: nvidia.com/gpu effective total 9 (containers running together: {named}) exceeds the per-pod "
        'maximum of 8 (policy "team"); request fewer or split the pod'
    ]


def test_one_container_within_its_own_maximum_is_still_held_to_the_pods():
    roomy = policy(limits=Limits(max_per_container=16, max_per_pod=8))
    decision = run(pod(container("big", limits={"nvidia.com/gpu": "12"})), roomy)
    assert decision.violations == [
        'pod: nvidia.com/gpu effective total 12 (container: "big"=12) exceeds the per-pod maximum of 8 '
        '(policy "team"); request fewer or split the pod'
    ]


def test_one_container_over_its_own_maximum_gets_one_line_not_two():
    decision = run(pod(container("big", limits={"nvidia.com/gpu": "9"})))
    assert decision.violations == [
        'container "big": nvidia.com/gpu "9" exceeds the per-container maximum of 8 (policy "team"); request at most 8'
    ]


# --- device selection through volumes, and the pool each mode serves ----------------------------------------


@pytest.mark.parametrize(
    ("host_path", "mount_path", "denied"),
    [
        ("//dev/./nvidia-uvm", "/dev/nvidia-uvm", True),
        ("/dev/", "/host-dev", True),
        ("/dev/shm", "/dev/shm", False),
        ("/var/lib/data", "/var/run/../run/nvidia-container-devices/GPU-0", True),
        ("/var/lib/data", "/var/run/nvidia-container-devices", True),
        ("/var/lib/data", "/data", False),
    ],
)
def test_device_paths_are_read_as_the_node_resolves_them(host_path, mount_path, denied):
    volumes = [{"name": "v", "hostPath": {"path": host_path}}]
    obj = pod(container(volumeMounts=[{"name": "v", "mountPath": mount_path}]), volumes=volumes)
    assert (run(obj).verdict == "deny") is denied
    # Not mounted by any container, a volume selects nothing.
    assert run(pod(container(), volumes=volumes)).verdict == "allow"


def test_a_debug_container_that_mounts_the_pods_dev_volume_is_denied():
    from webhook.admission.engine import evaluate
    from webhook.admission.policy.model import PolicySet

    running = pod(container(), volumes=[{"name": "devs", "hostPath": {"path": "/dev"}}])
    debugged = pod(
        container(),
        volumes=[{"name": "devs", "hostPath": {"path": "/dev"}}],
        ephemeralContainers=[{"name": "debug", "volumeMounts": [{"name": "devs", "mountPath": "/d"}]}],
    )
    decision = evaluate(debugged, NS, PolicySet((EXCLUSIVE,)), running)
    assert decision.violations == [
        'ephemeral container "debug": mounts hostPath /dev (volume "devs"): the node\'s GPU device nodes, outside the '
        'device plugin\'s allocation (policy "team"); remove the volume and request nvidia.com/gpu'
    ]


def test_each_mode_serves_its_own_pool():
    from webhook.admission.policy.model import MigStrategy

    kept_name = policy(sharing=Sharing(mode=Mode.TIME_SLICING, replicas=4, resource_name="nvidia.com/gpu"))
    assert run(pod(container(limits={"nvidia.com/gpu.shared": "1"})), kept_name).violations == [
        'container "app": nvidia.com/gpu.shared "1" is a shared GPU, but policy "team" gives this namespace '
        "time-slicing replicas as nvidia.com/gpu; request nvidia.com/gpu instead"
    ]
    single = policy(sharing=Sharing(mode=Mode.MIG, mig_profile="1g.10gb", mig_strategy=MigStrategy.SINGLE))
    assert run(pod(container(limits={"nvidia.com/mig-1g.10gb": "1"})), single).violations == [
        'container "app": nvidia.com/mig-1g.10gb "1" is a MIG slice, but policy "team" gives this namespace one '
        "1g.10gb MIG slice per nvidia.com/gpu (migStrategy single); request nvidia.com/gpu instead"
    ]
    unknown_model = policy(sharing=Sharing(mode=Mode.MIG, mig_profile="1g.10gb"))
    assert run(pod(container(limits={"nvidia.com/mig-3g.40gb": "1"})), unknown_model).violations == []
    assert run(pod(container(limits={"nvidia.com/mig-1g.10gb.shared": "1"})), MIG).violations == [
        'container "app": nvidia.com/mig-1g.10gb.shared "1" is a shared GPU, but policy "team" gives this namespace '
        "MIG slices (nvidia.com/mig-1g.10gb, nvidia.com/mig-1g.10gb.me, nvidia.com/mig-1g.20gb, "
        "nvidia.com/mig-2g.20gb, nvidia.com/mig-3g.40gb, nvidia.com/mig-4g.40gb, nvidia.com/mig-7g.80gb); request "
        "nvidia.com/gpu: 1 (it becomes nvidia.com/mig-1g.10gb) or one of those"
    ]
    # Other vendors' devices are not NVIDIA's pools.
    assert run(pod(container(limits={"amd.com/gpu": "1"})), MIG).violations == []
