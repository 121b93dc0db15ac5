"""The checked-in generated code matches proto/ (regenerate with `make proto`)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _load_generator() -> object:
    spec = importlib.util.spec_from_file_location("gen_proto", REPO / "scripts" / "gen_proto.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_proto"] = module
    spec.loader.exec_module(module)
    return module


def test_generated_code_is_up_to_date(tmp_path: Path) -> None:
    generator = _load_generator()
    generated = generator.generate(tmp_path)  # type: ignore[attr-defined]
    assert generated, "nothing generated"
    for path in generated:
        relative = path.relative_to(tmp_path)
        checked_in = REPO / relative
        assert checked_in.exists(), f"{relative} missing: run `make proto`"
        assert checked_in.read_bytes() == path.read_bytes(), f"{relative} stale: run `make proto`"


def test_api_reference_is_up_to_date() -> None:
    spec = importlib.util.spec_from_file_location(
        "gen_api_docs", REPO / "scripts" / "gen_api_docs.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    expected = module.render()
    assert (REPO / "docs" / "api.md").read_text() == expected, (
        "docs/api.md is stale: run `python scripts/gen_api_docs.py`"
    )


def test_the_documented_retry_policy_is_the_clients() -> None:
    from clockwork_svc import client

    text = (REPO / "docs" / "api.md").read_text()
    documented = text.split("```json", 1)[1].split("```", 1)[0]
    assert json.loads(documented) == json.loads(client._SERVICE_CONFIG)
