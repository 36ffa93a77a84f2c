"""`gpu-webhook certs`: create, renew and inspect the webhook's TLS certificates (certs/README.md).

The handlers import `webhook.certs` (and with it `cryptography`) only when they run, to keep start-up fast.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from webhook.certs import CertificateInfo

SECRET_NAME = "gpu-admission-tls"  # the Secret that manifests/ mounts


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "certs",
        help="create, renew and inspect the webhook's TLS certificates",
        description="Create, renew and inspect the TLS certificates that the API server verifies "
        "(files ca.crt, ca.key, tls.crt, tls.key). See certs/README.md.",
    )
    parser.set_defaults(handler=lambda _args: _usage(parser))
    commands = parser.add_subparsers(dest="certs_command", metavar="SUBCOMMAND")

    generate = commands.add_parser(
        "generate",
        help="a new CA (10 years) and serving certificate (1 year) for a Service",
        description="Create an ECDSA P-256 CA (10 years) and a serving certificate (1 year) whose SANs are "
        "NAME, NAME.NS, NAME.NS.svc and NAME.NS.svc.cluster.local, plus any --dns and --ip.",
    )
    generate.add_argument("--service", required=True, metavar="NAME", help="the webhook's Service name")
    generate.add_argument("--namespace", required=True, metavar="NS", help="the Service's namespace")
    generate.add_argument(
        "--dns", action="append", default=[], metavar="NAME", help="an extra DNS name (repeatable; addresses: --ip)"
    )
    generate.add_argument(
        "--ip", action="append", default=[], metavar="ADDRESS", help="an extra IP address (repeatable)"
    )
    generate.add_argument("--out", required=True, type=Path, metavar="DIR", help="where to write the files")
    generate.add_argument("--force", action="store_true", help="replace an existing CA in DIR")
    generate.set_defaults(handler=run_generate)

    renew = commands.add_parser(
        "renew",
        help="reissue the serving certificate from the same CA when it is about to expire",
        description="Reissue tls.crt and tls.key from the CA in DIR when tls.crt expires within the "
        "window; otherwise say when it will. The CA, and so caBundle, stays the same.",
    )
    renew.add_argument("--dir", required=True, type=Path, metavar="DIR", help="the certificate directory")
    renew.add_argument(
        "--before",
        default="30d",
        metavar="DURATION",
        help="renew when expiry is this close: 30d, 12h, 1d12h (default: 30d)",
    )
    renew.set_defaults(handler=run_renew)

    inspect = commands.add_parser(
        "inspect",
        help="show a certificate's subject, SANs, issuer, expiry and days left",
        description="Show every certificate in a PEM file: subject, SANs, issuer, validity and days left.",
    )
    inspect.add_argument("file", type=Path, metavar="FILE", help="a PEM certificate, such as tls.crt")
    inspect.set_defaults(handler=run_inspect)

    bundle = commands.add_parser(
        "ca-bundle",
        help="print the base64 CA for the webhook configurations' caBundle",
        description="Print the certificates of DIR/ca.crt (or FILE), never a key beside them, base64-encoded on "
        "one line: the value of caBundle.",
    )
    bundle.add_argument("source", type=Path, metavar="DIR", help="the certificate directory, or a ca.crt")
    bundle.set_defaults(handler=run_ca_bundle)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _fail(command: str, message: object, code: int = 1) -> int:
    print(f"gpu-webhook certs {command}: error: {message}", file=sys.stderr)
    return code


def _namespace_of(dns_names: list[str]) -> str | None:
    """`NAME.NS.svc` among the SANs gives the namespace for the kubectl hint."""
    for name in dns_names:
        parts = name.split(".")
        if len(parts) == 3 and parts[2] == "svc":
            return parts[1]
    return None


def _secret_command(directory: Path, namespace: str | None, update: bool) -> str:
    """The command that puts the files into the Secret: paths quoted for a shell, so it can be pasted as it is."""
    cert, key = shlex.quote(f"--cert={directory / 'tls.crt'}"), shlex.quote(f"--key={directory / 'tls.key'}")
    command = f"kubectl -n {namespace or '<namespace>'} create secret tls {SECRET_NAME} {cert} {key}"
    return command + " --dry-run=client -o yaml | kubectl apply -f -" if update else command


def run_generate(args: argparse.Namespace) -> int:
    from webhook import certs

    try:
        paths = certs.generate_certs(
            args.out,
            service=args.service,
            namespace=args.namespace,
            dns_names=args.dns,
            ip_addresses=args.ip,
            force=args.force,
        )
        ca, tls = certs.inspect_certificates(paths.ca_cert)[0], certs.inspect_certificates(paths.tls_cert)[0]
    except certs.CertError as exc:
        return _fail("generate", exc)
    print(f"CA           {paths.ca_cert}  {ca.subject}, until {ca.not_after:%Y-%m-%d}")
    print(f"CA key       {paths.ca_key}  mode 0600: keep it safe, `certs renew` needs it")
    print(f"certificate  {paths.tls_cert}  until {tls.not_after:%Y-%m-%d}")
    print(f"             SANs: {', '.join(tls.sans)}")
    print(f"key          {paths.tls_key}  mode 0600")
    print()
    print("Next (certs/README.md):")
    print(f"  kubectl create namespace {args.namespace}   # if it does not exist yet")
    print(f"  {_secret_command(paths.directory, args.namespace, update=False)}")
    directory = shlex.quote(str(paths.directory))
    print(f"  gpu-webhook certs ca-bundle {directory}   # caBundle for the webhook configurations")
    return 0


def run_renew(args: argparse.Namespace) -> int:
    from webhook import certs

    try:
        before = certs.parse_duration(args.before)
    except certs.CertError as exc:
        return _fail("renew", f"--before: {exc}", code=2)
    try:
        result = certs.renew_serving_certificate(args.dir, before)
        info = certs.inspect_certificates(args.dir / "tls.crt")[0]
    except certs.CertError as exc:
        return _fail("renew", exc)
    tls_cert = args.dir / "tls.crt"
    if not result.renewed:
        print(
            f"{tls_cert} is valid until {_when(result.not_after)} ({info.days_left()} days left); "
            f"not renewed: renew reissues it from {_when(result.renew_from)} (--before {args.before})"
        )
        return 0
    dns = [san.removeprefix("DNS:") for san in info.sans if san.startswith("DNS:")]
    print(
        f"renewed {tls_cert} from {args.dir / 'ca.crt'}: valid until {_when(result.not_after)} "
        f"(was {_when(result.previous_not_after)}); the CA and caBundle are unchanged"
    )
    print("Update the Secret (the server picks the new files up within a minute, without a restart):")
    print(f"  {_secret_command(args.dir, _namespace_of(dns), update=True)}")
    return 0


def _when(moment: dt.datetime) -> str:
    return f"{moment:%Y-%m-%d %H:%M} UTC"


def run_inspect(args: argparse.Namespace) -> int:
    from webhook import certs

    try:
        infos = certs.inspect_certificates(args.file)
    except certs.CertError as exc:
        return _fail("inspect", exc)
    for index, info in enumerate(infos):
        if index:
            print()
        where = f" (certificate {index + 1} of {len(infos)})" if len(infos) > 1 else ""
        rows = [
            ("file", f"{args.file}{where}"),
            ("subject", info.subject),
            ("SANs", ", ".join(info.sans) or ("(none)" if info.is_ca else "(none: Go clients reject it)")),
            ("issuer", info.issuer),
            ("not before", _when(info.not_before)),
            ("not after", _when(info.not_after)),
            ("days left", _days_left(info)),
            ("CA", "yes" if info.is_ca else "no"),
            ("key usage", ", ".join(info.key_usage) or "(none)"),
            ("ext. usage", ", ".join(info.extended_key_usage) or "(none)"),
            ("key", info.key),
            ("sha256", info.sha256),
        ]
        for label, value in rows:
            print(f"{label + ':':<12}{value}")
    return 0


def _days_left(info: CertificateInfo) -> str:
    days = info.days_left()
    if days < 0:
        return f"none: expired on {_when(info.not_after)}"
    if days < 30 and not info.is_ca:
        return f"{days} (time to run `gpu-webhook certs renew`)"
    return str(days)


def run_ca_bundle(args: argparse.Namespace) -> int:
    from webhook import certs

    try:
        print(certs.ca_bundle(args.source))
    except certs.CertError as exc:
        return _fail("ca-bundle", exc)
    return 0
