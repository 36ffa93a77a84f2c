"""The PolicySet the server serves, and its reload when the policy directory changes.

A review reads `store.current` once and uses that set throughout, and a reload replaces it with one
attribute assignment, so a review sees the old set or the new one, never a mix. A change is noticed by
fingerprint (name, device, inode, mtime and size of every entry, following symlinks), which also catches a
Kubernetes ConfigMap update: the kubelet writes a new `..<timestamp>` directory and swaps the `..data`
symlink, so every file the entries resolve to is a new inode. A broken change is rejected whole: the last
good set stays, the problems are logged with file and field, and readiness is unaffected.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from collections.abc import Callable
from pathlib import Path

from webhook.admission.policy.loader import POLICY_SUFFIXES
from webhook.admission.policy.model import PolicySet
from webhook.server import metrics
from webhook.server.logs import LOGGER, log

_log = logging.getLogger(f"{LOGGER}.policies")

Fingerprint = tuple[tuple[str, int, int, int, int], ...]
Loader = Callable[[Path], PolicySet]


def fingerprint(directory: Path) -> Fingerprint:
    """What the loader would read, cheaply: one `stat` per policy file (dot entries are the kubelet's)."""
    entries = []
    try:
        with os.scandir(directory) as it:
            for entry in it:
                if entry.name.startswith(".") or not entry.name.endswith(POLICY_SUFFIXES):
                    continue
                try:
                    st = os.stat(entry.path)
                except OSError:  # a dangling link, mid-swap
                    entries.append((entry.name, -1, -1, -1, -1))
                    continue
                entries.append((entry.name, st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size))
    except OSError:
        return (("", -1, -1, -1, -1),)
    entries.sort()
    return tuple(entries)


def _default_loader(directory: Path) -> PolicySet:
    from webhook.admission.policy.loader import load_policies

    return load_policies(directory)


def _problems(exc: Exception) -> list[str]:
    problems = getattr(exc, "problems", None)
    if problems:
        return [str(p) for p in problems]
    return [f"{type(exc).__name__}: {exc}"]


class PolicyStore:
    """Holds the current PolicySet; `check()` reloads it when the directory changed."""

    def __init__(self, policies: PolicySet, directory: Path | None = None, loader: Loader | None = None) -> None:
        self.current = policies
        self.directory = directory
        self._loader = loader or _default_loader
        self._fingerprint = fingerprint(directory) if directory is not None else None
        self._failed: Fingerprint | None = None
        self.loaded_at = dt.datetime.now(dt.UTC)
        self.last_error: list[str] | None = None

    @classmethod
    def from_directory(cls, directory: Path, loader: Loader | None = None) -> PolicyStore:
        """Load the directory; the loader's PolicyLoadError propagates (startup fails on it)."""
        loader = loader or _default_loader
        before = fingerprint(directory)
        policies = loader(directory)
        store = cls(policies, directory, loader)
        store._fingerprint = before  # what was read: a change during the load is picked up by check()
        return store

    def replace(self, policies: PolicySet) -> None:
        """Serve `policies` from now on (the cluster source's watch, policy_watch.py): one assignment."""
        self.current = policies
        self.loaded_at = dt.datetime.now(dt.UTC)

    def check(self, *, quiet: bool = False) -> bool | None:
        """Reload if the directory changed: True reloaded, False rejected, None nothing to do.

        `quiet`: neither logged nor counted (gunicorn's arbiter keeping its copy fresh; its workers report).
        """
        if self.directory is None:
            return None
        current = fingerprint(self.directory)
        if current == self._fingerprint:
            if self._failed is not None:  # back to what is served (a directory moved away and back): no rejection
                self._failed = self.last_error = None
                if not quiet:
                    log(
                        _log,
                        logging.INFO,
                        "policy directory back to the policies being served",
                        event="policy-reload",
                        result="unchanged",
                        directory=str(self.directory),
                    )
            return None
        if current == self._failed:
            return None
        try:
            policies = self._loader(self.directory)
        except Exception as exc:  # PolicyLoadError, or the directory vanished: keep serving the last good set
            if fingerprint(self.directory) != current:
                return None  # still being written: judge it when it settles
            self._failed = current
            self.last_error = _problems(exc)
            if not quiet:
                metrics.count_reload(ok=False)
                log(
                    _log,
                    logging.ERROR,
                    f"policy reload rejected, still serving the {len(self.current.policies)} policies loaded at "
                    f"{self.loaded_at:%Y-%m-%d %H:%M:%S} UTC: " + "; ".join(self.last_error),
                    event="policy-reload",
                    result="error",
                    directory=str(self.directory),
                    problems=self.last_error,
                )
            return False
        if fingerprint(self.directory) != current:
            return None  # changed while loading: load again at the next check
        self.current = policies  # the one assignment a review can observe
        self._fingerprint, self._failed, self.last_error = current, None, None
        self.loaded_at = dt.datetime.now(dt.UTC)
        if not quiet:
            metrics.count_reload(ok=True)
            log(
                _log,
                logging.INFO,
                f"policies reloaded: {len(policies.policies)} policies",
                event="policy-reload",
                result="ok",
                directory=str(self.directory),
                policies=[p.name for p in policies.policies][:50],
            )
        return True
