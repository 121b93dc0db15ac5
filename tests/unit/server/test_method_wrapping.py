"""Interceptors wrap a method's handler once (server/method_wrapping.py): later calls
are answered from the table without running the rest of the chain; unknown methods
are never remembered."""

from __future__ import annotations

from collections import Counter
from typing import Any

import grpc

from clockwork_svc.server.method_wrapping import Handler, MethodWrapping


class Details:
    def __init__(self, method: str) -> None:
        self.method = method
        self.invocation_metadata = ()


class Tagging(MethodWrapping):
    """Wraps each unary handler, counting the wraps per method."""

    def __init__(self) -> None:
        super().__init__()
        self.wraps: Counter[str] = Counter()

    def wrap(self, method: str, handler: Handler) -> Handler:
        self.wraps[method] += 1
        assert handler.unary_unary is not None
        return grpc.unary_unary_rpc_method_handler(handler.unary_unary)


async def test_each_method_is_wrapped_once_and_unknown_methods_are_not_kept() -> None:
    async def echo(request: Any, context: Any) -> Any:
        return request

    lookups: Counter[str] = Counter()
    known: dict[str, Handler] = {"/a.S/One": grpc.unary_unary_rpc_method_handler(echo)}

    async def continuation(details: Any) -> Handler | None:
        lookups[details.method] += 1
        return known.get(details.method)

    interceptor = Tagging()
    first = await interceptor.intercept_service(continuation, Details("/a.S/One"))  # type: ignore[arg-type]
    for _ in range(5):
        again = await interceptor.intercept_service(continuation, Details("/a.S/One"))  # type: ignore[arg-type]
        assert again is first
    for _ in range(3):
        assert await interceptor.intercept_service(continuation, Details("/a.S/Nope")) is None  # type: ignore[arg-type]
    assert first is not None and first is not known["/a.S/One"]
    assert interceptor.wraps == {"/a.S/One": 1}
    assert lookups == {"/a.S/One": 1, "/a.S/Nope": 3}
