"""TLS certificates for the webhook: a private CA and the serving certificate that the API server verifies.

The API server is a Go program, so crypto/x509's rules shape everything here: the host name is matched
against the subjectAltName only (no fallback to the CN), the serving certificate must carry the serverAuth
extended key usage, and its issuer must be a CA (basicConstraints CA:true). certs/README.md explains.

Files follow the `kubectl create secret tls` and cert-manager layout: ca.crt, ca.key, tls.crt, tls.key.
Every file is written through a temporary file and a rename, so the server's reloader never reads half a
file, and keys are created with mode 0600, so they are never readable by others, not even for a moment.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import fcntl
import ipaddress
import os
import re
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_VALIDITY = dt.timedelta(days=3650)
SERVING_VALIDITY = dt.timedelta(days=365)
RENEW_BEFORE = dt.timedelta(days=30)
# /readyz fails within 7 days of expiry, so a dev certificate that close to it is replaced, not reused.
DEV_MIN_REMAINING = dt.timedelta(days=7)
# notBefore is backdated so that a node whose clock runs a little behind accepts a fresh certificate.
CLOCK_SKEW = dt.timedelta(minutes=5)
DEV_DNS_NAMES = ("localhost",)
DEV_IP_ADDRESSES = ("127.0.0.1",)
KEY_MODE = 0o600
CERT_MODE = 0o644
# RFC 5280's upper bound for a commonName; the CN is informational only (Go never matches against it).
_MAX_CN = 64

_DNS_LABEL = r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"
_DNS_NAME = re.compile(rf"^(?:\*\.)?{_DNS_LABEL}(?:\.{_DNS_LABEL})*$", re.IGNORECASE)
_SERVICE_NAME = re.compile(r"^[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?$")  # RFC 1035 label, as Services require
_NAMESPACE_NAME = re.compile(rf"^{_DNS_LABEL}$")  # RFC 1123 label
_DURATION = re.compile(r"(\d+)([wdhms])")
_DURATION_UNITS = {"w": "weeks", "d": "days", "h": "hours", "m": "minutes", "s": "seconds"}

_EKU_NAMES = {
    ExtendedKeyUsageOID.SERVER_AUTH: "serverAuth",
    ExtendedKeyUsageOID.CLIENT_AUTH: "clientAuth",
    ExtendedKeyUsageOID.CODE_SIGNING: "codeSigning",
    ExtendedKeyUsageOID.EMAIL_PROTECTION: "emailProtection",
}

# KeyUsage attributes in RFC 5280 order (encipher_only/decipher_only only mean something with keyAgreement).
_KEY_USAGES = (
    ("digitalSignature", "digital_signature"),
    ("nonRepudiation", "content_commitment"),
    ("keyEncipherment", "key_encipherment"),
    ("dataEncipherment", "data_encipherment"),
    ("keyAgreement", "key_agreement"),
    ("keyCertSign", "key_cert_sign"),
    ("cRLSign", "crl_sign"),
)

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


class CertError(Exception):
    """A problem with a certificate file or request, in one line for people: what, where, what to do."""


@dataclass(frozen=True, slots=True)
class CertPaths:
    """The four files of one certificate directory."""

    ca_cert: Path
    ca_key: Path
    tls_cert: Path
    tls_key: Path

    @classmethod
    def in_dir(cls, directory: Path | str) -> CertPaths:
        d = Path(directory)
        return cls(d / "ca.crt", d / "ca.key", d / "tls.crt", d / "tls.key")

    @property
    def directory(self) -> Path:
        return self.tls_cert.parent


@dataclass(frozen=True, slots=True)
class RenewResult:
    """What `renew_serving_certificate` did, for the command's message."""

    renewed: bool
    not_after: dt.datetime  # the serving certificate's expiry after the call
    previous_not_after: dt.datetime
    renew_from: dt.datetime  # when the certificate in place enters the renewal window


@dataclass(frozen=True, slots=True)
class CertificateInfo:
    """What `certs inspect` shows of one certificate."""

    subject: str
    issuer: str
    sans: tuple[str, ...]
    not_before: dt.datetime
    not_after: dt.datetime
    is_ca: bool
    key_usage: tuple[str, ...]
    extended_key_usage: tuple[str, ...]
    key: str
    serial: str
    sha256: str

    def days_left(self, now: dt.datetime | None = None) -> int:
        """Whole days until expiry, rounded down; negative once expired."""
        return (self.not_after - (now or utcnow())) // dt.timedelta(days=1)


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


