"""Options that several commands share, so each rule is stated once."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from webhook.admission.customresources import KindTable

POLICIES_ENV = "GPU_ADMISSION_POLICIES"
DEFAULT_POLICIES = "policies"
POLICIES_HELP = f"policy directory (default: ${POLICIES_ENV}, else ./{DEFAULT_POLICIES})"
FROM_CLUSTER_HELP = (
    "instead of a directory, the cluster's GPUPolicy objects (kubeconfig): the set the webhook serves from "
    "them; an object it does not serve is named on stderr and left out"
)


def add_policy_source_arguments(
    parser: argparse.ArgumentParser, policies_help: str = POLICIES_HELP, from_cluster_help: str = FROM_CLUSTER_HELP
) -> None:
    """`--policies DIR` or `--from-cluster`, one of them: where every command that applies policies reads them
    (common.read_policies)."""
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--policies", metavar="DIR", default=None, help=policies_help)
    source.add_argument("--from-cluster", action="store_true", help=from_cluster_help)


def policy_directory(given: str | None) -> str:
    """`--policies DIR`, else $GPU_ADMISSION_POLICIES, else ./policies."""
    return given or os.environ.get(POLICIES_ENV) or DEFAULT_POLICIES


def missing_policy_directory(given: str | None) -> str | None:
    """The one-line complaint when the chosen policy directory does not exist, else None.

    A missing directory is an error, never a silent fall-back to the built-in defaults: a CI job must not pass
    because of a typo.
    """
    chosen = policy_directory(given)
    if os.path.isdir(chosen):
        return None
    hint = "" if given else f" (pass --policies DIR or set {POLICIES_ENV})"
    return f"policy directory {chosen} not found{hint}"


# The MutatingAdmissionPolicy versions `policy render native` writes (v1beta1: Kubernetes 1.34 and 1.35).
MAP_API_VERSIONS = ("v1", "v1beta1")

# One example per command, shown at the end of its --help (tests/test_cli_help.py runs each through the parser).
EXAMPLES = {
    "": "gpu-webhook check examples/ --policies examples/policies",
    "serve": "gpu-webhook serve --dev --policies policies",
    "check": "gpu-webhook check examples/pod-fractional.yaml --policies policies -n team-a --diff",
    "audit": "gpu-webhook audit -A --policies policies -o table",
    "policy": "gpu-webhook policy lint --policies policies",
    "policy lint": "gpu-webhook policy lint --policies policies",
    "policy explain": "gpu-webhook policy explain notebook-1 team-a --policies examples/policies",
    "policy render": "gpu-webhook policy render kueue --policies policies --gpus 8",
    "policy export": "gpu-webhook policy export --out policies --context prod",
    "policy compare": "gpu-webhook policy compare --policies policies --context prod",
    "policy schema": "gpu-webhook policy schema > schema/gpu-policy.schema.json",
    "policy crd": "gpu-webhook policy crd > gpupolicies.yaml",
    "certs": "gpu-webhook certs generate --service gpu-admission --namespace gpu-admission --out certs/prod",
    "certs generate": "gpu-webhook certs generate --service gpu-admission --namespace gpu-admission --out certs/prod",
    "certs renew": "gpu-webhook certs renew --dir certs/prod --before 30d",
    "certs inspect": "gpu-webhook certs inspect certs/prod/tls.crt",
    "certs ca-bundle": "gpu-webhook certs ca-bundle certs/prod",
}


class _ExampleFormatter(argparse.HelpFormatter):
    """argparse's formatter, but an example stays on one line, as it would be pasted into a shell."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("example: "):
            return indent + text
        return super()._fill_text(text, width, indent)


def add_examples(parser: argparse.ArgumentParser, command: str = "") -> None:
    """Give `parser` and every subcommand under it its example, as the last line of --help."""
    parser.epilog = f"example: {EXAMPLES[command]}"
    if parser.formatter_class is argparse.HelpFormatter:
        parser.formatter_class = _ExampleFormatter
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, subparser in action.choices.items():
                add_examples(subparser, f"{command} {name}".strip())


def kubeconfig_without_cluster(args: argparse.Namespace) -> str | None:
    """The complaint when `--kubeconfig` or `--context` is given to a command that reads no cluster without
    `--cluster` or `--from-cluster` (those of the two it has), else None."""
    flags = [flag for flag in ("cluster", "from_cluster") if hasattr(args, flag)]
    if (args.kubeconfig or args.context) and not any(getattr(args, flag) for flag in flags):
        return f"--kubeconfig and --context only apply with {' or '.join('--' + f.replace('_', '-') for f in flags)}"
    return None


def add_kubeconfig_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup, when: str = "") -> None:
    """`--kubeconfig FILE` and `--context NAME`, as every command that reads a cluster takes them (`when`: the
    flag they go with, for the help text)."""
    prefix = f"with {when}: " if when else ""
    parser.add_argument(
        "--kubeconfig", metavar="FILE", help=f"{prefix}kubeconfig file (default: $KUBECONFIG, ~/.kube/config)"
    )
    parser.add_argument("--context", help=f"{prefix}kubeconfig context (default: the current context)")


CUSTOM_RESOURCES_HELP = (
    "a CustomResourceTemplates file naming more custom resource kinds and where their pod templates live "
    "(docs/custom-resources.md); the built-in kinds are always read"
)


def add_custom_resources_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--custom-resources", metavar="FILE", default=None, help=CUSTOM_RESOURCES_HELP)


def custom_kind_table(path: str | None) -> KindTable:
    """The kinds judged by their templates: the built-in table, and the admin's from `--custom-resources FILE`;
    a file that cannot be used is a one-line ValueError naming it."""
    from webhook.admission.customresources import BUILTIN, BUILTIN_KINDS, KindTable, parse_kinds

    if not path:
        return BUILTIN
    import yaml

    try:
        with open(path, encoding="utf-8") as stream:
            document = yaml.safe_load(stream)
    except OSError as exc:
        raise ValueError(f"--custom-resources {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or exc
        raise ValueError(f"--custom-resources {path}{line}: not YAML ({problem})") from None
    return KindTable.of(BUILTIN_KINDS, parse_kinds(document, path))
