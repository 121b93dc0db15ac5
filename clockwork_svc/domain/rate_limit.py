"""Token bucket arithmetic (pure: the caller passes the time)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TokenBucket:
    rate_per_s: float
    burst: float
    tokens: float = -1.0
    updated_s: float = 0.0

    def take(self, now_s: float) -> float:
        """Take one token. Returns 0 if granted, else the seconds until one is available."""
        if self.rate_per_s <= 0:
            return 0.0
        if self.tokens < 0:  # first use: a full bucket
            self.tokens, self.updated_s = self.burst, now_s
        self.tokens = min(self.burst, self.tokens + (now_s - self.updated_s) * self.rate_per_s)
        self.updated_s = now_s
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate_per_s

    def retune(self, rate_per_s: float, burst: float) -> None:
        """Change the rate (a new share, or new limits) keeping the tokens earned so far."""
        self.rate_per_s = rate_per_s
        self.burst = burst
        if self.tokens > burst:
            self.tokens = burst
