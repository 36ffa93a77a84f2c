"""Certificates: what `gpu-webhook certs` writes must verify the way the API server (Go's crypto/x509) verifies it.

Go matches the host name against SANs only, requires serverAuth on the leaf and CA:true on the issuer. A Go
toolchain is not part of the project's setup, so each SAN is checked through a real TLS handshake with Python's
ssl (hostname checking, no CN fallback, X.509 strict) and, when openssl is installed, with `openssl verify
-x509_strict -purpose sslserver`. Three deliberately broken certificates show that these checks reject what Go
rejects. Where `go` happens to be installed, Go's own x509.Verify runs too.
"""

from __future__ import annotations

import base64
import datetime as dt
import os
import shlex
import shutil
import socket
import ssl
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from webhook import certs

GPU_WEBHOOK = str(Path(sys.executable).with_name("gpu-webhook"))
SERVICE, NAMESPACE = "gpu-admission", "gpu-admission"
EXPECTED_DNS = [
    "gpu-admission",
    "gpu-admission.gpu-admission",
    "gpu-admission.gpu-admission.svc",
    "gpu-admission.gpu-admission.svc.cluster.local",
    "webhook.example.com",
]
EXPECTED_IPS = ["10.0.0.7", "fd00::7"]
OPENSSL = shutil.which("openssl")


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> certs.CertPaths:
    out = tmp_path_factory.mktemp("generated") / "prod"
    return certs.generate_certs(
        out, service=SERVICE, namespace=NAMESPACE, dns_names=["webhook.example.com"], ip_addresses=EXPECTED_IPS
    )


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _ext(cert: x509.Certificate, kind: type) -> x509.Extension:
    return cert.extensions.get_extension_for_class(kind)


def _copy(paths: certs.CertPaths, target: Path) -> certs.CertPaths:
    shutil.copytree(paths.directory, target)
    return certs.CertPaths.in_dir(target)


# ------------------------------------------------------------------------------------- TLS and openssl helpers


@contextmanager
def tls_server(cert_file: Path, key_file: Path) -> Iterator[int]:
    """A loopback TLS server that completes handshakes and says "ok"; yields its port."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(5)
            try:
                with context.wrap_socket(conn, server_side=True) as tls:
                    tls.sendall(b"ok")
            except (ssl.SSLError, OSError):
                conn.close()  # the client refused our certificate: that is what some tests want

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def go_like_client(ca_file: Path) -> ssl.SSLContext:
    """Verify like Go's crypto/tls: chain to the CA, serverAuth purpose, host name from SANs only."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca_file))
    context.hostname_checks_common_name = False
    context.verify_flags |= ssl.VERIFY_X509_STRICT
    return context


def handshake(port: int, ca_file: Path, server_name: str) -> None:
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as sock,
        go_like_client(ca_file).wrap_socket(sock, server_hostname=server_name) as tls,
    ):
        assert tls.recv(2) == b"ok"


def openssl_verify(ca_file: Path, cert_file: Path, *name_options: str) -> subprocess.CompletedProcess[str]:
    command = [OPENSSL, "verify", "-x509_strict", "-purpose", "sslserver", "-CAfile", str(ca_file)]
    return subprocess.run([*command, *name_options, str(cert_file)], capture_output=True, text=True, timeout=30)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([GPU_WEBHOOK, "certs", *args], capture_output=True, text=True, timeout=60)


# ------------------------------------------------------------------------------------------------ generate


