"""DKIM test keys made on the spot (openssl for RSA, PyNaCl for Ed25519) and mail signed with them.

For tests and measurement scripts; the public half goes to a loopback DNS server
(spamd_lab.loopback_dns), never to the internet's DNS.
"""

from __future__ import annotations

import base64
import subprocess
from dataclasses import dataclass
from pathlib import Path

import dkim  # dkimpy ships no type information
import nacl.encoding
import nacl.signing


@dataclass(frozen=True)
class SigningKey:
    domain: str
    selector: str
    private: bytes
    algorithm: bytes
    dns_value: str  # the TXT record at SELECTOR._domainkey.DOMAIN

    def sign(
        self,
        message: bytes,
        length: bool = False,
        headers: list[bytes] | None = None,
        canonicalize: tuple[bytes, bytes] = (b"relaxed", b"simple"),
    ) -> bytes:
        """`message` with this key's DKIM-Signature on top (c= `canonicalize`: dkimpy's default, or as
        large senders sign, relaxed/relaxed)."""
        signature = dkim.sign(
            message, self.selector.encode(), self.domain.encode(), self.private,
            signature_algorithm=self.algorithm, length=length, canonicalize=canonicalize,
            include_headers=headers or [b"from", b"to", b"subject", b"date", b"list-id"],
        )  # fmt: skip
        return signature + message


def rsa_key(directory: Path, domain: str, selector: str, bits: int = 1024) -> SigningKey:
    """An RSA key: 1024 bits, the least RFC 8301 accepts, keeps tests quick; 2048 is what large senders publish."""
    pem = directory / f"{selector}.{domain}.pem"
    subprocess.run(["openssl", "genrsa", "-out", str(pem), str(bits)], check=True, capture_output=True)
    der = subprocess.run(
        ["openssl", "rsa", "-in", str(pem), "-pubout", "-outform", "DER"],
        check=True,
        capture_output=True,
    ).stdout
    public = base64.b64encode(der).decode()
    return SigningKey(domain, selector, pem.read_bytes(), b"rsa-sha256", f"v=DKIM1; k=rsa; p={public}")


def ed25519_key(domain: str, selector: str) -> SigningKey:
    key = nacl.signing.SigningKey.generate()
    private = key.encode(encoder=nacl.encoding.Base64Encoder)
    public = key.verify_key.encode(encoder=nacl.encoding.Base64Encoder).decode()
    return SigningKey(domain, selector, private, b"ed25519-sha256", f"v=DKIM1; k=ed25519; p={public}")
