"""`gpu-webhook`: one argparse tree; each subcommand module registers itself and imports heavy code lazily.

Start-up matters (`check` in CI pipelines): only argparse and the command modules load at import time.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from webhook import __version__
from webhook.cli import audit_cmd, certs_cmd, check_cmd, policy_cmd, serve_cmd
from webhook.cli.options import add_examples

COMMANDS = (serve_cmd, check_cmd, audit_cmd, policy_cmd, certs_cmd)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu-webhook",
        description="Kubernetes admission webhook that makes GPU requests correct, fair and safe.",
    )
    parser.add_argument("--version", action="version", version=f"gpu-webhook {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMANDS:
        module.register(subparsers)
    add_examples(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `gpu-webhook check ... | head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
