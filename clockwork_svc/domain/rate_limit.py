"""Token bucket arithmetic (pure: the caller passes the time)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TokenBucket:
    """A bucket that reserves: every call takes a token, borrowing from the future when
    the bucket is empty, and says how long to wait for it. A backlog of N firings thus
    gets N distinct slots at the rate, instead of all retrying at the same instant."""

    rate_per_s: float
    burst: float
    tokens: float | None = None
    updated_s: float = 0.0

    def reserve(self, now_s: float) -> float:
        """Take one token; returns the seconds until it is due (0: now)."""
        if self.rate_per_s <= 0:
            return 0.0
        if self.tokens is None:  # first use: a full bucket
            self.tokens, self.updated_s = self.burst, now_s
        self.tokens = min(self.burst, self.tokens + (now_s - self.updated_s) * self.rate_per_s)
        self.updated_s = now_s
        self.tokens -= 1.0
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate_per_s

    def try_take(self, now_s: float) -> bool:
        """Take one token if one is there now (nothing is borrowed otherwise)."""
        if self.rate_per_s <= 0:
            return True
        if self.tokens is None:
            self.tokens, self.updated_s = self.burst, now_s
        self.tokens = min(self.burst, self.tokens + (now_s - self.updated_s) * self.rate_per_s)
        self.updated_s = now_s
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True

    def retune(self, rate_per_s: float, burst: float) -> None:
        """Change the rate (a new share, or new limits) keeping the tokens earned so far."""
        self.rate_per_s = rate_per_s
        self.burst = burst
        if self.tokens is not None and self.tokens > burst:
            self.tokens = burst
