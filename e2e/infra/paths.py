"""Where the harness keeps downloads (cache) and running servers (state).

The cache is shared by every checkout on the machine and survives ``down``;
the state directory belongs to one checkout and ``down`` empties it.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "CLOCKWORK_INFRA_CACHE"
STATE_ENV = "CLOCKWORK_INFRA_STATE"

REPO_ROOT = Path(__file__).resolve().parents[2]


def default_cache_dir() -> Path:
    """``$CLOCKWORK_INFRA_CACHE``, else ``$XDG_CACHE_HOME/clockwork-infra``."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit).expanduser().resolve()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return (Path(xdg) / "clockwork-infra").resolve()


def default_state_dir() -> Path:
    """``$CLOCKWORK_INFRA_STATE``, else ``<repo>/.infra`` (git-ignored)."""
    explicit = os.environ.get(STATE_ENV)
    if explicit:
        return Path(explicit).expanduser().resolve()
    return REPO_ROOT / ".infra"