def test_generate_writes_a_p256_ca_for_ten_years_that_may_only_sign_leaves(generated: certs.CertPaths) -> None:
    ca = _cert(generated.ca_cert)
    assert isinstance(ca.public_key(), ec.EllipticCurvePublicKey)
    assert ca.public_key().curve.name == "secp256r1"
    assert ca.subject == ca.issuer
    constraints = _ext(ca, x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca and constraints.value.path_length == 0
    usage = _ext(ca, x509.KeyUsage).value
    assert usage.key_cert_sign and usage.crl_sign and not usage.digital_signature
    assert _ext(ca, x509.SubjectKeyIdentifier).value == x509.SubjectKeyIdentifier.from_public_key(ca.public_key())
    lifetime = ca.not_valid_after_utc - ca.not_valid_before_utc
    assert dt.timedelta(days=3650) <= lifetime <= dt.timedelta(days=3650, minutes=10)


def test_generate_writes_a_one_year_serving_certificate_for_the_service_names(generated: certs.CertPaths) -> None:
    ca, leaf = _cert(generated.ca_cert), _cert(generated.tls_cert)
    sans = _ext(leaf, x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == EXPECTED_DNS
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == EXPECTED_IPS
    assert _ext(leaf, x509.ExtendedKeyUsage).value == x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH])
    constraints = _ext(leaf, x509.BasicConstraints)
    assert constraints.critical and not constraints.value.ca
    assert _ext(leaf, x509.KeyUsage).value.digital_signature
    aki = _ext(leaf, x509.AuthorityKeyIdentifier).value
    assert aki.key_identifier == _ext(ca, x509.SubjectKeyIdentifier).value.digest
    assert _ext(leaf, x509.SubjectKeyIdentifier).value == x509.SubjectKeyIdentifier.from_public_key(leaf.public_key())
    leaf.verify_directly_issued_by(ca)
    lifetime = leaf.not_valid_after_utc - leaf.not_valid_before_utc
    assert dt.timedelta(days=365) <= lifetime <= dt.timedelta(days=365, minutes=10)
    certs.verify_key_pair(generated.tls_cert, generated.tls_key)
    certs.verify_key_pair(generated.ca_cert, generated.ca_key)


def test_keys_are_mode_0600_even_under_a_permissive_umask(tmp_path: Path) -> None:
    previous = os.umask(0)
    try:
        paths = certs.generate_certs(tmp_path / "out", service="hook", namespace="ns")
    finally:
        os.umask(previous)
    assert stat.S_IMODE(paths.ca_key.stat().st_mode) == 0o600
    assert stat.S_IMODE(paths.tls_key.stat().st_mode) == 0o600
    assert stat.S_IMODE(paths.tls_cert.stat().st_mode) == 0o644
    assert sorted(p.name for p in paths.directory.iterdir()) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]


def test_the_directory_it_creates_is_mode_0700_under_any_umask(tmp_path: Path) -> None:
    for umask in (0, 0o022, 0o277):
        previous = os.umask(umask)
        try:
            result = cli("generate", "--service", "hook", "--namespace", "ns", "--out", str(tmp_path / f"{umask:o}"))
        finally:
            os.umask(previous)
        assert result.returncode == 0, result.stderr
        assert stat.S_IMODE((tmp_path / f"{umask:o}").stat().st_mode) == 0o700


def test_every_san_verifies_in_a_real_tls_handshake_and_other_names_do_not(generated: certs.CertPaths) -> None:
    with tls_server(generated.tls_cert, generated.tls_key) as port:
        for name in EXPECTED_DNS + EXPECTED_IPS:
            handshake(port, generated.ca_cert, name)
        for wrong in ("gpu-admission.other.svc", "10.0.0.8"):
            with pytest.raises(ssl.SSLCertVerificationError, match="mismatch"):
                handshake(port, generated.ca_cert, wrong)


@pytest.mark.skipif(OPENSSL is None, reason="openssl is not installed")
def test_openssl_strict_verification_accepts_every_san(generated: certs.CertPaths) -> None:
    for name in EXPECTED_DNS:
        result = openssl_verify(generated.ca_cert, generated.tls_cert, "-verify_hostname", name)
        assert result.returncode == 0, result.stdout + result.stderr
    for address in EXPECTED_IPS:
        result = openssl_verify(generated.ca_cert, generated.tls_cert, "-verify_ip", address)
        assert result.returncode == 0, result.stdout + result.stderr
    assert openssl_verify(generated.ca_cert, generated.tls_cert, "-verify_hostname", "other.svc").returncode != 0


SERVICE_NAME = "gpu-admission.gpu-admission.svc"


def _sign_leaf(
    ca_key: certs.PrivateKey, ca: x509.Certificate, out: Path, *, with_san: bool, usage: x509.ObjectIdentifier
) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, SERVICE_NAME)]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(_ext(ca, x509.SubjectKeyIdentifier).value),
            critical=False,
        )
    )
    if with_san:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(SERVICE_NAME)]), critical=False)
    out.mkdir()
    certs.write_certificate(out / "ca.crt", ca)
    certs.write_private_key(out / "tls.key", key)
    certs.write_certificate(out / "tls.crt", builder.sign(ca_key, hashes.SHA256()))


