from __future__ import annotations

import asyncio
import contextlib

import aiohttp

from clockwork_svc.devtools import receiver
from tests.support.processes import free_port


async def test_receiver_prints_each_callback_and_answers_the_chosen_status() -> None:
    lines: list[str] = []
    port = free_port()
    server = asyncio.create_task(receiver.serve("127.0.0.1", port, 503, lines.append))
    try:
        for _ in range(50):
            if lines:
                break
            await asyncio.sleep(0.05)
        async with aiohttp.ClientSession() as http:
            headers = {"webhook-id": "msg_1", "webhook-timestamp": "1700000000"}
            async with http.post(
                f"http://127.0.0.1:{port}/hook?x=1", data=b"{}", headers=headers
            ) as response:
                assert response.status == 503
    finally:
        server.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await server
    assert lines[0].startswith("listening on")
    assert "POST /hook?x=1 id=msg_1 ts=1700000000 body=b'{}'" in lines[1]
