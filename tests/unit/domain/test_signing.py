"""Signatures verified with an independent implementation (the standardwebhooks package)."""

from __future__ import annotations

import time

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from clockwork_svc.domain.signing import new_secret, secret_key, signature


def headers(msg_id: str, ts: int, sig: str) -> dict[str, str]:
    return {"webhook-id": msg_id, "webhook-timestamp": str(ts), "webhook-signature": sig}


def test_independent_verifier_accepts_our_signature() -> None:
    secret = new_secret()
    now = int(time.time())
    body = b'{"order": 42}'
    sig = signature([secret], "msg_1", now, body)
    assert Webhook(secret).verify(body, headers("msg_1", now, sig)) == {"order": 42}


def test_rotation_both_secrets_verify_and_a_tampered_body_does_not() -> None:
    old, new = new_secret(), new_secret()
    now = int(time.time())
    body = b"payload"
    sig = signature([new, old], "msg_2", now, body)
    assert len(sig.split(" ")) == 2
    for secret in (old, new):
        Webhook(secret).verify(body, headers("msg_2", now, sig), json_parse=False)
    with pytest.raises(WebhookVerificationError):
        Webhook(new).verify(b"tampered", headers("msg_2", now, sig), json_parse=False)
    with pytest.raises(WebhookVerificationError):
        Webhook(new_secret()).verify(body, headers("msg_2", now, sig), json_parse=False)


def test_malformed_secrets_are_rejected() -> None:
    for bad in ("", "plain", "whsec_", "whsec_!!!", "whsec_YWJj"):
        with pytest.raises(
            ValueError, match=r"secret|base64|Incorrect|Invalid|Non-base64|characters"
        ):
            secret_key(bad)