@pytest.fixture(scope="module")
def broken(generated: certs.CertPaths, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Directories whose certificates are right in every way but one; Go rejects each (messages below)."""
    base = tmp_path_factory.mktemp("broken")
    ca_key, ca = certs.load_private_key(generated.ca_key), _cert(generated.ca_cert)
    # Go: "x509: certificate relies on legacy Common Name field, use SANs instead"
    _sign_leaf(ca_key, ca, base / "cn-only", with_san=False, usage=ExtendedKeyUsageOID.SERVER_AUTH)
    # Go: "x509: certificate specifies an incompatible key usage"
    _sign_leaf(ca_key, ca, base / "client-only", with_san=True, usage=ExtendedKeyUsageOID.CLIENT_AUTH)
    # Go: "x509: invalid signature: parent certificate cannot sign this kind of certificate"
    not_ca_key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "not a CA")])
    not_ca = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(not_ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(not_ca_key.public_key()), critical=False)
        .sign(not_ca_key, hashes.SHA256())
    )
    _sign_leaf(not_ca_key, not_ca, base / "issuer-not-ca", with_san=True, usage=ExtendedKeyUsageOID.SERVER_AUTH)
    return {d.name: d for d in base.iterdir()}


@pytest.mark.parametrize(
    ("case", "python_error"),
    [("cn-only", "mismatch"), ("client-only", "unsuitable certificate purpose"), ("issuer-not-ca", "invalid CA")],
)
def test_the_checks_reject_what_go_rejects(broken: dict[str, Path], case: str, python_error: str) -> None:
    """Negative controls: without them a check that accepts everything would pass the tests above."""
    directory = broken[case]
    with (
        tls_server(directory / "tls.crt", directory / "tls.key") as port,
        pytest.raises(ssl.SSLCertVerificationError, match=python_error),
    ):
        handshake(port, directory / "ca.crt", SERVICE_NAME)
    if OPENSSL and case != "cn-only":  # openssl's -verify_hostname falls back to the CN, unlike Go
        result = openssl_verify(directory / "ca.crt", directory / "tls.crt", "-verify_hostname", SERVICE_NAME)
        assert result.returncode != 0, result.stdout


# Go's crypto/x509, as the API server's webhook client runs it: Verify with the service name and the
# caBundle as roots (crypto/tls adds nothing more). Used only where a Go toolchain happens to be installed.
GO_VERIFY = r"""package main

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
)

