"""The curl examples of docs/api.md's "HTTP/JSON API" section, run with bash and curl
against a real api: each block succeeds, prints JSON, and the error example prints
the error it promises."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from clockwork_svc import app
from clockwork_svc.server.auth import AuthSettings
from tests.integration.test_dev_node import dev_settings

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
TOKEN = "docs-token-0123456789"


def blocks() -> list[str]:
    text = DOC.read_text()
    section = text.split("## HTTP/JSON API", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)```", section, re.DOTALL)


@pytest.fixture
async def http_url(tmp_path: Path) -> AsyncIterator[str]:
    base = dev_settings(tmp_path)
    api = dataclasses.replace(
        base.api,
        auth=AuthSettings.from_pairs(f"acme:{TOKEN}"),
        http_listen=("127.0.0.1", 0),
    )
    async with app.running(dataclasses.replace(base, api=api), api=True, worker=True) as node:
        assert node.http is not None
        yield f"http://127.0.0.1:{node.http.port}"


def json_documents(output: str) -> list[object]:
    decoder = json.JSONDecoder()
    found, at = [], 0
    while at < len(output.strip()):
        while output[at].isspace():
            at += 1
        document, at = decoder.raw_decode(output, at)
        found.append(document)
    return found


async def test_the_curl_examples_run(http_url: str) -> None:
    if shutil.which("curl") is None:
        pytest.fail("curl is not installed")
    examples = blocks()
    assert len(examples) >= 5
    env = {"CLOCKWORK_HTTP": http_url, "CLOCKWORK_TOKEN": TOKEN, "PATH": "/usr/bin:/bin"}
    for example in examples:
        process = await asyncio.create_subprocess_exec(
            "bash",
            "-euo",
            "pipefail",
            "-c",
            example,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await process.communicate()
        assert process.returncode == 0, (example, out, err)
        documents = json_documents(out.decode())
        assert documents, example
        if "every day" in example:
            [error] = documents
            assert isinstance(error, dict)
            assert error["error"]["status"] == "INVALID_ARGUMENT"
            assert error["error"]["field"] == "spec.cron.expression"
        else:
            assert all(isinstance(d, dict) and "error" not in d for d in documents), out
