"""A test set of TLS certificates for the parties of a multi-host run, in MPyC's layout.

``make_certs(out, n)`` writes ``mpyc_ca.crt`` (a fresh CA), and for each party ``party_<i>.key``
(EC P-256, mode 0600) and ``party_<i>.crt`` (``CN = MPyC party <i>``, also as a DNS name, server
and client authentication), the names MPyC's ``--ssl`` and :mod:`protocols.mpyc_net` expect.
The CA's key is not kept: nobody can add a party to this set later. For a deployment each party
should make its own key and have a CA the parties trust sign its request (README).
"""

from __future__ import annotations

import datetime
import os

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from protocols.mpyc_net import party_name

MAX_PARTIES = 1000


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_certs(out: str, n_parties: int, *, days: int = 30) -> list[str]:
    """Write a CA certificate and one key + certificate per party to ``out``; return the paths."""
    if not 1 <= n_parties <= MAX_PARTIES:
        raise ValueError(f"parties must be in [1, {MAX_PARTIES}], got {n_parties}")
    if days < 1:
        raise ValueError(f"days must be >= 1, got {days}")
    os.makedirs(out, mode=0o700, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    valid = (now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days))
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("securevfl test CA")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid[0])
        .not_valid_after(valid[1])
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
        .sign(ca_key, hashes.SHA256())
    )
    paths = [os.path.join(out, "mpyc_ca.crt")]
    _write(paths[0], ca.public_bytes(serialization.Encoding.PEM), 0o644)
    for i in range(n_parties):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(party_name(i)))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(valid[0])
            .not_valid_after(valid[1])
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(party_name(i))]), False)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .sign(ca_key, hashes.SHA256())
        )
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        crt, kf = os.path.join(out, f"party_{i}.crt"), os.path.join(out, f"party_{i}.key")
        _write(kf, key_pem, 0o600)
        _write(crt, cert.public_bytes(serialization.Encoding.PEM), 0o644)
        paths += [crt, kf]
    return paths


def _write(path: str, data: bytes, mode: int) -> None:
    """Create ``path`` with ``mode`` from the start (a key is never readable by others)."""
    if os.path.exists(path):
        os.remove(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