func main() {
	roots := x509.NewCertPool()
	caPEM, _ := os.ReadFile(os.Args[1])
	roots.AppendCertsFromPEM(caPEM)
	leafPEM, _ := os.ReadFile(os.Args[2])
	block, _ := pem.Decode(leafPEM)
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		panic(err)
	}
	for _, name := range os.Args[3:] {
		_, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots})
		fmt.Printf("%s\t%v\n", name, err)
	}
}
"""
GO = shutil.which("go")


@pytest.mark.skipif(GO is None, reason="no Go toolchain: Python ssl and openssl stand in for it above")
def test_go_crypto_x509_accepts_every_san_and_rejects_the_broken_certificates(
    generated: certs.CertPaths, broken: dict[str, Path], tmp_path: Path
) -> None:
    program = tmp_path / "verify.go"
    program.write_text(GO_VERIFY)
    binary = tmp_path / "verify"
    env = dict(os.environ)
    if not (env.get("HOME") or env.get("XDG_CACHE_HOME")):  # go needs somewhere for its build cache
        env |= {"GOCACHE": str(tmp_path / "gocache"), "GOPATH": str(tmp_path / "gopath")}
    built = subprocess.run(
        [GO, "build", "-o", str(binary), str(program)], capture_output=True, text=True, timeout=300, env=env
    )
    assert built.returncode == 0, built.stderr

    def verify(directory: Path, *names: str) -> dict[str, str]:
        result = subprocess.run(
            [str(binary), str(directory / "ca.crt"), str(directory / "tls.crt"), *names],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        return dict(line.split("\t", 1) for line in result.stdout.splitlines())

    results = verify(generated.directory, *EXPECTED_DNS, *EXPECTED_IPS, "other.svc")
    assert {name: results[name] for name in EXPECTED_DNS + EXPECTED_IPS} == dict.fromkeys(
        EXPECTED_DNS + EXPECTED_IPS, "<nil>"
    )
    assert "certificate is valid for" in results["other.svc"]
    assert "legacy Common Name field" in verify(broken["cn-only"], SERVICE_NAME)[SERVICE_NAME]
    assert "incompatible key usage" in verify(broken["client-only"], SERVICE_NAME)[SERVICE_NAME]
    assert "cannot sign this kind of certificate" in verify(broken["issuer-not-ca"], SERVICE_NAME)[SERVICE_NAME]


def test_generate_refuses_to_replace_a_ca_unless_forced(generated: certs.CertPaths, tmp_path: Path) -> None:
    paths = _copy(generated, tmp_path / "copy")
    before = paths.ca_cert.read_bytes()
    with pytest.raises(certs.CertError, match=r"ca\.crt already exists.*certs renew --dir.*--force"):
        certs.generate_certs(paths.directory, service=SERVICE, namespace=NAMESPACE)
    assert paths.ca_cert.read_bytes() == before
    certs.generate_certs(paths.directory, service=SERVICE, namespace=NAMESPACE, force=True)
    assert paths.ca_cert.read_bytes() != before


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"service": "Bad_Name", "namespace": "ns"}, "service name 'Bad_Name': a Service name is a lowercase DNS"),
        ({"service": "hook", "namespace": "-ns"}, "namespace '-ns': a namespace name is a lowercase DNS label"),
        ({"service": "hook", "namespace": "ns", "dns_names": ["bad name"]}, "DNS name 'bad name': expected"),
        # Go matches an address against IP SANs only: as a DNS SAN it would never verify.
        ({"service": "hook", "namespace": "ns", "dns_names": ["10.0.0.7"]}, "DNS name '10.0.0.7': an IP address"),
        ({"service": "hook", "namespace": "ns", "ip_addresses": ["10.0.0"]}, "IP address '10.0.0': not an IPv4"),
    ],
)
def test_bad_names_are_refused_before_anything_is_written(tmp_path: Path, options: dict, message: str) -> None:
    with pytest.raises(certs.CertError) as caught:
        certs.generate_certs(tmp_path / "out", **options)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------------- renew and reissue


def test_renew_outside_the_window_leaves_the_files_alone(generated: certs.CertPaths, tmp_path: Path) -> None:
    paths = _copy(generated, tmp_path / "copy")
    before = {p: p.read_bytes() for p in paths.directory.iterdir()}
    result = certs.renew_serving_certificate(paths.directory, dt.timedelta(days=30))
    assert not result.renewed
    assert result.renew_from == result.not_after - dt.timedelta(days=30)
    assert {p: p.read_bytes() for p in paths.directory.iterdir()} == before


def test_renew_inside_the_window_reissues_from_the_same_ca_with_the_same_names(
    generated: certs.CertPaths, tmp_path: Path
) -> None:
    paths = _copy(generated, tmp_path / "copy")
    ca_before, key_before = paths.ca_cert.read_bytes(), paths.tls_key.read_bytes()
    certs.reissue_serving_certificate(paths.directory, valid_for=dt.timedelta(days=3))
    expiring = _cert(paths.tls_cert)
    result = certs.renew_serving_certificate(paths.directory, dt.timedelta(days=30))
    assert result.renewed and result.previous_not_after == expiring.not_valid_after_utc
    renewed = _cert(paths.tls_cert)
    assert renewed.not_valid_after_utc - expiring.not_valid_after_utc > dt.timedelta(days=360)
    assert renewed.subject == expiring.subject
    assert renewed.extensions.get_extension_for_class(x509.SubjectAlternativeName) == _ext(
        _cert(generated.tls_cert), x509.SubjectAlternativeName
    )
    assert paths.ca_cert.read_bytes() == ca_before and paths.tls_key.read_bytes() != key_before
    renewed.verify_directly_issued_by(_cert(paths.ca_cert))
    certs.verify_key_pair(paths.tls_cert, paths.tls_key)
    assert stat.S_IMODE(paths.tls_key.stat().st_mode) == 0o600


def test_renew_refuses_a_certificate_from_another_ca(generated: certs.CertPaths, tmp_path: Path) -> None:
    paths = _copy(generated, tmp_path / "copy")
    other = certs.generate_certs(tmp_path / "other", service=SERVICE, namespace=NAMESPACE)
    shutil.copy(other.tls_cert, paths.tls_cert)
    with pytest.raises(certs.CertError, match=r"tls\.crt was not issued by .*ca\.crt"):
        certs.renew_serving_certificate(paths.directory, dt.timedelta(days=400))


def _ca_signed_by(
    name: str,
    issuer_key: certs.PrivateKey | None,
    issuer: x509.Certificate | None,
    path_length: int,
    cert_sign: bool = True,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A CA certificate and its key: self-signed when `issuer` is None, else signed by it."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    authority = x509.AuthorityKeyIdentifier.from_issuer_public_key((issuer_key or key).public_key())
    usage = dict.fromkeys(("content_commitment", "key_encipherment", "data_encipherment", "key_agreement",
                           "crl_sign", "encipher_only", "decipher_only"), False)  # fmt: skip
    ca = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer.subject if issuer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1000))
        .add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True)
        .add_extension(x509.KeyUsage(key_cert_sign=cert_sign, digital_signature=not cert_sign, **usage), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(authority, critical=False)
        .sign(issuer_key or key, hashes.SHA256())
    )
    return key, ca


def test_renew_keeps_the_intermediates_that_follow_the_leaf(tmp_path: Path) -> None:
    """ca.crt/ca.key an intermediate, caBundle its root: the renewed tls.crt must still carry the intermediate."""
    root_key, root = _ca_signed_by("root", None, None, path_length=1)
    ca_key, ca = _ca_signed_by("intermediate", root_key, root, path_length=0)
    key, leaf = certs.issue_serving_certificate(ca_key, ca, dns_names=[SERVICE_NAME], valid_for=dt.timedelta(days=3))
    paths = certs.CertPaths.in_dir(tmp_path / "certs")
    paths.directory.mkdir()
    certs.write_certificate(tmp_path / "root.crt", root)
    certs.write_certificate(paths.ca_cert, ca)
    certs.write_private_key(paths.ca_key, ca_key)
    certs.write_private_key(paths.tls_key, key)
    paths.tls_cert.write_bytes(b"".join(c.public_bytes(serialization.Encoding.PEM) for c in (leaf, ca)))
    with tls_server(paths.tls_cert, paths.tls_key) as port:
        handshake(port, tmp_path / "root.crt", SERVICE_NAME)

    assert certs.renew_serving_certificate(paths.directory, dt.timedelta(days=30)).renewed
    renewed = certs.load_certificates(paths.tls_cert)
    assert renewed[0].not_valid_after_utc - leaf.not_valid_after_utc > dt.timedelta(days=360)
    assert renewed[1:] == [ca]
    with tls_server(paths.tls_cert, paths.tls_key) as port:
        handshake(port, tmp_path / "root.crt", SERVICE_NAME)


def test_a_rotated_certificate_can_be_written_beside_the_current_one(
    generated: certs.CertPaths, tmp_path: Path
) -> None:
    """What the server's rotation test needs: a second pair from the same CA, then a rename over the first."""
    paths = _copy(generated, tmp_path / "copy")
    rotated = certs.reissue_serving_certificate(
        paths.directory,
        valid_for=dt.timedelta(days=3),
        dns_names=["localhost"],
        ip_addresses=["127.0.0.1"],
        cert_path=tmp_path / "next.crt",
        key_path=tmp_path / "next.key",
    )
    assert rotated.tls_cert == tmp_path / "next.crt" and rotated.ca_cert == paths.ca_cert
    assert paths.tls_cert.read_bytes() == generated.tls_cert.read_bytes()  # untouched
    remaining = certs.certificate_not_after(rotated.tls_cert) - dt.datetime.now(dt.UTC)
    assert dt.timedelta(days=2, hours=23) < remaining <= dt.timedelta(days=3)
    certs.verify_key_pair(rotated.tls_cert, rotated.tls_key)
    with tls_server(rotated.tls_cert, rotated.tls_key) as port:
        handshake(port, paths.ca_cert, "localhost")
        handshake(port, paths.ca_cert, "127.0.0.1")


