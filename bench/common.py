"""Shared helpers of the benchmarks: clocks, percentiles, the results directory, the
printed table and the JSON written beside it."""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def now_us() -> int:
    return time.time_ns() // 1_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def pct(values: Sequence[float], q: float) -> float:
    """The q-quantile (nearest rank) of `values`; NaN for none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(q * len(ordered)))])


def latency_summary(latencies_ms: Sequence[float]) -> dict[str, float]:
    ordered = sorted(latencies_ms)
    return {
        "p50_ms": pct(ordered, 0.5),
        "p99_ms": pct(ordered, 0.99),
        "p999_ms": pct(ordered, 0.999),
        "max_ms": float(ordered[-1]) if ordered else float("nan"),
    }


def machine() -> dict[str, Any]:
    load = os.getloadavg()
    return {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "loadavg_at_start": [round(x, 2) for x in load],
        "note": "shared machine (several engineers): compare ratios measured in one run",
    }


WARM_UP_FRACTION = 0.25


def warm_up_count(n: int, fraction: float = WARM_UP_FRACTION) -> int:
    """How many operations a warm-up before a run of `n` makes: `fraction` of them, at
    least 10."""
    return max(10, int(n * fraction))


def warm_up(n: int, window_ms: int, fraction: float = WARM_UP_FRACTION) -> tuple[int, int]:
    """The warm-up run before a measured one: `fraction` of its firings over the same
    fraction of its window (the same offered rate), at least 10 over a second. A
    just-started Cassandra compiles its hot paths during its first thousands of
    requests (bench.peers measured a 565 ms median lag cold, 1 ms warm, same rate)."""
    return warm_up_count(n, fraction), max(1000, int(window_ms * fraction))


def add_warm_up(parser: argparse.ArgumentParser, of: str = "--m and --window-s") -> None:
    """`--warm-up FRACTION` (default WARM_UP_FRACTION; 0: no warm-up run): a first
    run, not measured, of that fraction of the options named by `of`."""
    parser.add_argument(
        "--warm-up",
        type=float,
        default=WARM_UP_FRACTION,
        help=f"first run, not measured: this fraction of {of} (0: none)",
    )


def ratio(numerator: float, denominator: float) -> float:
    return round(numerator / denominator, 3) if denominator else float("nan")


def write_json(name: str, report: Mapping[str, Any], directory: Path | None = None) -> Path:
    """Write `<directory>/<name>.json` (default bench/results/) and return its path."""
    out = directory or RESULTS_DIR
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps(report, indent=2, default=str) + "\n")
    return path


def _shown(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.3g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def print_table(title: str, rows: Sequence[Mapping[str, Any]]) -> None:
    """Rows of equal keys as an aligned text table (missing cells shown as '-')."""
    if not rows:
        return
    columns = list(dict.fromkeys(k for row in rows for k in row))
    cells = [[_shown(row.get(c, "-")) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    print(f"\n{title}")
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    for row, r in zip(rows, cells, strict=True):
        print(
            "  ".join(
                v.ljust(w) if isinstance(row.get(c), str) else v.rjust(w)
                for c, v, w in zip(columns, r, widths, strict=True)
            )
        )
