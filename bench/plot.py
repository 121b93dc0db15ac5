"""Plots as PNGs: the fire benchmark's lag and throughput over time, the soak's memory."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display: write files only

import matplotlib.pyplot as plt
from matplotlib.patches import Patch


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


def memory_over_time(
    series: Mapping[str, Sequence[tuple[float, float]]],
    windows: Sequence[tuple[str, float, float]],
    path: Path,
    title: str,
    until_s: float | None = None,
) -> Path:
    """RSS per process over a run (every `workerN` in one colour: each replacement is a
    line of its own), with each fault window (kind, from s, to s) shaded in its kind's
    colour, up to `until_s`; writes a PNG."""
    fig, ax = plt.subplots(figsize=(10, 5.5))
    worker_colour = None
    for name, points in sorted(series.items()):
        shown = [(t, mb) for t, mb in points if until_s is None or t <= until_s]
        minutes, mbs = [t / 60 for t, _ in shown], [mb for _, mb in shown]
        if re.fullmatch(r"worker\d+", name):
            label = None if worker_colour else "workers (one line each)"
            (line,) = ax.plot(minutes, mbs, color=worker_colour, label=label, linewidth=1)
            worker_colour = line.get_color()
        else:
            ax.plot(minutes, mbs, label=name, linewidth=1)
    kinds = sorted({kind for kind, _, _ in windows})
    colours = {kind: plt.get_cmap("Pastel1")(i % 9) for i, kind in enumerate(kinds)}
    for kind, start, end in windows:
        ax.axvspan(start / 60, end / 60, color=colours[kind], alpha=0.6, linewidth=0)
    process_legend = ax.legend(fontsize="small", loc="upper left")
    ax.add_artist(process_legend)
    patches = [Patch(color=colours[kind], alpha=0.6, label=kind) for kind in kinds]
    if patches:
        ax.legend(handles=patches, fontsize="small", loc="upper right", title="faults")
    ax.set_xlabel("minutes since start")
    ax.set_ylabel("RSS (MiB)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.set_title(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
