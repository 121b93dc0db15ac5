"""Fixtures for the Kubernetes tests: the control plane and tools that
`python -m e2e.infra up` starts and builds (kube-apiserver, controller-manager,
scheduler, kwok; kubectl and helm), read from its env lines."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import require_server

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "clockwork"


@dataclass(frozen=True)
class KubeTools:
    kubeconfig: str
    kubectl: str
    helm: str
    version: str

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": self.kubeconfig}

    def run(self, *argv: str, stdin: str | None = None, check: bool = True) -> str:
        """kubectl/helm synchronously (for fixtures); raises with stderr on failure."""
        proc = subprocess.run(
            argv, input=stdin, capture_output=True, text=True, env=self.env, timeout=180
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr}")
        return proc.stdout + (proc.stderr if not check else "")

    async def arun(self, *argv: str, stdin: str | None = None) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self.env,
        )
        out, err = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin else None), 180)
        return proc.returncode or 0, out.decode(), err.decode()

    async def kubectl_json(self, *args: str) -> dict[str, Any]:
        code, out, err = await self.arun(self.kubectl, *args, "-o", "json")
        assert code == 0, err
        value: dict[str, Any] = json.loads(out)
        return value

    def template(
        self, *sets: str, include_crds: bool = False, values: Path | None = None
    ) -> list[dict[str, Any]]:
        """`helm template` of the chart with a values file and `--set` pairs; the
        rendered objects."""
        argv = [self.helm, "template", "t", str(CHART), "--namespace", "clockwork-system"]
        argv += ["--kube-version", self.version]
        if include_crds:
            argv.append("--include-crds")
        if values is not None:
            argv += ["--values", str(values)]
        for pair in sets:
            argv += ["--set", pair]
        return [doc for doc in yaml.safe_load_all(self.run(*argv)) if doc]


@pytest.fixture(scope="session")
def kube() -> KubeTools:
    return KubeTools(
        kubeconfig=require_server("CLOCKWORK_KUBECONFIG"),
        kubectl=require_server("CLOCKWORK_KUBECTL"),
        helm=require_server("CLOCKWORK_HELM"),
        version=require_server("CLOCKWORK_KUBE_VERSION"),
    )
