"""The fire benchmark's plot: firing lag and throughput over time, one PNG."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display: write files only

import matplotlib.pyplot as plt


def lag_and_throughput(runs: Mapping[str, Mapping[str, list[float]]], path: Path) -> Path:
    """`runs` maps a label to `analysis.series` output; writes a two-panel PNG."""
    fig, (lag_ax, rate_ax) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    for label, s in runs.items():
        (line,) = lag_ax.plot(s["t_s"], s["lag_p99_ms"], label=f"{label} p99")
        lag_ax.plot(
            s["t_s"], s["lag_p50_ms"], linestyle="--", color=line.get_color(), label=f"{label} p50"
        )
        rate_ax.plot(s["t_s"], s["deliveries"], color=line.get_color(), label=label)
    lag_ax.set_ylabel("firing lag (ms, receive - due)")
    lag_ax.set_yscale("symlog", linthresh=10)
    lag_ax.legend(fontsize="small")
    lag_ax.grid(True, alpha=0.3)
    rate_ax.set_ylabel("deliveries / s")
    rate_ax.set_xlabel("seconds since the first due time")
    rate_ax.legend(fontsize="small")
    rate_ax.grid(True, alpha=0.3)
    fig.suptitle("Clockwork fire benchmark")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
