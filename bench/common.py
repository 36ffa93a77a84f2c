"""Shared helpers: timing statistics, the machine's description, tables, and JSON results."""

from __future__ import annotations

import functools
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict[str, Any]:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
    }


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(fraction * (len(sorted_values) - 1))))
    return sorted_values[index]


def pin_to_one_core() -> int | None:
    """Run on one core (the benchmark's unit), the last one, away from the usual interrupt target."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    core = max(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})
    return core


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(c) for c in columns]] + [[_fmt(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = [title, "  ".join(c.ljust(w) for c, w in zip(cells[0], widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    for row in cells[1:]:
        lines.append(
            "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
        )
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def write_results(name: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {"benchmark": name, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": machine(),
               **payload}  # fmt: skip
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


def check(results: list[tuple[str, bool, str]]) -> bool:
    """Print each target as met or missed; True when all are met."""
    for target, met, detail in results:
        print(f"  [{'met' if met else 'MISSED'}] {target}: {detail}")
    sys.stdout.flush()
    return all(met for _, met, _ in results)


def callgrind_per_call(module: str, part: str, calls: int) -> float:
    """Instructions per call of `part`, counted by valgrind's callgrind: `python -m <module> --child <part> <calls>`
    must warm up, then make the calls inside one `functools.reduce`, the only function counted."""
    command = [
        "valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", "--collect-atstart=no",
        "--toggle-collect=functools_reduce", sys.executable, "-m", module, "--child", part, str(calls),
    ]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, check=False)
    found = re.search(r"Collected\s*:\s*(\d+)", run.stderr)
    if run.returncode != 0 or found is None:
        raise RuntimeError(f"callgrind failed for {part!r} (exit {run.returncode}): {run.stderr[-500:]}")
    return int(found.group(1)) / calls


def callgrind_or_none(module: str, part: str, calls: int) -> float | None:
    """`callgrind_per_call`, or None where valgrind is not installed (the caller times instead)."""
    if shutil.which("valgrind") is None:
        return None
    return callgrind_per_call(module, part, calls)


def callgrind_child(call: Callable[[], Any], calls: int) -> None:
    """The child side of `callgrind_per_call`: warm up, then `calls` calls inside the counted `functools.reduce`."""
    for _ in range(200):
        call()
    functools.reduce(lambda _, __: call(), range(calls), None)


def rss() -> int:
    """This process's resident memory (VmRSS) in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0
