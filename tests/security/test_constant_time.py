"""The admin token check compares in constant time: the authenticator hashes
the presented token and compares digests with hmac.compare_digest (tenant tokens are
looked up by their SHA-256, so a lookup reveals nothing about a token's prefix)."""

from __future__ import annotations

import hmac

import pytest

from clockwork_svc.domain.tenant import hash_token
from clockwork_svc.server.auth import Authenticator, AuthSettings

ADMIN = "constant-time-admin-0123456789"


async def test_admin_token_is_compared_with_compare_digest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[object, object]] = []
    real = hmac.compare_digest

    def spy(a: str, b: str) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr("clockwork_svc.server.auth.hmac.compare_digest", spy)
    authenticator = Authenticator(AuthSettings.from_pairs("", admin_token=ADMIN))

    principal, _ = await authenticator.resolve({"authorization": f"Bearer {ADMIN}"})
    assert principal is not None and principal.admin
    assert calls == [(hash_token(ADMIN), hash_token(ADMIN))]

    calls.clear()
    almost = ADMIN[:-1] + "X"
    principal, problem = await authenticator.resolve({"authorization": f"Bearer {almost}"})
    assert principal is None and problem == "invalid token"
    # The comparison ran on digests of equal length, never on the raw token.
    assert calls == [(hash_token(almost), hash_token(ADMIN))]
    assert all(ADMIN not in (a, b) and almost not in (a, b) for a, b in calls)


def test_settings_keep_only_hashes_of_tokens() -> None:
    settings = AuthSettings.from_pairs(f"acme:{'t' * 20}", admin_token=ADMIN)
    assert settings.admin_token_hashes == frozenset({hash_token(ADMIN)})
    assert dict(settings.token_hashes) == {hash_token("t" * 20): "acme"}
    assert ADMIN not in repr(settings) and "t" * 20 not in repr(settings)
