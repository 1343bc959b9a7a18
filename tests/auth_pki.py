"""A throw-away PKI for TLS tests, made with the `openssl` command: a CA, a server certificate
for 127.0.0.1 and localhost, a client certificate, and a second CA that nobody trusts."""

from __future__ import annotations

import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

EC_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    rogue_ca: Path
    rogue_client_cert: Path
    rogue_client_key: Path


def openssl_available() -> bool:
    return shutil.which("openssl") is not None


def _openssl(*args: str) -> None:
    done = subprocess.run(["openssl", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed:\n{done.stderr}")


def _ca(folder: Path, name: str) -> tuple[Path, Path]:
    cert, key = folder / f"{name}.pem", folder / f"{name}.key"
    _openssl(
        "req", "-x509", *EC_KEY, "-keyout", str(key), "-out", str(cert), "-days", "2",
        "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        "-addext", "subjectKeyIdentifier=hash",
    )  # fmt: skip
    return cert, key


def _leaf(
    folder: Path, name: str, ca: tuple[Path, Path], extensions: list[str]
) -> tuple[Path, Path]:
    cert, key, csr = folder / f"{name}.pem", folder / f"{name}.key", folder / f"{name}.csr"
    ext = folder / f"{name}.ext"
    ext.write_text(
        "\n".join(
            [
                "basicConstraints=critical,CA:FALSE",
                "keyUsage=critical,digitalSignature,keyEncipherment",
                "subjectKeyIdentifier=hash",
                "authorityKeyIdentifier=keyid,issuer",
                *extensions,
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    _openssl("req", *EC_KEY, "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={name}")
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]),
        "-set_serial", str(secrets.randbelow(2**62) + 1),
        "-days", "2", "-extfile", str(ext), "-out", str(cert),
    )  # fmt: skip
    return cert, key


def make_pki(folder: Path) -> Pki:
    folder.mkdir(parents=True, exist_ok=True)
    ca = _ca(folder, "test-ca")
    server = _leaf(
        folder,
        "server",
        ca,
        ["subjectAltName=IP:127.0.0.1,DNS:localhost", "extendedKeyUsage=serverAuth"],
    )
    client = _leaf(folder, "client", ca, ["extendedKeyUsage=clientAuth"])
    rogue_ca = _ca(folder, "rogue-ca")
    rogue_client = _leaf(folder, "rogue-client", rogue_ca, ["extendedKeyUsage=clientAuth"])
    return Pki(
        ca=ca[0],
        server_cert=server[0],
        server_key=server[1],
        client_cert=client[0],
        client_key=client[1],
        rogue_ca=rogue_ca[0],
        rogue_client_cert=rogue_client[0],
        rogue_client_key=rogue_client[1],
    )
