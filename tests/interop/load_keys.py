"""Load a governed-exec key pair with Python `cryptography`.

Usage: load_keys.py PREFIX   (reads PREFIX.key and PREFIX.pub)

Exits 0 and prints the raw public key (hex) when the private key loads,
is ed25519, and its public half equals PREFIX.pub; exits 1 otherwise.
"""

import sys

from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
    load_pem_private_key,
    load_pem_public_key,
)


def main() -> int:
    prefix = sys.argv[1]
    try:
        with open(prefix + ".key", "rb") as f:
            private = load_pem_private_key(f.read(), password=None)
        with open(prefix + ".pub", "rb") as f:
            public = load_pem_public_key(f.read())
    except Exception as e:
        print(f"cannot load: {type(e).__name__}: {e}")
        return 1
    if not isinstance(private, Ed25519PrivateKey) or not isinstance(public, Ed25519PublicKey):
        print("not ed25519")
        return 1
    raw = lambda k: k.public_bytes(Encoding.Raw, PublicFormat.Raw)
    if raw(private.public_key()) != raw(public):
        print("the .pub file is not the public half of the .key file")
        return 1
    print(raw(public).hex())
    return 0


if __name__ == "__main__":
    sys.exit(main())
