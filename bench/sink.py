"""A fast HTTP callback sink in its own process, recording each request's delivery id
(`webhook-id`) and receive time; or, with `--kafka`, a consumer of one topic recording
each message's delivery id and the broker's append time (bench/kafka_io.py).

Run: python -m bench.sink --port P --out FILE [--kafka HOST:PORT --topic T]. Over HTTP
it answers 200 with an empty body to every POST; either way it counts at GET
/_bench/count, and writes `<id>\\t<receive µs>` lines to FILE at POST /_bench/dump (and
on SIGTERM). `SinkProcess` starts and reads it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import uvloop
from aiohttp import web

from bench import kafka_io
from bench.common import free_port
from clockwork_svc.domain.spec import HttpTarget, KafkaTarget, Target


@dataclass(frozen=True, slots=True)
class Arrival:
    delivery_id: str
    received_us: int

    @property
    def received_ms(self) -> int:
        return self.received_us // 1000


class _Recorder:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.ids: list[str] = []
        self.times: list[int] = []

    async def receive(self, request: web.Request) -> web.Response:
        await request.read()
        self.record(request.headers.get("webhook-id", ""), time.time_ns() // 1000)
        return web.Response()

    def record(self, delivery_id: str, received_us: int) -> None:
        self.times.append(received_us)
        self.ids.append(delivery_id)

    async def count(self, _: web.Request) -> web.Response:
        return web.Response(text=str(len(self.ids)))

    async def dump(self, _: web.Request) -> web.Response:
        self.write()
        return web.Response(text=str(len(self.ids)))

    def write(self) -> None:
        lines = [f"{i}\t{t}\n" for i, t in zip(self.ids, self.times, strict=True)]
        self.out.write_text("".join(lines))


async def _serve(port: int, out: Path, kafka: KafkaTopic | None) -> None:
    recorder = _Recorder(out)
    app = web.Application()
    app.router.add_get("/_bench/count", recorder.count)
    app.router.add_post("/_bench/dump", recorder.dump)
    consuming: asyncio.Task[None] | None = None
    if kafka is None:
        app.router.add_post("/{tail:.*}", recorder.receive)
    else:
        await kafka_io.create_topic(kafka.bootstrap, kafka.topic)
        consuming = asyncio.create_task(
            kafka_io.consume(kafka.bootstrap, kafka.topic, recorder.record)
        )
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, backlog=4096).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    if consuming is not None:
        consuming.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await consuming
    recorder.write()
    await runner.cleanup()


@dataclass(frozen=True, slots=True)
class KafkaTopic:
    bootstrap: str
    topic: str


class SinkProcess:
    """The sink as a child process of the benchmark."""

    def __init__(self, out: Path, kafka: KafkaTopic | None = None) -> None:
        self.out = out
        self.kafka = kafka
        self.port = free_port()
        self.pid = 0
        self._proc: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def target(self) -> Target:
        """Where a schedule delivers to this sink."""
        if self.kafka is not None:
            return KafkaTarget(self.kafka.topic)
        return HttpTarget(f"{self.url}/fire")

    async def start(self) -> SinkProcess:
        args = ["--port", str(self.port), "--out", str(self.out)]
        if self.kafka is not None:
            args += ["--kafka", self.kafka.bootstrap, "--topic", self.kafka.topic]
        self._proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "bench.sink", *args)
        self.pid = self._proc.pid
        for _ in range(600):
            try:
                await self.count()
                return self
            except aiohttp.ClientError:
                await asyncio.sleep(0.05)
        raise TimeoutError("bench sink did not start")

    async def count(self) -> int:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{self.url}/_bench/count") as response,
        ):
            return int(await response.text())

    async def wait_for(self, count: int, timeout_s: float, idle_s: float = 5.0) -> int:
        """Wait until `count` arrived, or nothing new arrived for `idle_s`, or timeout."""
        deadline = time.monotonic() + timeout_s
        seen, last_change = -1, time.monotonic()
        while time.monotonic() < deadline:
            got = await self.count()
            if got >= count:
                return got
            if got != seen:
                seen, last_change = got, time.monotonic()
            elif time.monotonic() - last_change > idle_s:
                return got
            await asyncio.sleep(0.2)
        return seen

    async def arrivals(self) -> list[Arrival]:
        """Everything received so far (the sink writes its file, this reads it)."""
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{self.url}/_bench/dump") as response,
        ):
            await response.read()
        found: list[Arrival] = []
        for line in self.out.read_text().splitlines():
            delivery_id, _, received = line.partition("\t")
            found.append(Arrival(delivery_id, int(received)))
        return found

    async def stop(self) -> None:
        if self._proc is not None and self._proc.returncode is None:
            self._proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(self._proc.wait(), 30)


def main() -> None:
    parser = argparse.ArgumentParser(description="bench sink (HTTP, or a Kafka topic)")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--kafka", default=None, help="consume --topic from these brokers")
    parser.add_argument("--topic", default="bench")
    args = parser.parse_args()
    kafka = None if args.kafka is None else KafkaTopic(args.kafka, args.topic)
    uvloop.run(_serve(args.port, args.out, kafka))


if __name__ == "__main__":
    main()
