"""What a peer scheduler's job does at fire time: POST the payload to the sink with
the same headers a Clockwork worker sends, on a kept-alive connection per thread."""

from __future__ import annotations

import http.client
import threading
import time
from urllib.parse import urlsplit

_local = threading.local()


def post(url: str, payload: bytes, delivery_id: str) -> int:
    parts = urlsplit(url)
    key = (parts.hostname, parts.port)
    conn: http.client.HTTPConnection | None = getattr(_local, "conns", {}).get(key)
    if conn is None:
        conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
        _local.conns = {**getattr(_local, "conns", {}), key: conn}
    headers = {
        "Content-Type": "application/json",
        "webhook-id": delivery_id,
        "webhook-timestamp": str(int(time.time())),
    }
    try:
        conn.request("POST", parts.path, body=payload, headers=headers)
        response = conn.getresponse()
        response.read()
    except (OSError, http.client.HTTPException):
        conn.close()  # reconnect once: the sink may have closed an idle connection
        conn.request("POST", parts.path, body=payload, headers=headers)
        response = conn.getresponse()
        response.read()
    return response.status
