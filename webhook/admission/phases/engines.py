"""Inference engines that read no memory variable: their memory flag, kept within the container's share.

vLLM, SGLang and TensorRT-LLM size their memory from a command-line flag, never from the variables in
envhints.py, so a vLLM server in a 4-way time-sliced namespace takes 0.9 of the GPU whatever the environment
says. Mutation adds the flag where the container's command line lacks it (the analogue of a variable), and
validation judges a flag the user wrote: above the container's share it is a violation with the exact argument
to write instead; within the share it stays as written. What each engine does with its flag, from its source:

- vLLM `--gpu-memory-utilization` (default 0.9): the memory it asks for is that fraction of the device's *total*
  memory, taken after its CUDA context exists, and it refuses to start when less than that is free
  (vllm/v1/worker/gpu_worker.py, init_device: `requested_memory = total_memory * gpu_memory_utilization`).
  So it gets the share less the CUDA context's headroom (as JAX does), under time-slicing and MPS alike.
- SGLang `--mem-fraction-static`: its KV cache is `free - total * (1 - f)` after the weights are loaded
  (python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py, profile_max_num_token): everything on the
  GPU, its neighbours' memory included, counts against `f` of the total. Under time-slicing `f` at the share
  less the headroom keeps its weights and KV cache within the share. Under MPS the free memory is the client's
  capped share, so any `f` below 1 - share leaves no KV cache; the MPS server caps the memory anyway, so the
  flag is neither added nor judged there.
- TensorRT-LLM `--kv_cache_free_gpu_memory_fraction` (also `--free_gpu_memory_fraction`, default 0.9): a fraction
  of the memory *free* after the weights and buffers (tensorrt_llm/commands/serve.py). Under time-slicing the
  share less the headroom; under MPS, where free memory is the capped share, a fraction of it is already within
  the share, so the flag is neither added nor judged.
Under MIG a container's device is its slice: every engine's fraction is of the slice, so nothing is added.

Engines are recognised from the container's command line (the image's entrypoint is not in the pod: a pod of
the vLLM OpenAI image carries its arguments alone, so that image is recognised by name). A command run through
a shell (`sh -c "vllm serve ..."`) is not parsed: the webhook cannot add an argument to a script.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from webhook.admission.base.quantity import format_fraction
from webhook.admission.phases.envhints import jax_fraction
from webhook.admission.policy.model import Policy
from webhook.admission.sharing.registry import backend_of


@dataclass(frozen=True, slots=True)
class Engine:
    name: str  # for metrics and the docs' table
    title: str  # for messages
    flag: str  # the flag as the webhook writes it
    spellings: tuple[str, ...]  # every name of the flag that the engine's parser accepts, `flag` first
    reads: str  # what the value is a fraction of, for messages


VLLM = Engine(
    "vllm", "vLLM", "--gpu-memory-utilization", ("--gpu-memory-utilization",),
    "of the GPU's memory",
)  # fmt: skip
SGLANG = Engine(
    "sglang", "SGLang", "--mem-fraction-static", ("--mem-fraction-static",),
    "of the GPU's memory for its weights and KV cache",
)  # fmt: skip
TRTLLM = Engine(
    "trtllm", "TensorRT-LLM", "--kv_cache_free_gpu_memory_fraction",
    ("--kv_cache_free_gpu_memory_fraction", "--free_gpu_memory_fraction"),
    "of the GPU's free memory for its KV cache",
)  # fmt: skip
ENGINES = (VLLM, SGLANG, TRTLLM)

# `python -m <module>` entry points of the servers.
MODULES = {"vllm.entrypoints.openai.api_server": VLLM, "sglang.launch_server": SGLANG}
# The servers' own commands: `vllm serve` (vllm's other subcommands are no server), and trtllm-serve.
VLLM_COMMAND, VLLM_SUBCOMMAND = "vllm", "serve"
TRTLLM_COMMAND = "trtllm-serve"
# trtllm-serve runs `serve` unless its first argument names another of its commands (tensorrt_llm/commands/
# serve.py, DefaultGroup); those others take their settings from a config file, not this flag.
TRTLLM_OTHER_COMMANDS = frozenset({"grpc", "disaggregated", "disaggregated_mpi_worker", "mm_embedding_serve"})
# Images whose entrypoint is the engine's server, so that their pods carry arguments alone: the vLLM OpenAI
# image runs `vllm serve` (earlier `python3 -m vllm.entrypoints.openai.api_server`; vllm docker/Dockerfile).
IMAGE_ENTRYPOINTS = {"vllm-openai": VLLM}
PYTHONS = ("python", "python3")
PYTHON_VERSIONED = "python3."  # python3.11 and the like


def _strings(value: Any) -> list[str] | None:
    """A command or args list of strings; [] when absent, None when malformed (then nothing is judged)."""
    if value is None:
        return []
    if type(value) is not list or not all(type(item) is str for item in value):
        return None
    return value


def _basename(token: str) -> str:
    return token.rsplit("/", 1)[-1]


def _image_repository(image: Any) -> str:
    """The last path part of an image reference, without tag or digest: `vllm/vllm-openai:v0.9.1` -> vllm-openai."""
    if type(image) is not str:
        return ""
    name = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return name.split(":", 1)[0]


# What a server's command line can start with (a basename): anything else is no engine, decided without parsing.
LEADS = frozenset({VLLM_COMMAND, TRTLLM_COMMAND, *PYTHONS})


def detect(body: dict[str, Any]) -> Engine | None:
    """The engine a container runs, from its command line (or its image, where the image's entrypoint is the
    engine and the pod sets no command).

    This runs for every container that holds a shared GPU, in mutation and validation: most are no engine, and
    are told so from the first word of their command line alone."""
    command = body.get("command")
    if command:
        first = command[0] if type(command) is list else None
    else:
        image = body.get("image")
        if type(image) is str and any(name in image for name in IMAGE_ENTRYPOINTS):
            return _detect(body)
        args = body.get("args")
        first = args[0] if type(args) is list and args else None
    if type(first) is not str:
        return None
    if first in LEADS or (("/" in first or first.startswith(PYTHON_VERSIONED)) and _lead(first)):
        return _detect(body)
    return None


def _lead(first: str) -> bool:
    lead = first.rsplit("/", 1)[-1]
    return lead in LEADS or lead.startswith(PYTHON_VERSIONED)


def _detect(body: dict[str, Any]) -> Engine | None:
    command, args = _strings(body.get("command")), _strings(body.get("args"))
    if command is None or args is None:
        return None
    if not command:
        engine = IMAGE_ENTRYPOINTS.get(_image_repository(body.get("image")))
        if engine is not None:
            return engine
    argv = command + args
    if not argv:
        return None
    first = _basename(argv[0])
    if first == VLLM_COMMAND and len(argv) > 1 and argv[1] == VLLM_SUBCOMMAND:
        return VLLM
    if first == TRTLLM_COMMAND:
        return TRTLLM if len(argv) == 1 or argv[1] not in TRTLLM_OTHER_COMMANDS else None
    if first in PYTHONS or first.startswith(PYTHON_VERSIONED):
        for i, token in enumerate(argv[1:-1], start=1):
            if token == "-m":
                return MODULES.get(argv[i + 1])
            if not token.startswith("-"):
                return None  # a script, not a module
    return None


@dataclass(frozen=True, slots=True)
class Found:
    """The flag as the container's command line has it (the last occurrence: the one the parser keeps)."""

    spelling: str
    text: str | None  # the value as written; None when the flag ends the line without one
    value: Fraction | None  # the value, when it is a non-negative decimal


