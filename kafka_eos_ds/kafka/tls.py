"""PKCS#12 stores as PEM text, for the clients that cannot read PKCS#12 themselves.

librdkafka reads a PKCS#12 key store but not a PKCS#12 trust store, and kafka-python's
``ssl.SSLContext`` reads neither. Both get PEM text, converted here by the ``openssl``
command (the project does not depend on a crypto package); the store's password travels
in the environment, never on the command line.
"""

from __future__ import annotations

import re

from kafka_eos_ds.errors import ConfigError


def pkcs12_certificates(location: str, password: str | None) -> str:
    """The certificates of a PKCS#12 trust store as PEM text."""
    return pkcs12_to_pem(location, password, "kafka.ssl.truststore", keys=False)


def pkcs12_key_and_chain(location: str, password: str | None) -> str:
    """A PKCS#12 key store's private key and certificate chain as PEM text (the key
    unencrypted: the caller keeps it in memory or in a 0600 file)."""
    pem = pkcs12_to_pem(location, password, "kafka.ssl.keystore", keys=True)
    if "PRIVATE KEY-----" not in pem:
        raise ConfigError(f"Kafka option 'kafka.ssl.keystore.location': {location!r} holds no private key.")
    return pem


def pkcs12_to_pem(location: str, password: str | None, option: str, *, keys: bool) -> str:
    """A PKCS#12 file as PEM text: its certificates, and with ``keys`` its private key."""
    import shutil
    import subprocess

    openssl = shutil.which("openssl")
    if openssl is None:
        raise ConfigError(f"Option '{option}.location' is a PKCS12 file, which kafka_eos converts with the "
                          "'openssl' command; install OpenSSL on this machine, or convert the store to PEM "
                          f"(openssl pkcs12 -in store.p12 -out store.pem) and pass that file.")
    env = {"PATH": "/usr/bin:/bin", "KAFKA_EOS_P12_PASSWORD": password or ""}
    base = [openssl, "pkcs12", "-in", location, "-passin", "env:KAFKA_EOS_P12_PASSWORD"]
    base += ["-nodes"] if keys else ["-nokeys"]
    for extra in ([], ["-legacy"]):  # stores written by older keytools use RC2 (OpenSSL 3 "legacy")
        done = subprocess.run(base + extra, env=env, capture_output=True, text=True, timeout=30)
        if done.returncode == 0 and "-----BEGIN CERTIFICATE-----" in done.stdout:
            return _pem_blocks(done.stdout)
    raise ConfigError(f"Option '{option}.location': {location!r} could not be read as PKCS12 (wrong "
                      f"'{option}.password'?).")


def _pem_blocks(text: str) -> str:
    # openssl prints "Bag Attributes" lines between the blocks; keep the blocks only.
    found = re.finditer(r"-----BEGIN ([A-Z ]+)-----.*?-----END \1-----", text, re.DOTALL)
    return "".join(m.group(0) + "\n" for m in found)
