"""Inference engines (webhook/admission/phases/engines.py): vLLM, SGLang and TensorRT-LLM get their memory flag, not
env vars, with values right for the sharing mode; a flag above the share is refused with the argument to write;
and docs/rules.md's framework table says what the code injects."""

from __future__ import annotations

import base64
import json
import re
from fractions import Fraction
from typing import Any

import pytest

from tests import evanphx
from tests.conftest import ROOT
from tests.engine_support import Enforcement, Fractional, Mode, Sharing, container, pod, policy, run
from tests.test_server import review
from webhook.admission.base.envnames import MPS_MEMORY_LIMIT, MPS_THREAD_PERCENTAGE
from webhook.admission.phases import engines
from webhook.admission.policy.model import GPU

H100 = GPU(model="H100-80GB")  # 81,559 MiB: the CUDA context's 512 MiB are 0.0063 of it
POLICIES = {
    "time-slicing": policy(sharing=Sharing(mode=Mode.TIME_SLICING, replicas=4), gpu=H100),
    "mps": policy(sharing=Sharing(mode=Mode.MPS, replicas=4), gpu=H100),
    "mig": policy(sharing=Sharing(mode=Mode.MIG, mig_profile="1g.10gb"), gpu=H100),
    "exclusive": policy(gpu=H100),
}
# Each engine as its pods start it (from the projects' own images and docs): the vLLM OpenAI image's entrypoint
# is the server, so its pods carry arguments alone.
STARTS = {
    "vllm image": {"image": "vllm/vllm-openai:v0.9.1", "args": ["--model", "Qwen/Qwen2.5-7B-Instruct"]},
    "vllm serve": {"image": "python:3.12", "command": ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct"]},
    "vllm module": {
        "image": "registry.example/llm:1",
        "command": ["python3", "-m", "vllm.entrypoints.openai.api_server"],
        "args": ["--model", "m"],
    },
    "sglang": {
        "image": "lmsysorg/sglang:v0.4.6",
        "command": ["python3", "-m", "sglang.launch_server"],
        "args": ["--model-path", "m", "--port", "30000"],
    },
    "trtllm": {"image": "nvcr.io/nvidia/tensorrt-llm/release:1.0.0", "command": ["trtllm-serve", "m"]},
    "trtllm serve": {"image": "nvcr.io/nvidia/tensorrt-llm/release:1.0.0", "command": ["trtllm-serve", "serve", "m"]},
}
BECAME = 'gpu-admission: container "srv": nvidia.com/gpu 1 became '
MAPPED = {
    "time-slicing": BECAME + "nvidia.com/gpu.shared 1 (time-slicing policy)",
    "mps": BECAME + "nvidia.com/gpu.shared 1 (mps policy)",
    "mig": BECAME + "nvidia.com/mig-1g.10gb 1 (mig policy)",
}
MPS_ENV = [f"{MPS_MEMORY_LIMIT}=0=20389M", f"{MPS_THREAD_PERCENTAGE}=25"]
MPS_LINE = 'gpu-admission: container "srv": set 2 MPS env vars for GPU fraction 0.25'
VLLM_ARG = "--gpu-memory-utilization=0.2437"
SGLANG_ARG = "--mem-fraction-static=0.2437"
TRTLLM_ARG = "--kv_cache_free_gpu_memory_fraction=0.2437"


def added(argument: str, title: str) -> str:
    return f'gpu-admission: container "srv": added {argument} for GPU fraction 0.25 ({title})'


# (start, mode): (the arguments appended, the env entries, the warnings)
TABLE: dict[tuple[str, str], tuple[list[str], list[str], list[str]]] = {}
for _start, (_argument, _title) in {
    "vllm image": (VLLM_ARG, "vLLM"),
    "vllm serve": (VLLM_ARG, "vLLM"),
    "vllm module": (VLLM_ARG, "vLLM"),
    "sglang": (SGLANG_ARG, "SGLang"),
    "trtllm": (TRTLLM_ARG, "TensorRT-LLM"),
    "trtllm serve": (TRTLLM_ARG, "TensorRT-LLM"),
}.items():
    TABLE[(_start, "time-slicing")] = ([_argument], [], [MAPPED["time-slicing"], added(_argument, _title)])
    if _title == "vLLM":  # free memory is capped under MPS: only vLLM's fraction of the total still needs its flag
        TABLE[(_start, "mps")] = ([_argument], MPS_ENV, [MAPPED["mps"], MPS_LINE, added(_argument, _title)])
    else:
        TABLE[(_start, "mps")] = ([], MPS_ENV, [MAPPED["mps"], MPS_LINE])
    TABLE[(_start, "mig")] = ([], [], [MAPPED["mig"]])  # the slice is the device: fractions are of the slice
    TABLE[(_start, "exclusive")] = ([], [], [])


def server(start: str, limits: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return container("srv", limits=limits or {"nvidia.com/gpu": "1"}, **{**STARTS[start], **extra})


def env_lines(body: dict[str, Any]) -> list[str]:
    return [f"{e['name']}={e['value']}" for e in body.get("env", [])]


@pytest.mark.parametrize(("start", "mode"), list(TABLE), ids=[f"{s}-{m}" for s, m in TABLE])
def test_each_engine_gets_its_flag_for_each_sharing_mode_and_no_framework_variables(start, mode):
    appended, env, warnings = TABLE[(start, mode)]
    written = server(start)
    decision = run(pod(written), POLICIES[mode])
    body = decision.mutated["spec"]["containers"][0]
    assert body.get("command") == written.get("command")  # never touched: arguments go after it, in `args`
    assert (body.get("args") or []) == (written.get("args") or []) + appended
    assert env_lines(body) == env
    assert decision.warnings == warnings
    assert decision.verdict == "allow"


@pytest.mark.parametrize(
    ("start", "written", "spelling"),
    [
        ("vllm image", ["--model", "m", "--gpu-memory-utilization", "0.2"], "--gpu-memory-utilization"),
        ("vllm image", ["--model", "m", "--gpu-memory-utilization=.25"], "--gpu-memory-utilization"),
        ("sglang", ["--model-path", "m", "--mem-fraction-static", "0.15"], "--mem-fraction-static"),
        ("trtllm", ["--free_gpu_memory_fraction", "0.1"], "--free_gpu_memory_fraction"),  # click's other name
    ],
)
def test_a_flag_within_the_share_stays_as_written_with_a_notice(start, written, spelling):
    decision = run(pod(server(start, args=written)), POLICIES["time-slicing"])
    assert decision.mutated["spec"]["containers"][0]["args"] == written
    assert decision.warnings == [
        MAPPED["time-slicing"],
        f'gpu-admission: container "srv": kept {spelling} as set (policy suggests 0.2437)',
    ]
    assert decision.verdict == "allow"


def test_a_flag_in_the_command_is_read_there_and_nothing_is_added():
    command = ["vllm", "serve", "m", "--gpu-memory-utilization", "0.2437"]
    decision = run(pod(server("vllm serve", command=command)), POLICIES["time-slicing"])
    body = decision.mutated["spec"]["containers"][0]
    assert (body["command"], body.get("args")) == (command, None)
    assert decision.warnings == [MAPPED["time-slicing"]]


VLLM_LINE = (
    "container \"srv\": --gpu-memory-utilization 0.9 lets vLLM take 0.9 of the GPU's memory, but this container's "
    'share is 1/4 (time-slicing, policy "team"): write --gpu-memory-utilization=0.2437 instead, or remove it and '
    "the webhook adds it"
)
LINES = {
    "vllm image": VLLM_LINE,
    "sglang": (
        'container "srv": --mem-fraction-static 0.9 lets SGLang take 0.9 of the GPU\'s memory for its weights and KV '
        'cache, but this container\'s share is 1/4 (time-slicing, policy "team"): write --mem-fraction-static=0.2437 '
        "instead, or remove it and the webhook adds it"
    ),
    "trtllm": (
        'container "srv": --kv_cache_free_gpu_memory_fraction 0.9 lets TensorRT-LLM take 0.9 of the GPU\'s free '
        'memory for its KV cache, but this container\'s share is 1/4 (time-slicing, policy "team"): write '
        "--kv_cache_free_gpu_memory_fraction=0.2437 instead, or remove it and the webhook adds it"
    ),
}
FLAGS = {"vllm image": "--gpu-memory-utilization", "sglang": "--mem-fraction-static",
         "trtllm": "--kv_cache_free_gpu_memory_fraction"}  # fmt: skip


@pytest.mark.parametrize("start", list(LINES))
@pytest.mark.parametrize("form", ["separate", "joined"])
def test_a_flag_above_the_share_is_denied_under_enforce_with_the_argument_to_write(start, form):
    flag = FLAGS[start]
    tail = [flag, "0.9"] if form == "separate" else [f"{flag}=0.9"]
    args = (STARTS[start].get("args") or []) + tail
    decision = run(pod(server(start, args=args)), POLICIES["time-slicing"])
    assert decision.verdict == "deny"
    assert decision.violations == [LINES[start]]
    assert decision.mutated["spec"]["containers"][0]["args"] == args  # left as written: the line says what to do


def test_under_warn_the_flag_above_the_share_is_a_warning():
    warn = policy(sharing=Sharing(mode=Mode.TIME_SLICING, replicas=4), gpu=H100, enforcement=Enforcement.WARN)
    decision = run(pod(server("vllm image", args=["--model", "m", "--gpu-memory-utilization", "0.9"])), warn)
    assert (decision.allowed, decision.verdict) == (True, "warn")
    assert decision.violations == [VLLM_LINE]
    assert decision.warnings[-1] == (
        'gpu-admission: container "srv": 0.9 of the GPU is over the 1/4 share; write --gpu-memory-utilization=0.2437'
    )


def test_under_mps_a_free_memory_fraction_is_not_judged_the_mps_server_caps_it():
    args = ["--model-path", "m", "--mem-fraction-static", "0.9"]
    decision = run(pod(server("sglang", args=args)), POLICIES["mps"])
    assert decision.verdict == "allow"
    assert decision.mutated["spec"]["containers"][0]["args"] == args


def test_a_converted_fraction_gets_its_own_flag_and_is_judged_against_it():
    fractional = policy(sharing=Sharing(mode=Mode.TIME_SLICING, replicas=4), gpu=H100, fractional=Fractional.SHARED)
    decision = run(pod(server("vllm image", limits={"nvidia.com/gpu": "0.125"})), fractional)
    body = decision.mutated["spec"]["containers"][0]
    assert body["args"] == ["--model", "Qwen/Qwen2.5-7B-Instruct", "--gpu-memory-utilization=0.1187"]
    assert env_lines(body) == ["GPU_ADMISSION_MEMORY_FRACTION=0.125"]  # the record, not a framework variable
    assert decision.warnings[1:] == [
        'gpu-admission: container "srv": added --gpu-memory-utilization=0.1187 for GPU fraction 0.125 (vLLM)'
    ]
    over = run(
        pod(server("vllm image", limits={"nvidia.com/gpu": "0.125"}, args=["--gpu-memory-utilization", "0.2"])),
        fractional,
    )
    assert over.violations == [
        "container \"srv\": --gpu-memory-utilization 0.2 lets vLLM take 0.2 of the GPU's memory, but this container's "
        'share is 0.125 (time-slicing, policy "team"): write --gpu-memory-utilization=0.1187 instead, or remove it '
        "and the webhook adds it"
    ]


@pytest.mark.parametrize(
    "body",
    [
        {"image": "vllm/vllm-openai:v0.9.1", "command": ["/bin/sh", "-c", "vllm serve m"]},  # a script: not parsed
        {"image": "python:3.12", "command": ["python3", "serve.py", "-m", "vllm.entrypoints.openai.api_server"]},
        {"image": "python:3.12", "command": ["vllm", "bench", "m"]},
        {"image": "nvcr.io/nvidia/tensorrt-llm/release:1.0.0", "command": ["trtllm-serve", "disaggregated", "-c", "x"]},
        {"image": "registry.example/vllm-openai-tools:1", "args": ["--model", "m"]},
        {"image": "vllm/vllm-openai:v0.9.1", "args": "--model m"},  # not a list: validation of the API server's
    ],
)
def test_what_is_not_an_engine_server_is_not_one(body):
    assert engines.detect(body) is None


def test_the_patch_appends_one_argument_or_adds_args_whole():
    with_args = run(pod(server("vllm image")), POLICIES["time-slicing"])
    assert {"op": "add", "path": "/spec/containers/0/args/-", "value": VLLM_ARG} in with_args.patch
    without = run(pod(server("trtllm")), POLICIES["time-slicing"])
    assert {"op": "add", "path": "/spec/containers/0/args", "value": [TRTLLM_ARG]} in without.patch


def test_a_converted_fraction_with_only_the_mps_limits_is_judged_without_a_crash():
    """The policy's own hints judged against a converted fraction's smaller share: the MPS limits are no memory
    variable (an MPS policy with `frameworkEnv: []` and `memoryFraction` used to fail the review)."""
    mps = policy(sharing=Sharing(mode=Mode.MPS, replicas=2), gpu=H100, fractional=Fractional.SHARED,
                 memory_fraction=Fraction(1, 10), framework_env=())  # fmt: skip
    decision = run(pod(container("app", requests={"nvidia.com/gpu": "250m"})), mps)
    assert (decision.verdict, decision.violations) == ("allow", [])
    assert env_lines(decision.mutated["spec"]["containers"][0]) == [
        "GPU_ADMISSION_MEMORY_FRACTION=0.25",
        f"{MPS_MEMORY_LIMIT}=0=8155M",
        f"{MPS_THREAD_PERCENTAGE}=10",
    ]


# --- docs/rules.md's table is what the code injects ------------------------------------------------------------

TABLE_HEADING = "### What each framework and engine gets, per sharing mode"
MODES = ("time-slicing", "mps", "mig")
ENGINE_ROWS = {"vllm": "vllm image", "sglang": "sglang", "trtllm": "trtllm"}
MPS_NAMES = (MPS_MEMORY_LIMIT, MPS_THREAD_PERCENTAGE)


def docs_table() -> dict[str, dict[str, list[str]]]:
    """The table under TABLE_HEADING: row -> mode -> the values in its cell ([] for "nothing")."""
    text = (ROOT / "docs" / "rules.md").read_text(encoding="utf-8")
    section = text.split(TABLE_HEADING, 1)[1]
    rows: dict[str, dict[str, list[str]]] = {}
    lines: list[str] = []
    for line in section.splitlines():  # the first table after the heading
        if line.startswith("|"):
            lines.append(line)
        elif lines:
            break
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    for line in lines[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        name = re.findall(r"`([^`]+)`", cells[0])[0]  # `pytorch` (opt-in): pytorch
        rows[name] = {mode: re.findall(r"`([^`]+)`", cells[header.index(mode)]) for mode in MODES}
        for mode in MODES:
            cell = cells[header.index(mode)]
            assert rows[name][mode] or cell == "nothing", f"{name} {mode}: {cell!r}"
    return rows


def injected(row: str, mode: str) -> list[str]:
    """What the code gives a container holding `nvidia.com/gpu: 1` (one replica) for a table row."""
    pol = POLICIES[mode]
    if row in ENGINE_ROWS:
        written = server(ENGINE_ROWS[row])
        body = run(pod(written), pol).mutated["spec"]["containers"][0]
        appended = (body.get("args") or [])[len(written.get("args") or []) :]
        return appended + [line for line in env_lines(body) if not line.startswith(MPS_NAMES)]
    framework = row
    if framework == "mps":  # every shared container under MPS: the MPS limits
        body = run(pod(server("trtllm", command=["app"])), pol).mutated["spec"]["containers"][0]
        return [line for line in env_lines(body) if line.startswith(MPS_NAMES)]
    with_env = policy(sharing=pol.sharing, gpu=H100, framework_env=(framework,))
    body = run(pod(server("trtllm", command=["app"])), with_env).mutated["spec"]["containers"][0]
    return [line for line in env_lines(body) if not line.startswith(MPS_NAMES)]


def test_the_docs_framework_table_is_what_the_code_injects():
    table = docs_table()
    assert set(table) == {*ENGINE_ROWS, "jax", "tensorflow", "cupy", "tgi", "generic", "pytorch", "mps"}
    for row, cells in table.items():
        for mode in MODES:
            assert cells[mode] == injected(row, mode), f"docs/rules.md: {row} under {mode}"


# --- Through the real server -----------------------------------------------------------------------------------


def deployment(namespace: str, args: list[str]) -> dict[str, Any]:
    body = {"name": "vllm", "image": "vllm/vllm-openai:v0.9.1", "args": args,
            "resources": {"limits": {"nvidia.com/gpu": 1}}}  # fmt: skip
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "chat", "namespace": namespace},
        "spec": {"replicas": 1, "template": {"metadata": {"labels": {"app": "c"}}, "spec": {"containers": [body]}}},
    }


@pytest.fixture(scope="module")
def engines_server(start_server):
    return start_server(ROOT / "tests" / "fixtures" / "reapply")


def test_the_server_adds_the_flag_and_records_it(engines_server):
    sent = deployment("ts-a", ["--model", "m"])
    response = review(engines_server, "mutate", sent)
    assert response["allowed"] is True
    patch = json.loads(base64.b64decode(response["patch"]))
    stored = evanphx.apply(sent, patch)
    body = stored["spec"]["template"]["spec"]["containers"][0]
    # The policy names no GPU model: the CUDA context's headroom is 2% of the GPU.
    assert body["args"] == ["--model", "m", "--gpu-memory-utilization=0.23"]
    assert "env" not in body  # no variable that vLLM would ignore
    record = json.loads(stored["metadata"]["annotations"]["gpu-admission.io/requested"])
    assert record["containers/vllm"]["a"] == ["--gpu-memory-utilization=0.23"]
    assert response["warnings"][0] == (
        'gpu-admission: container "vllm": added --gpu-memory-utilization=0.23 for GPU fraction 0.25 (vLLM)'
    )  # (then the node affinity the policy steers with)
    assert review(engines_server, "validate", stored)["allowed"] is True


def test_the_server_denies_a_flag_above_the_share_with_the_argument_to_write(engines_server):
    sent = deployment("mps-a", ["--model", "m", "--gpu-memory-utilization", "0.9"])
    response = review(engines_server, "validate", sent)
    assert response["allowed"] is False
    assert response["status"]["message"] == (
        'container "vllm": --gpu-memory-utilization 0.9 lets vLLM take 0.9 of the GPU\'s memory, but this '
        'container\'s share is 1/8 (mps, policy "renamed-mps"): write --gpu-memory-utilization=0.1187 instead, or '
        "remove it and the webhook adds it"
    )
