"""`gpu-webhook serve`."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("serve", help="(not yet implemented)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    raise SystemExit("gpu-webhook serve: not implemented yet")