# ---------------------------------------------------------------------------------------------------- names


def service_dns_names(service: str, namespace: str) -> list[str]:
    """The names a client inside the cluster may use for a Service; the API server uses `NAME.NS.svc`."""
    if not _SERVICE_NAME.match(service):
        raise CertError(
            f"service name {service!r}: a Service name is a lowercase DNS label (a-z, 0-9 and '-', "
            "starting with a letter, at most 63 characters)"
        )
    if not _NAMESPACE_NAME.match(namespace):
        raise CertError(
            f"namespace {namespace!r}: a namespace name is a lowercase DNS label (a-z, 0-9 and '-', "
            "at most 63 characters)"
        )
    svc = f"{service}.{namespace}.svc"
    return [service, f"{service}.{namespace}", svc, f"{svc}.cluster.local"]


def _check_dns_name(name: str) -> str:
    if len(name) > 253 or not _DNS_NAME.match(name):
        raise CertError(
            f"DNS name {name!r}: expected dot-separated labels of letters, digits and '-' "
            "(at most 63 characters each, 253 in all), optionally starting with '*.'"
        )
    return name.lower()


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """`text` as an IP address, or None when it is not one."""
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _check_ip(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    parsed = _address(address)
    if parsed is None:
        raise CertError(f"IP address {address!r}: not an IPv4 or IPv6 address, such as 10.0.0.7 or fd00::7")
    return parsed


def _dedupe(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _common_name(text: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text[:_MAX_CN])])


MAX_DURATION = dt.timedelta(days=36500)


def parse_duration(text: str) -> dt.timedelta:
    """`30d`, `12h`, `90m`, `1d12h`: a number and a unit (w, d, h, m, s), repeated."""
    cleaned = text.strip().lower()
    if not cleaned or _DURATION.sub("", cleaned):
        raise CertError(f"duration {text!r}: expected a number and a unit (w, d, h, m, s), such as 30d, 12h or 1d12h")
    total = dt.timedelta()
    try:
        for number, unit in _DURATION.findall(cleaned):
            total += dt.timedelta(**{_DURATION_UNITS[unit]: int(number)})
    except (OverflowError, ValueError):  # ValueError: more digits than int() converts (4300)
        total = dt.timedelta.max
    if total > MAX_DURATION:
        raise CertError(f"duration {text!r}: longer than 100 years ({MAX_DURATION.days}d); a certificate's dates "
                        "must stay within the calendar")  # fmt: skip
    return total


# ------------------------------------------------------------------------------------------------- building


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _signing_hash(key: PrivateKey) -> hashes.SHA256:
    if isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        return hashes.SHA256()
    raise CertError(f"unsupported CA key type {type(key).__name__}: use an ECDSA or RSA key")


def create_ca(
    common_name: str = "gpu-admission CA",
    *,
    valid_for: dt.timedelta = CA_VALIDITY,
    now: dt.datetime | None = None,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A self-signed ECDSA P-256 CA that may sign leaf certificates only (pathLen 0)."""
    now = now or utcnow()
    key = _new_key()
    name = _common_name(common_name)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + valid_for)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def issue_serving_certificate(
    ca_key: PrivateKey,
    ca_cert: x509.Certificate,
    *,
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = (),
    valid_for: dt.timedelta = SERVING_VALIDITY,
    now: dt.datetime | None = None,
    common_name: str | None = None,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A new key and a serverAuth certificate for the given SANs, signed by the CA, never outliving it."""
    now = now or utcnow()
    dns = _dedupe([_check_dns_name(d) for d in dns_names])
    ips = list(dict.fromkeys(_check_ip(a) for a in ip_addresses))
    if not dns and not ips:
        raise CertError("a serving certificate needs at least one DNS name or IP address")
    if ca_cert.not_valid_after_utc <= now:
        raise CertError(
            f"the CA ({ca_cert.subject.rfc4514_string()}) expired on {_when(ca_cert.not_valid_after_utc)}: "
            "create a new CA with `gpu-webhook certs generate --force` and update caBundle"
        )
    _check_pair(ca_key, ca_cert, "CA key", "CA certificate")
    key = _new_key()
    try:
        ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        aki = x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski)
    except x509.ExtensionNotFound:  # a CA made elsewhere without one: derive it from the key, as RFC 5280 does
        # The CA key's public half is the certificate's (`_check_pair`), and typed as one that signs.
        aki = x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key())
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns] + [x509.IPAddress(ip) for ip in ips]
    cert = (
        x509.CertificateBuilder()
        .subject_name(_common_name(common_name or (dns[0] if dns else str(ips[0]))))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(max(now - CLOCK_SKEW, ca_cert.not_valid_before_utc))
        .not_valid_after(min(now + valid_for, ca_cert.not_valid_after_utc))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,  # ECDHE signatures; ECDSA keys never encipher
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(aki, critical=False)
        .sign(ca_key, _signing_hash(ca_key))
    )
    return key, cert


