"""Verify a governed-exec receipt with an independent DSSE implementation.

Usage: dsse_verify.py RECEIPT.json RUNNER.pub

Uses Python `securesystemslib` (DSSE envelope, PAE, signature) and
`cryptography` (PEM key loading), with the key id securesystemslib computes
by default (`SSlibKey.from_crypto`): no flag, no key id passed by hand.
Prints the outcome class and exits 0 when the signature verifies; exits 1
with the error otherwise.
"""

import json
import sys

from cryptography.hazmat.primitives.serialization import load_pem_public_key
from securesystemslib.dsse import Envelope
from securesystemslib.signer import SSlibKey


def main() -> int:
    receipt, pub = sys.argv[1], sys.argv[2]
    with open(pub, "rb") as f:
        key = SSlibKey.from_crypto(load_pem_public_key(f.read()))
    with open(receipt, "rb") as f:
        envelope = Envelope.from_dict(json.load(f))
    try:
        envelope.verify([key], 1)
    except Exception as e:  # VerificationError and friends
        print(f"NOT VERIFIED: {type(e).__name__}: {e}")
        return 1
    statement = json.loads(envelope.payload)
    assert envelope.payload_type == "application/vnd.in-toto+json"
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    print(statement["predicate"]["outcome"]["class"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
