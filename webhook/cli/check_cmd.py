"""`gpu-webhook check`."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("check", help="(not yet implemented)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    raise SystemExit("gpu-webhook check: not implemented yet")
