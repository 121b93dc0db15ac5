"""Standard Webhooks signatures (https://www.standardwebhooks.com/).

`webhook-signature` is a space-separated list of `v1,<base64 HMAC-SHA256>` over
`<webhook-id>.<webhook-timestamp>.<body>`, one per active secret: during a key
rotation the old and the new secret both sign, so receivers can switch at their pace.
Secrets are `whsec_` + base64 of 32 random bytes.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Sequence

SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def secret_key(secret: str) -> bytes:
    """The HMAC key of a `whsec_...` secret; raises ValueError if malformed."""
    if not secret.startswith(SECRET_PREFIX):
        raise ValueError("signing secrets start with whsec_")
    key = base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)
    if len(key) < 24:
        raise ValueError("signing secret too short")
    return key


def signature(secrets_: Sequence[str], msg_id: str, timestamp_s: int, body: bytes) -> str:
    """The `webhook-signature` header value for every active secret, newest first."""
    signed = f"{msg_id}.{timestamp_s}.".encode() + body
    parts = []
    for secret in secrets_:
        digest = hmac.new(secret_key(secret), signed, hashlib.sha256).digest()
        parts.append("v1," + base64.b64encode(digest).decode())
    return " ".join(parts)


def webhook_headers(
    delivery_id: str, timestamp_s: int, body: bytes, secrets_: Sequence[str]
) -> dict[str, str]:
    """The Standard Webhooks headers of one delivery (HTTP headers or Kafka headers)."""
    headers = {"webhook-id": delivery_id, "webhook-timestamp": str(timestamp_s)}
    if secrets_:
        headers["webhook-signature"] = signature(secrets_, delivery_id, timestamp_s, body)
    return headers