def test_a_serving_certificate_never_outlives_its_ca(generated: certs.CertPaths) -> None:
    ca_key, ca = certs.load_private_key(generated.ca_key), _cert(generated.ca_cert)
    _, leaf = certs.issue_serving_certificate(ca_key, ca, dns_names=["x"], valid_for=dt.timedelta(days=9000))
    assert leaf.not_valid_after_utc == ca.not_valid_after_utc


# --------------------------------------------------------------------------------------------- dev certs


def test_dev_certs_serve_localhost_and_are_reused_while_valid(tmp_path: Path) -> None:
    paths = certs.generate_dev_certs(tmp_path / "dev")
    first = paths.tls_cert.read_bytes()
    with tls_server(paths.tls_cert, paths.tls_key) as port:
        handshake(port, paths.ca_cert, "localhost")
        handshake(port, paths.ca_cert, "127.0.0.1")
    assert certs.generate_dev_certs(tmp_path / "dev") == paths
    assert paths.tls_cert.read_bytes() == first
    not_after = certs.certificate_not_after(paths.tls_cert)
    assert not_after.tzinfo is not None and not_after.utcoffset() == dt.timedelta(0)


def test_dev_certs_cover_the_address_the_server_listens_on(tmp_path: Path) -> None:
    """`serve --dev --host ::1` prints `curl https://[::1]:...`: the certificate must name that address."""
    paths = certs.generate_dev_certs(tmp_path / "dev")
    certs.generate_dev_certs(tmp_path / "dev", hosts=["::1", "dev.example.com"])
    with tls_server(paths.tls_cert, paths.tls_key) as port:
        for name in ("::1", "dev.example.com", "localhost", "127.0.0.1"):
            handshake(port, paths.ca_cert, name)
    covering = paths.tls_cert.read_bytes()
    certs.generate_dev_certs(tmp_path / "dev", hosts=["0.0.0.0", "::", "::1"])  # wildcards name no address
    assert paths.tls_cert.read_bytes() == covering


