"""Options that several commands share, so each rule is stated once."""

from __future__ import annotations

import os

POLICIES_ENV = "GPU_ADMISSION_POLICIES"
DEFAULT_POLICIES = "policies"
POLICIES_HELP = f"policy directory (default: ${POLICIES_ENV}, else ./{DEFAULT_POLICIES})"


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