# ------------------------------------------------------------------------------------------- files: reading


def _read(path: Path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise CertError(f"{path}: no such file (expected the {what})") from None
    except IsADirectoryError:
        raise CertError(f"{path}: is a directory, not the {what} file") from None
    except OSError as exc:
        raise CertError(f"{path}: cannot read the {what}: {exc.strerror}") from None


def load_certificates(path: Path) -> list[x509.Certificate]:
    """Every certificate in a PEM file (a CA bundle may hold several)."""
    data = _read(path, "certificate")
    if b"-----BEGIN CERTIFICATE-----" not in data:
        if b"PRIVATE KEY-----" in data:
            raise CertError(f"{path}: is a private key, not a certificate: pass the .crt file")
        raise CertError(f"{path}: not a PEM certificate (no '-----BEGIN CERTIFICATE-----' line)")
    try:
        return x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        raise CertError(f"{path}: a damaged PEM certificate ({_one_line(exc)}): regenerate or re-copy it") from None


def load_certificate(path: Path) -> x509.Certificate:
    """The first certificate of a PEM file (the leaf, by convention)."""
    return load_certificates(path)[0]


def load_private_key(path: Path) -> PrivateKey:
    data = _read(path, "private key")
    if b"PRIVATE KEY-----" not in data:
        if b"-----BEGIN CERTIFICATE-----" in data:
            raise CertError(f"{path}: is a certificate, not a private key: pass the .key file")
        raise CertError(f"{path}: not a PEM private key (no '-----BEGIN ... PRIVATE KEY-----' line)")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise CertError(
            f"{path}: the key is encrypted; the server needs it unencrypted (the Secret protects it)"
        ) from None
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise CertError(f"{path}: a damaged or unsupported private key ({_one_line(exc)})") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise CertError(f"{path}: a {type(key).__name__}; use an ECDSA or RSA key")
    return key


def _public_der(key: PrivateKey | x509.Certificate) -> bytes:
    public = key.public_key()
    return public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _check_pair(key: PrivateKey, cert: x509.Certificate, key_name: str, cert_name: str) -> None:
    if _public_der(key) != _public_der(cert):
        raise CertError(f"{key_name} does not match {cert_name}: they come from different generations; use the pair")


def verify_key_pair(cert_path: Path, key_path: Path) -> None:
    """Raise CertError unless the key belongs to the certificate (what TLS would find only at handshake)."""
    cert, key = load_certificate(cert_path), load_private_key(key_path)
    if _public_der(key) != _public_der(cert):
        raise CertError(
            f"{key_path} does not match {cert_path}: the key belongs to another certificate; "
            "copy the pair written together (or run `gpu-webhook certs renew`)"
        )


def certificate_not_after(path: Path) -> dt.datetime:
    """When the (first) certificate in `path` expires, UTC-aware."""
    return load_certificate(path).not_valid_after_utc


@dataclass(frozen=True, slots=True)
class ChainValidity:
    """When a served chain works (UTC-aware), and which intermediate ends it first, if one does.

    A serving file holds the certificate, then any intermediates that the API server needs to reach its
    caBundle; once one of them expires, every handshake fails as if the certificate had. So the chain is valid
    from the latest not-before to the earliest not-after.
    """

    not_before: dt.datetime
    not_after: dt.datetime
    expiring: str | None  # the subject of an intermediate that expires before the certificate; else None


def chain_validity(path: Path) -> ChainValidity:
    chain = load_certificates(path)
    leaf, first = chain[0], min(chain, key=lambda cert: cert.not_valid_after_utc)
    not_after = first.not_valid_after_utc
    expiring = first.subject.rfc4514_string() if not_after < leaf.not_valid_after_utc else None
    return ChainValidity(max(cert.not_valid_before_utc for cert in chain), not_after, expiring)


def _is_ca(cert: x509.Certificate) -> bool:
    try:
        return bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return False


def _sans(cert: x509.Certificate) -> tuple[list[str], list[str]]:
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return [], []
    return ext.get_values_for_type(x509.DNSName), [str(ip) for ip in ext.get_values_for_type(x509.IPAddress)]


def _issued_by(cert: x509.Certificate, ca_cert: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca_cert)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _when(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


# ------------------------------------------------------------------------------------------- files: writing


def _write_atomic(path: Path, data: bytes, mode: int) -> None:
    """Temporary file in the same directory, then rename: readers see the old file or the new one, whole.

    mkstemp creates the file 0600 whatever the umask, so a key is never readable by others, not even briefly.
    """
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise CertError(f"{path.parent}: cannot write there: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise CertError(f"{path}: cannot write: {exc.strerror}") from None


def write_private_key(path: Path, key: PrivateKey) -> None:
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    _write_atomic(Path(path), pem, KEY_MODE)


def write_certificate(path: Path, cert: x509.Certificate) -> None:
    _write_atomic(Path(path), cert.public_bytes(serialization.Encoding.PEM), CERT_MODE)


DIR_MODE = 0o700  # the directory holds the CA's private key: its listing and files are the owner's alone


def _make_dir(directory: Path) -> None:
    """Create `directory` as 0700 whatever the umask (one that exists is left as its owner made it)."""
    try:
        if not directory.exists():
            directory.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
            os.chmod(directory, DIR_MODE)
    except OSError as exc:
        raise CertError(f"{directory}: cannot create the directory: {exc.strerror}") from None
    if not directory.is_dir():
        raise CertError(f"{directory}: exists and is not a directory")


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """Serialize generators of one directory (parallel test workers, two `serve --dev`)."""
    with open(directory / ".lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _write_serving(
    key: PrivateKey,
    cert: x509.Certificate,
    cert_path: Path,
    key_path: Path,
    chain: Sequence[x509.Certificate] = (),
) -> None:
    """The key, then the certificate followed by `chain` (intermediates the server sends along) in one file."""
    # Key first, certificate second: a reloader that watches the certificate then finds its key in place.
    write_private_key(key_path, key)
    pem = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in (cert, *chain))
    _write_atomic(Path(cert_path), pem, CERT_MODE)


# ------------------------------------------------------------------------------------------------ commands


def generate_certs(
    out_dir: Path,
    *,
    service: str,
    namespace: str,
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = (),
    force: bool = False,
    now: dt.datetime | None = None,
) -> CertPaths:
    """`certs generate`: a new CA (10 years) and serving certificate (1 year) for a Service."""
    names = service_dns_names(service, namespace) + list(dns_names)
    addresses = [d for d in dns_names if _address(d) is not None]
    if addresses:  # Go matches an address against IP SANs only: as a DNS name it would never verify
        raise CertError(f"DNS name {addresses[0]!r}: an IP address; pass it with --ip instead")
    paths = CertPaths.in_dir(out_dir)
    if not force:
        existing = [p for p in (paths.ca_cert, paths.ca_key) if p.exists()]
        if existing:
            raise CertError(
                f"{existing[0]} already exists: a new CA breaks every caBundle that trusts the old one; "
                f"use `gpu-webhook certs renew --dir {paths.directory}` to reissue the serving certificate, "
                "or pass --force to replace the CA"
            )
    ca_key, ca_cert = create_ca(f"gpu-admission CA for {service}.{namespace}", now=now)
    key, cert = issue_serving_certificate(
        ca_key,
        ca_cert,
        dns_names=names,
        ip_addresses=ip_addresses,
        now=now,
        common_name=f"{service}.{namespace}.svc",
    )
    _make_dir(paths.directory)  # only now: bad names above leave nothing behind
    write_private_key(paths.ca_key, ca_key)
    write_certificate(paths.ca_cert, ca_cert)
    _write_serving(key, cert, paths.tls_cert, paths.tls_key)
    return paths


def reissue_serving_certificate(
    directory: Path,
    *,
    valid_for: dt.timedelta = SERVING_VALIDITY,
    dns_names: Sequence[str] | None = None,
    ip_addresses: Sequence[str] | None = None,
    cert_path: Path | None = None,
    key_path: Path | None = None,
    now: dt.datetime | None = None,
    chain: Sequence[x509.Certificate] = (),
) -> CertPaths:
    """A new serving key and certificate from the directory's CA, with a chosen validity.

    SANs default to those of the current tls.crt. Tests and benchmarks use this for a certificate that expires
    in 3 days, or a rotated one; `cert_path`/`key_path` write it elsewhere (default: tls.crt and tls.key), and
    `chain` follows the certificate in its file. Returns the paths, with tls_cert/tls_key pointing at what was
    written.
    """
    paths = CertPaths.in_dir(directory)
    ca_cert, ca_key = load_certificate(paths.ca_cert), load_private_key(paths.ca_key)
    if _public_der(ca_key) != _public_der(ca_cert):
        raise CertError(
            f"{paths.ca_key} does not match {paths.ca_cert}: restore the pair written together, "
            "or start over with `gpu-webhook certs generate --force`"
        )
    common_name = None
    if dns_names is None or ip_addresses is None:
        current = load_certificate(paths.tls_cert)
        current_dns, current_ips = _sans(current)
        dns_names = current_dns if dns_names is None else dns_names
        ip_addresses = current_ips if ip_addresses is None else ip_addresses
        cns = current.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        common_name = str(cns[0].value) if cns else None
    key, cert = issue_serving_certificate(
        ca_key,
        ca_cert,
        dns_names=dns_names,
        ip_addresses=ip_addresses,
        valid_for=valid_for,
        now=now,
        common_name=common_name,
    )
    out_cert, out_key = Path(cert_path or paths.tls_cert), Path(key_path or paths.tls_key)
    _write_serving(key, cert, out_cert, out_key, chain)
    return CertPaths(paths.ca_cert, paths.ca_key, out_cert, out_key)


def renew_serving_certificate(
    directory: Path,
    before: dt.timedelta = RENEW_BEFORE,
    *,
    now: dt.datetime | None = None,
) -> RenewResult:
    """`certs renew`: reissue tls.crt from the same CA when it expires within `before`; else leave it."""
    now = now or utcnow()
    paths = CertPaths.in_dir(directory)
    ca_cert, (current, *chain) = load_certificate(paths.ca_cert), load_certificates(paths.tls_cert)
    if not _issued_by(current, ca_cert):
        raise CertError(
            f"{paths.tls_cert} was not issued by {paths.ca_cert}: renewing would change the CA that caBundle "
            "trusts; put the matching ca.crt/ca.key beside it, or start over with `certs generate --force`"
        )
    previous = current.not_valid_after_utc
    renew_from = previous - before
    if now < renew_from:
        return RenewResult(False, previous, previous, renew_from)
    if ca_cert.not_valid_after_utc - now <= before:
        raise CertError(
            f"the CA {paths.ca_cert} itself expires on {_when(ca_cert.not_valid_after_utc)}, and a serving "
            "certificate cannot outlive it: create a new CA with `gpu-webhook certs generate --force` "
            "and update caBundle"
        )
    # The certificates after the leaf (intermediates up to the root in caBundle) stay: without them Go would
    # find no path from the renewed leaf to caBundle when ca.crt is an intermediate.
    renewed = reissue_serving_certificate(directory, now=now, chain=chain)
    return RenewResult(True, certificate_not_after(renewed.tls_cert), previous, renew_from)


def inspect_certificates(path: Path) -> list[CertificateInfo]:
    """`certs inspect`: every certificate in the file, the first one first."""
    infos = []
    for cert in load_certificates(path):
        dns, ips = _sans(cert)
        try:
            eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
            usages = tuple(_EKU_NAMES.get(oid, oid.dotted_string) for oid in eku)
        except x509.ExtensionNotFound:
            usages = ()
        public = cert.public_key()
        try:
            ku = cert.extensions.get_extension_for_class(x509.KeyUsage).value
            key_usage = tuple(name for name, attribute in _KEY_USAGES if getattr(ku, attribute))
        except x509.ExtensionNotFound:
            key_usage = ()
        if isinstance(public, ec.EllipticCurvePublicKey):
            key = f"ECDSA {public.curve.name}"
        elif isinstance(public, rsa.RSAPublicKey):
            key = f"RSA {public.key_size} bits"
        else:
            key = type(public).__name__
        infos.append(
            CertificateInfo(
                subject=cert.subject.rfc4514_string() or "(empty)",
                issuer=cert.issuer.rfc4514_string() or "(empty)",
                sans=tuple([f"DNS:{d}" for d in dns] + [f"IP:{ip}" for ip in ips]),
                not_before=cert.not_valid_before_utc,
                not_after=cert.not_valid_after_utc,
                is_ca=_is_ca(cert),
                key_usage=key_usage,
                extended_key_usage=usages,
                key=key,
                serial=f"{cert.serial_number:x}",
                sha256=cert.fingerprint(hashes.SHA256()).hex(":"),
            )
        )
    return infos


def _ca_problem(cert: x509.Certificate) -> str | None:
    """Why Go's crypto/x509 would not take `cert` as the CA of the serving certificate, or None."""
    if not _is_ca(cert):
        return (
            "is not a CA (basicConstraints CA:false); caBundle needs the CA that issued the serving certificate, ca.crt"
        )
    try:
        cert_sign = cert.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    except x509.ExtensionNotFound:
        cert_sign = True  # no keyUsage: any use, Go included
    if not cert_sign:
        return "is a CA whose keyUsage lacks keyCertSign, so Go refuses what it signs; reissue it with keyCertSign"
    if cert.serial_number < 0:
        return "has a negative serial number, which Go 1.23 and later refuse to parse; reissue the CA"
    public = cert.public_key()
    if isinstance(public, rsa.RSAPublicKey) and public.key_size < 1024:
        return f"has a {public.key_size}-bit RSA key, which Go 1.24 and later refuse; reissue the CA"
    return None


def ca_bundle(source: Path) -> str:
    """`certs ca-bundle`: base64 of the CA's PEM, as `caBundle` takes it; `source`: a directory or a file.

    Only the certificates are encoded: a CA key that shares the file must never reach the webhook
    configurations, which anyone who may read them (and the git history of manifests/) would then hold.
    """
    source = Path(source)
    path = source / "ca.crt" if source.is_dir() else source
    certs = load_certificates(path)
    for cert in certs:
        problem = _ca_problem(cert)
        if problem:
            raise CertError(f"{path}: {cert.subject.rfc4514_string() or 'a certificate'} {problem}")
    pem = b"".join(cert.public_bytes(serialization.Encoding.PEM) for cert in certs)
    return base64.b64encode(pem).decode("ascii")


def _dev_names(hosts: Sequence[str]) -> tuple[list[str], list[str]]:
    """The dev certificate's DNS names and IP addresses: localhost, 127.0.0.1 and each host that is not a wildcard."""
    dns, ips = list(DEV_DNS_NAMES), list(DEV_IP_ADDRESSES)
    for host in hosts:
        address = _address(host)
        if address is None:
            dns.append(_check_dns_name(host))
        elif not address.is_unspecified:  # 0.0.0.0 and :: listen everywhere, name no address
            ips.append(str(address))
    return _dedupe(dns), _dedupe(ips)


def _dev_certs_usable(paths: CertPaths, now: dt.datetime, dns_names: list[str], ip_addresses: list[str]) -> bool:
    try:
        ca_cert, ca_key = load_certificate(paths.ca_cert), load_private_key(paths.ca_key)
        cert, key = load_certificate(paths.tls_cert), load_private_key(paths.tls_key)
    except CertError:
        return False
    dns, ips = _sans(cert)
    return (
        _public_der(ca_key) == _public_der(ca_cert)
        and _public_der(key) == _public_der(cert)
        and _issued_by(cert, ca_cert)
        and set(dns_names) <= set(dns)
        and set(ip_addresses) <= set(ips)
        and cert.not_valid_before_utc <= now
        and cert.not_valid_after_utc - now > DEV_MIN_REMAINING
    )


def generate_dev_certs(out_dir: Path, hosts: Sequence[str] = ()) -> CertPaths:
    """A throw-away CA and a serving certificate for localhost and 127.0.0.1 (`serve --dev`, the tests).

    `hosts` (serve's --host) are named too, since clients connect to the address the server listens on; the
    wildcards 0.0.0.0 and :: add nothing. Reused while valid, more than 7 days from expiry and naming every
    host, so a client that trusts the CA keeps working.
    """
    out_dir = Path(out_dir)
    paths = CertPaths.in_dir(out_dir)
    dns, ips = _dev_names(hosts)
    _make_dir(out_dir)
    with _locked(out_dir):
        now = utcnow()
        if _dev_certs_usable(paths, now, dns, ips):
            return paths
        ca_key, ca_cert = create_ca("gpu-admission dev CA", now=now)
        key, cert = issue_serving_certificate(ca_key, ca_cert, dns_names=dns, ip_addresses=ips, now=now)
        write_private_key(paths.ca_key, ca_key)
        write_certificate(paths.ca_cert, ca_cert)
        _write_serving(key, cert, paths.tls_cert, paths.tls_key)
    return paths
