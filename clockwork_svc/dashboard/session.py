"""Who is signed in to the dashboard, and the CSRF token of their forms.

The session cookie holds the caller's API token (HttpOnly, SameSite=Strict, Secure
over TLS, path /ui): every page calls the API with it, so the dashboard has no
credential of its own and a tenant sees what its token may see. A server without auth
takes a tenant name instead. The CSRF token of a session is an HMAC of a fixed
message keyed by its token (by a secret of the process when there is none), so any
api replica can check it and it changes with the session.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

TOKEN_COOKIE = "clockwork_token"
TENANT_COOKIE = "clockwork_tenant"
_CSRF_MESSAGE = b"clockwork dashboard csrf v1"


@dataclass(frozen=True, slots=True)
class Session:
    token: str
    tenant: str  # the tenant an admin acts for, or the tenant of a server without auth

    @property
    def signed_in(self) -> bool:
        return bool(self.token or self.tenant)

    def metadata(self) -> tuple[tuple[str, str], ...]:
        found: list[tuple[str, str]] = []
        if self.token:
            found.append(("authorization", f"Bearer {self.token}"))
        if self.tenant:
            found.append(("clockwork-tenant", self.tenant))
        return tuple(found)


class Csrf:
    def __init__(self, process_secret: bytes | None = None) -> None:
        self._secret = process_secret or secrets.token_bytes(32)

    def token(self, session: Session) -> str:
        key = session.token.encode() if session.token else self._secret + session.tenant.encode()
        return hmac.new(key, _CSRF_MESSAGE, hashlib.sha256).hexdigest()

    def valid(self, session: Session, given: str) -> bool:
        return bool(given) and hmac.compare_digest(self.token(session), given)
