"""`python -m bench [NAME ...]`: run the named benchmarks (all by default); exit 1 if a target is missed."""

from __future__ import annotations

import importlib
import sys

BENCHMARKS = [
    "engine",
    "instructions",
    "server",
    "memory",
    "cli",
    "cluster",
    "conns",
    "dra",
    "budget",
    "ledger",
    "budget_scale",
    "native",
]


def main(argv: list[str]) -> int:
    names = argv or BENCHMARKS
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}", file=sys.stderr)
        return 2
    ok = True
    for name in names:
        print(f"\n== {name}")
        ok = importlib.import_module(f"bench.{name}").main() and ok
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
