"""`clockwork dev` and the CLI as real processes: durability across kill -9, errors."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import time
from pathlib import Path

from tests.support.processes import ClockworkProcess, free_port, run_cli, wait_serving
from tests.support.sink import RecordingSink


async def start_dev(
    data_dir: Path, port: int, log: Path, *extra: str, env: dict[str, str] | None = None
) -> ClockworkProcess:
    proc = await ClockworkProcess(
        [
            "dev",
            "--data-dir",
            str(data_dir),
            "--listen",
            f"127.0.0.1:{port}",
            "--ops-listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
            *extra,
        ],
        log,
        env,
    ).start()
    await wait_serving(f"127.0.0.1:{port}")
    return proc


async def test_acknowledged_schedule_survives_kill_9(tmp_path: Path, sink: RecordingSink) -> None:
    port = free_port()
    server = f"127.0.0.1:{port}"
    dev = await start_dev(tmp_path / "data", port, tmp_path / "dev.log")
    try:
        code, out, err = await run_cli(
            "schedule",
            "create",
            "--server",
            server,
            "--tenant",
            "acme",
            "--key",
            "survivor",
            "--in",
            "3s",
            "--url",
            sink.url + "/survivor",
            "--payload",
            "kept",
            "--json",
        )
        assert code == 0, err
        assert json.loads(out)["created"] is True
    finally:
        assert await dev.kill(signal.SIGKILL) == -signal.SIGKILL
    assert sink.received == []
    dev = await start_dev(tmp_path / "data", port, tmp_path / "dev.log")
    try:
        [got] = await sink.wait_for("/survivor", 1, timeout_s=20)
        assert got.body == b"kept"
        code, out, _ = await run_cli(
            "schedule", "get", "survivor", "--server", server, "--tenant", "acme", "--json"
        )
        assert json.loads(out)["state"] == "COMPLETED"
    finally:
        await dev.kill(signal.SIGTERM)


async def test_sigterm_shuts_down_cleanly(tmp_path: Path) -> None:
    port = free_port()
    dev = await start_dev(tmp_path / "data", port, tmp_path / "dev.log")
    # It says where its dashboard and HTTP API are (a free port here, 7080 by default).
    said = r"dashboard at http://127\.0\.0\.1:\d+/ui, HTTP/JSON API at"
    for _ in range(50):
        if re.search(said, dev.log()):
            break
        await asyncio.sleep(0.1)
    assert re.search(said, dev.log()), dev.log()
    started = time.monotonic()
    assert await dev.kill(signal.SIGTERM) == 0
    assert time.monotonic() - started < 15
    assert "shutting down" in dev.log()


async def test_cli_reports_bad_input_in_one_line(tmp_path: Path, sink: RecordingSink) -> None:
    port = free_port()
    server = f"127.0.0.1:{port}"
    dev = await start_dev(tmp_path / "data", port, tmp_path / "dev.log")
    try:
        base = ["schedule", "create", "--server", server, "--key", "k", "--url", sink.url]
        code, _, err = await run_cli(*base, "--cron", "61 * * * *")
        assert code == 1
        assert err.strip().startswith("error: INVALID_ARGUMENT: spec.cron")
        assert len(err.strip().splitlines()) == 1
        code, _, err = await run_cli(*base, "--cron", "0 * * * *", "--tz", "Mars/Olympus")
        assert code == 1 and "spec.cron.timezone" in err
        code, _, err = await run_cli(*base, "--every", "0s")
        assert code == 1 and "spec.interval.every" in err
        code, _, err = await run_cli(
            "schedule",
            "create",
            "--server",
            server,
            "--key",
            "k",
            "--url",
            "ftp://x/",
            "--in",
            "1s",
        )
        assert code == 1 and "spec.http.url" in err
        code, _, err = await run_cli(*base, "--in", "soon")
        assert code == 2 and "--in" in err
        code, _, err = await run_cli("schedule", "get", "missing", "--server", server)
        assert code == 1 and "NOT_FOUND" in err
        code, out, _ = await run_cli("schedule", "list", "--server", server, "--json")
        assert code == 0 and json.loads(out) == {}
        code, out, _ = await run_cli("dlq", "list", "--server", server, "--json")
        assert code == 0 and json.loads(out) == {}
        code, out, _ = await run_cli("dlq", "redrive", "--server", server, "--key", "k")
        assert code == 0 and out.strip() == "redriven: 0  skipped: 0"
        code, _, err = await run_cli(
            "dlq", "list", "--server", server, "--since", "2030-01-01", "--until", "2029-01-01"
        )
        assert code == 1 and "INVALID_ARGUMENT: range.since" in err
    finally:
        await dev.kill(signal.SIGTERM)


async def test_gc_young_threshold_reaches_the_process(tmp_path: Path) -> None:
    """The start-up log line reads the threshold back from the collector."""
    info = ("--log-level", "INFO")
    cases = [
        (["--gc-young-threshold", "2500"], {}, 2500),
        ([], {"CLOCKWORK_GC_YOUNG_THRESHOLD": "3500"}, 3500),
        (["--gc-young-threshold", "1000000"], {}, 1_000_000),
        ([], {"CLOCKWORK_GC_YOUNG_THRESHOLD": ""}, 10_000),  # unset: the default
    ]
    for i, (flags, env, expected) in enumerate(cases):
        log = tmp_path / f"{i}.log"
        dev = await start_dev(tmp_path / str(i), free_port(), log, *info, *flags, env=env)
        await dev.kill(signal.SIGTERM)
        assert f"young generation collected every {expected} allocations" in dev.log()


async def test_gc_idle_threshold_reaches_the_process(tmp_path: Path) -> None:
    """The start-up log line says whether the worker collects between deliveries."""
    info = ("--log-level", "INFO")
    cases = [
        ([], {}, "young generation holds 1000 allocations"),  # the default
        (["--gc-idle-threshold", "2500"], {}, "young generation holds 2500 allocations"),
        ([], {"CLOCKWORK_GC_IDLE_THRESHOLD": "0"}, "idle collections off"),
    ]
    for i, (flags, env, expected) in enumerate(cases):
        log = tmp_path / f"{i}.log"
        dev = await start_dev(tmp_path / str(i), free_port(), log, *info, *flags, env=env)
        await dev.kill(signal.SIGTERM)
        assert expected in dev.log()


async def test_gc_young_threshold_out_of_range_is_refused(tmp_path: Path) -> None:
    for bad in ("0", "99", "1000001", "lots"):
        code, _, err = await run_cli(
            "dev", "--data-dir", str(tmp_path), "--gc-young-threshold", bad
        )
        assert code == 2, err
        assert "--gc-young-threshold" in err
    assert not (tmp_path / "clockwork.db").exists()


async def test_dev_refuses_non_loopback_without_tokens(tmp_path: Path) -> None:
    code, _, err = await run_cli(
        "dev", "--data-dir", str(tmp_path), "--listen", f"0.0.0.0:{free_port()}"
    )
    assert code == 2
    assert "--api-tokens" in err


async def test_unreachable_server_is_one_clear_line() -> None:
    code, _, err = await run_cli("schedule", "list", "--server", f"127.0.0.1:{free_port()}")
    assert code == 1
    assert err.startswith("error: UNAVAILABLE")
    await asyncio.sleep(0)


async def test_unreachable_cassandra_retries_then_fails_with_one_clear_line() -> None:
    closed = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    code, _, err = await run_cli(
        "api",
        "--cassandra",
        closed,
        "--cassandra-connect-timeout",
        "3",
        "--listen",
        f"127.0.0.1:{free_port()}",
        "--ops-listen",
        "127.0.0.1:0",
    )
    elapsed = time.monotonic() - started
    assert code == 1
    assert 2.5 <= elapsed < 30
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("Error: store unavailable") and closed in last