def test_dev_certs_within_seven_days_of_expiry_or_broken_are_replaced(tmp_path: Path) -> None:
    paths = certs.generate_dev_certs(tmp_path / "dev")
    certs.reissue_serving_certificate(paths.directory, valid_for=dt.timedelta(days=6))
    certs.generate_dev_certs(paths.directory)
    assert certs.certificate_not_after(paths.tls_cert) - dt.datetime.now(dt.UTC) > dt.timedelta(days=360)
    paths.tls_key.write_text("not a key")
    certs.generate_dev_certs(paths.directory)
    certs.verify_key_pair(paths.tls_cert, paths.tls_key)


def test_dev_certs_generated_concurrently_form_one_consistent_set(tmp_path: Path) -> None:
    results: list[certs.CertPaths] = []
    threads = [
        threading.Thread(target=lambda: results.append(certs.generate_dev_certs(tmp_path / "dev"))) for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 4
    paths = results[0]
    certs.verify_key_pair(paths.tls_cert, paths.tls_key)
    _cert(paths.tls_cert).verify_directly_issued_by(_cert(paths.ca_cert))


# ------------------------------------------------------------------------------------------------ caBundle


def test_ca_bundle_holds_only_the_certificates_never_a_key_that_shares_the_file(
    generated: certs.CertPaths, tmp_path: Path
) -> None:
    """caBundle sits in the webhook configurations (and in git): a CA key there lets anyone impersonate the webhook."""
    ca, key = generated.ca_cert.read_bytes(), generated.ca_key.read_bytes()
    for name, content in (("ca-then-key.pem", ca + key), ("key-then-ca.pem", key + ca)):
        (tmp_path / name).write_bytes(content)
        bundle = base64.b64decode(certs.ca_bundle(tmp_path / name), validate=True)
        assert bundle == ca, name


def test_ca_bundle_refuses_a_ca_whose_key_usage_lacks_cert_sign(tmp_path: Path) -> None:
    """Go: "x509: invalid signature: parent certificate cannot sign this kind of certificate"."""
    path = tmp_path / "ca.crt"
    certs.write_certificate(path, _ca_signed_by("signs nothing", None, None, path_length=0, cert_sign=False)[1])
    with pytest.raises(certs.CertError) as caught:
        certs.ca_bundle(path)
    assert str(caught.value).startswith(f"{path}: CN=signs nothing is a CA whose keyUsage lacks keyCertSign")
    assert "\n" not in str(caught.value)


@pytest.mark.skipif(OPENSSL is None, reason="openssl is not installed (it writes what cryptography refuses to)")
@pytest.mark.filterwarnings("ignore:Parsed a serial number which wasn't positive")
@pytest.mark.parametrize(
    ("options", "message"),
    [
        # Go 1.23 and later: "x509: negative serial number", so the API server would trust nothing.
        (["-newkey", "rsa:2048", "-set_serial", "-5"], "has a negative serial number"),
        # Go 1.24 and later: "crypto/rsa: 512-bit keys are insecure".
        (["-newkey", "rsa:512"], "has a 512-bit RSA key"),
    ],
)
def test_ca_bundle_refuses_a_ca_that_go_cannot_use(tmp_path: Path, options: list[str], message: str) -> None:
    path = tmp_path / "ca.crt"
    made = subprocess.run(
        [OPENSSL, "req", "-x509", *options, "-nodes", "-keyout", str(tmp_path / "ca.key"), "-subj", "/CN=old",
         "-days", "30", "-out", str(path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert certs.inspect_certificates(path)[0].is_ca
    with pytest.raises(certs.CertError) as caught:
        certs.ca_bundle(path)
    assert str(caught.value).startswith(f"{path}: CN=old {message}")
    assert "\n" not in str(caught.value)


# ------------------------------------------------------------------------------------------- one-line errors


def test_file_problems_are_one_line_errors(generated: certs.CertPaths, tmp_path: Path) -> None:
    (tmp_path / "junk.crt").write_text("hello\n")
    encrypted = tmp_path / "encrypted.key"
    encrypted.write_bytes(
        ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    cases = [
        (lambda: certs.load_certificate(tmp_path / "missing.crt"), "missing.crt: no such file"),
        (lambda: certs.load_certificate(tmp_path), "is a directory"),
        (lambda: certs.load_certificate(tmp_path / "junk.crt"), "junk.crt: not a PEM certificate"),
        (lambda: certs.load_certificate(generated.tls_key), "tls.key: is a private key, not a certificate"),
        (lambda: certs.load_private_key(generated.tls_cert), "tls.crt: is a certificate, not a private key"),
        (lambda: certs.load_private_key(encrypted), "encrypted.key: the key is encrypted"),
        (lambda: certs.verify_key_pair(generated.tls_cert, generated.ca_key), "ca.key does not match"),
        (lambda: certs.ca_bundle(generated.tls_cert), "is not a CA (basicConstraints CA:false)"),
        (lambda: certs.parse_duration("3x"), "duration '3x': expected a number and a unit"),
    ]
    for call, message in cases:
        with pytest.raises(certs.CertError) as caught:
            call()
        assert message in str(caught.value)
        assert "\n" not in str(caught.value)


def test_durations() -> None:
    assert certs.parse_duration("30d") == dt.timedelta(days=30)
    assert certs.parse_duration("12h") == dt.timedelta(hours=12)
    assert certs.parse_duration("1d12h") == dt.timedelta(days=1, hours=12)
    assert certs.parse_duration("2w") == dt.timedelta(weeks=2)
    assert certs.parse_duration("36500d") == certs.MAX_DURATION
    for bad in ("", "30", "d", "30 days", "-1d", "36501d", "9" * 30 + "w", "9" * 5000 + "d"):
        with pytest.raises(certs.CertError):
            certs.parse_duration(bad)


# --------------------------------------------------------------------------------------------------- CLI


def test_cli_hints_are_commands_a_shell_runs_as_printed(tmp_path: Path) -> None:
    """Paths in the printed commands are quoted for a shell: a directory with a space stays one argument."""
    out = tmp_path / "team certs"
    result = cli("generate", "--service", SERVICE, "--namespace", NAMESPACE, "--out", str(out))
    assert result.returncode == 0, result.stderr
    secret = next(line for line in result.stdout.splitlines() if "create secret tls" in line)
    assert shlex.split(secret)[-2:] == [f"--cert={out / 'tls.crt'}", f"--key={out / 'tls.key'}"]
    bundle = next(line for line in result.stdout.splitlines() if "certs ca-bundle" in line)
    assert shlex.split(bundle, comments=True) == ["gpu-webhook", "certs", "ca-bundle", str(out)]
    renewed = cli("renew", "--dir", str(out), "--before", "400d")
    secret = next(line for line in renewed.stdout.splitlines() if "create secret tls" in line)
    assert f"--cert={out / 'tls.crt'}" in shlex.split(secret)


def test_cli_generate_then_refuse_then_renew_then_inspect_then_ca_bundle(tmp_path: Path) -> None:
    out = tmp_path / "certs"
    result = cli("generate", "--service", SERVICE, "--namespace", NAMESPACE, "--dns", "webhook.example.com",
                 "--ip", "10.0.0.7", "--out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"{out / 'tls.crt'}" in result.stdout
    assert "DNS:gpu-admission.gpu-admission.svc.cluster.local, DNS:webhook.example.com, IP:10.0.0.7" in result.stdout
    assert f"create secret tls gpu-admission-tls --cert={out / 'tls.crt'} --key={out / 'tls.key'}" in result.stdout
    assert stat.S_IMODE((out / "ca.key").stat().st_mode) == 0o600

    again = cli("generate", "--service", SERVICE, "--namespace", NAMESPACE, "--out", str(out))
    assert again.returncode == 1
    assert again.stderr.startswith(f"gpu-webhook certs generate: error: {out / 'ca.crt'} already exists")
    assert again.stderr.count("\n") == 1 and "Traceback" not in again.stderr

    kept = cli("renew", "--dir", str(out))
    assert kept.returncode == 0, kept.stderr
    assert "days left); not renewed: renew reissues it from" in kept.stdout

    ca_before = (out / "ca.crt").read_bytes()
    renewed = cli("renew", "--dir", str(out), "--before", "400d")
    assert renewed.returncode == 0, renewed.stderr
    assert renewed.stdout.startswith(f"renewed {out / 'tls.crt'} from {out / 'ca.crt'}")
    assert "kubectl -n gpu-admission create secret tls gpu-admission-tls" in renewed.stdout
    assert "--dry-run=client -o yaml | kubectl apply -f -" in renewed.stdout
    assert (out / "ca.crt").read_bytes() == ca_before

    shown = cli("inspect", str(out / "tls.crt"))
    assert shown.returncode == 0, shown.stderr
    lines = dict(line.split(":", 1) for line in shown.stdout.splitlines())
    assert lines["subject"].strip() == "CN=gpu-admission.gpu-admission.svc"
    assert lines["SANs"].strip().startswith("DNS:gpu-admission, DNS:gpu-admission.gpu-admission,")
    assert lines["issuer"].strip() == "CN=gpu-admission CA for gpu-admission.gpu-admission"
    assert lines["days left"].strip() in ("364", "365")
    assert lines["ext. usage"].strip() == "serverAuth"
    expected_after = certs.certificate_not_after(out / "tls.crt").strftime("%Y-%m-%d %H:%M UTC")
    assert lines["not after"].strip() == expected_after

    bundle = cli("ca-bundle", str(out))
    assert bundle.returncode == 0, bundle.stderr
    assert bundle.stdout.count("\n") == 1
    assert base64.b64decode(bundle.stdout.strip(), validate=True) == (out / "ca.crt").read_bytes()


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["inspect", "{dir}/missing.crt"], 1, "gpu-webhook certs inspect: error: {dir}/missing.crt: no such file"),
        (["ca-bundle", "{dir}"], 1, "gpu-webhook certs ca-bundle: error: {dir}/ca.crt: no such file"),
        (["renew", "--dir", "{dir}"], 1, "gpu-webhook certs renew: error: {dir}/ca.crt: no such file"),
        (["renew", "--dir", "{dir}", "--before", "soon"], 2, "gpu-webhook certs renew: error: --before: duration"),
        (
            ["renew", "--dir", "{dir}", "--before", "1000000d"],
            2,
            "gpu-webhook certs renew: error: --before: duration '1000000d': longer than 100 years",
        ),
        (
            ["renew", "--dir", "{dir}", "--before", "99999999999d"],
            2,
            "gpu-webhook certs renew: error: --before: duration '99999999999d': longer than 100 years",
        ),
    ],
)
def test_cli_errors_are_one_line_without_traceback(tmp_path: Path, args: list[str], code: int, message: str) -> None:
    result = cli(*[a.format(dir=tmp_path) for a in args])
    assert result.returncode == code
    assert result.stderr.startswith(message.format(dir=tmp_path))
    assert result.stderr.count("\n") == 1 and result.stdout == ""


def test_the_certs_command_loads_without_cryptography() -> None:
    """Start-up stays fast: the handlers import the crypto library only when they run."""
    probe = "import sys, webhook.cli.certs_cmd; print('cryptography' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "False", result.stderr