def find(body: dict[str, Any], engine: Engine) -> Found | None:
    """The engine's memory flag in `command` + `args`, in either form (`--flag=v`, `--flag v`)."""
    argv = (_strings(body.get("command")) or []) + (_strings(body.get("args")) or [])
    found: Found | None = None
    for i, token in enumerate(argv):
        for spelling in engine.spellings:
            if token == spelling:
                text = argv[i + 1] if i + 1 < len(argv) else None
            elif token.startswith(spelling + "="):
                text = token[len(spelling) + 1 :]
            else:
                continue
            found = Found(spelling, text, _decimal(text) if text is not None else None)
    return found


def _decimal(text: str) -> Fraction | None:
    stripped = text.strip()
    if not stripped or len(stripped) > 32:
        return None
    try:
        number = Fraction(stripped)
    except (ValueError, ZeroDivisionError):
        return None
    return number if number >= 0 else None


def value_for(engine: Engine, share: Fraction, gpu_memory_mib: int | None) -> Fraction:
    """The flag's value for a container that may use `share` of a GPU: the share less the CUDA context's
    headroom (JAX_CONTEXT_HEADROOM_MIB of the GPU, 2% when its memory is unknown), which lives outside what
    each engine counts."""
    return jax_fraction(share, gpu_memory_mib)


def argument(engine: Engine, share: Fraction, gpu_memory_mib: int | None) -> str:
    """The one argument the webhook appends, `--flag=value`: one token, so that it can go anywhere after the
    positional arguments (argparse and click read both forms)."""
    return f"{engine.flag}={format_fraction(value_for(engine, share, gpu_memory_mib))}"


def applies(engine: Engine, policy: Policy) -> bool:
    """Whether the engine's flag is added and judged under the policy's sharing (its backend says which)."""
    return engine.name in backend_of(policy).engine_flags()
