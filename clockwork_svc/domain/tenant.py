"""A tenant: its credentials and signing secrets (and, later, its delivery limits).

Tokens are stored only as SHA-256 hashes; a token is shown once, when issued.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

TOKEN_PREFIX = "cwt_"
# Secrets kept at once: the newest plus the ones still being rotated out.
MAX_SIGNING_SECRETS = 3
MAX_TOKENS = 10


@dataclass(frozen=True, slots=True)
class Tenant:
    name: str
    created_ms: int
    updated_ms: int
    version: int
    # Newest first; every one of them signs each delivery.
    signing_secrets: tuple[str, ...] = ()
    token_hashes: tuple[str, ...] = ()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
