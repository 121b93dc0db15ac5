"""Run real `clockwork` processes from tests."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

CLOCKWORK = [sys.executable, "-m", "clockwork_svc"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def wait_serving(address: str, timeout_s: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    async with grpc.aio.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while True:
            try:
                reply = await stub.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.aio.AioRpcError:
                pass
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"clockwork at {address} not serving after {timeout_s}s")
            await asyncio.sleep(0.2)


class ClockworkProcess:
    def __init__(self, args: list[str], log_path: Path, env: dict[str, str] | None = None):
        self.args = args
        self.log_path = log_path
        self.env = {**os.environ, **(env or {})}
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> ClockworkProcess:
        log = self.log_path.open("ab")
        self.proc = await asyncio.create_subprocess_exec(
            *CLOCKWORK, *self.args, stdout=log, stderr=log, env=self.env, start_new_session=True
        )
        log.close()
        return self

    async def kill(self, sig: int = signal.SIGKILL) -> int:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(sig)
        return await asyncio.wait_for(self.proc.wait(), 30)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


async def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout_s: float = 60
) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *CLOCKWORK,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()
