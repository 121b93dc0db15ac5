"""Api call overhead: the server CPU that the api's call pipeline (admission,
authentication, decoding, trace context: clockwork_svc/server/call_pipeline.py) adds
to a gRPC call, against the same call on a bare grpc.aio server.

Usage: python -m bench.api_overhead [--n 20000] [--concurrency 256] [--rounds 3]

No store and no api process: the servicer answers CreateSchedule at once with an
empty reply, so what is measured is gRPC's own cost of a call and the pipeline's on
top of it. Each round starts one server process per mode (`bare`: the servicer alone;
`pipeline`: the servicer behind CallPipeline with a tenant token, as `clockwork api`
serves it), warms it with 2,000 calls, sends --n calls with --concurrency in flight
from this process, and reads the server's CPU time over them. Both modes receive the
same request (the one-shot bench.accept creates) and the same metadata. Reports calls/s and the
server's CPU per call for each mode and round, and the pipeline's share: pipeline -
bare in microseconds, and pipeline / bare, within each round. A table on stdout,
JSON in bench/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import psutil

from bench.accept import far_spec
from bench.common import machine, print_table, ratio, write_json
from bench.resources import cpu_s
from clockwork_svc.api.v1 import convert
from clockwork_svc.api.v1 import scheduler_pb2 as pb
from clockwork_svc.api.v1 import scheduler_pb2_grpc as pb_grpc
from clockwork_svc.observability.tracing import Tracing
from clockwork_svc.server.admission import Admission
from clockwork_svc.server.auth import Authenticator, AuthSettings
from clockwork_svc.server.call_pipeline import CallPipeline
from clockwork_svc.server.grpc_server import MAX_IN_FLIGHT, SERVICE_NAME

MODES = ("bare", "pipeline")
TENANT = "bench"
TOKEN = "bench-api-overhead-token"
WARM_UP_CALLS = 2_000


async def _answer(
    request: pb.CreateScheduleRequest, context: grpc.aio.ServicerContext[Any, Any]
) -> pb.CreateScheduleResponse:
    return pb.CreateScheduleResponse()


async def serve(mode: str) -> None:
    """Serve on a free loopback port, print it, and run until killed."""
    interceptors: list[grpc.aio.ServerInterceptor] = []
    if mode == "pipeline":
        auth = Authenticator(AuthSettings.from_pairs(f"{TENANT}:{TOKEN}"))
        interceptors.append(CallPipeline(Admission(MAX_IN_FLIGHT), lambda: None, auth, Tracing()))
    server = grpc.aio.server(interceptors=interceptors)
    # Registered as the generated add_*_to_server functions register a method.
    methods = {
        "CreateSchedule": grpc.unary_unary_rpc_method_handler(
            _answer,
            request_deserializer=pb.CreateScheduleRequest.FromString,
            response_serializer=pb.CreateScheduleResponse.SerializeToString,
        )
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, methods),))
    server.add_registered_method_handlers(SERVICE_NAME, methods)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    await server.wait_for_termination()


def request() -> pb.CreateScheduleRequest:
    """A create of the one-shot bench.accept creates."""
    return pb.CreateScheduleRequest(key="bench-key-000001", spec=convert.spec_to_pb(far_spec()))


async def send(port: int, n: int, concurrency: int) -> float:
    """Send n calls with `concurrency` in flight; returns the seconds they took."""
    message = request()
    metadata = (("authorization", f"Bearer {TOKEN}"),)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.SchedulerServiceStub(channel)
        calls = iter(range(n))

        async def caller() -> None:
            for _ in calls:
                await stub.CreateSchedule(message, metadata=metadata)

        started = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(concurrency)))
        return time.perf_counter() - started


def measure(mode: str, n: int, concurrency: int) -> dict[str, Any]:
    server = subprocess.Popen(
        [sys.executable, "-m", "bench.api_overhead", "--serve", mode],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        asyncio.run(send(port, min(WARM_UP_CALLS, n), min(concurrency, 64)))
        process = psutil.Process(server.pid)
        before = cpu_s(process)
        elapsed = asyncio.run(send(port, n, concurrency))
        used = cpu_s(process) - before
    finally:
        server.terminate()
        server.wait(10)
    return {
        "mode": mode,
        "n": n,
        "calls_per_s": n / elapsed,
        "server_cpu_us_per_call": used / n * 1e6,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    rounds: list[dict[str, Any]] = []
    for number in range(1, args.rounds + 1):
        rows = {mode: measure(mode, args.n, args.concurrency) for mode in MODES}
        bare, pipeline = rows["bare"], rows["pipeline"]
        rounds.append(
            {
                "round": number,
                "bare_calls_per_s": bare["calls_per_s"],
                "pipeline_calls_per_s": pipeline["calls_per_s"],
                "bare_cpu_us": bare["server_cpu_us_per_call"],
                "pipeline_cpu_us": pipeline["server_cpu_us_per_call"],
                "added_us": pipeline["server_cpu_us_per_call"] - bare["server_cpu_us_per_call"],
                "pipeline_over_bare": ratio(
                    pipeline["server_cpu_us_per_call"], bare["server_cpu_us_per_call"]
                ),
            }
        )
    return {
        "benchmark": "api_overhead",
        "machine": machine(),
        "n": args.n,
        "concurrency": args.concurrency,
        "rounds": rounds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000, help="measured calls per mode")
    parser.add_argument("--concurrency", type=int, default=256, help="calls in flight")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of both modes")
    parser.add_argument("--out", type=Path, default=None, help="results directory")
    parser.add_argument("--serve", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.serve))
        return
    for name in ("n", "concurrency", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    report = run(args)
    print_table("api_overhead: server CPU per call, bare and with the pipeline", report["rounds"])
    print(f"json: {write_json('api_overhead', report, args.out)}")


if __name__ == "__main__":
    main()
