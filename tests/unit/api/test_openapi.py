"""The OpenAPI document: a valid OpenAPI 3 document, with every route and a schema for
every message a route reads or returns."""

from __future__ import annotations

from openapi_spec_validator import validate

from clockwork_svc.api import http_rules, openapi
from clockwork_svc.server.grpc_server import SERVICES

ROUTES = http_rules.routes(SERVICES)
DOCUMENT = openapi.document(ROUTES, version="v1")


def test_the_document_is_valid_openapi_3() -> None:
    validate(DOCUMENT)


def test_every_route_is_an_operation() -> None:
    operations = {
        (method.upper(), path) for path, item in DOCUMENT["paths"].items() for method in item
    }
    assert operations == {(r.http_method, r.template.openapi_path) for r in ROUTES}


def test_messages_follow_the_json_mapping() -> None:
    schemas = DOCUMENT["components"]["schemas"]
    schedule = schemas["Schedule"]["properties"]
    assert schedule["version"] == {"type": "string", "format": "int64"}
    assert schedule["nextFireTime"] == {"type": "string", "format": "date-time"}
    assert schedule["state"]["enum"][:2] == ["SCHEDULE_STATE_UNSPECIFIED", "ACTIVE"]
    assert schedule["labels"] == {"type": "object", "additionalProperties": {"type": "string"}}
    spec = schemas["ScheduleSpec"]["properties"]
    assert spec["payload"] == {"type": "string", "format": "byte"}
    assert spec["relevancyWindow"]["example"] == "1.5s"


def test_query_parameters_reach_into_nested_messages() -> None:
    listing = DOCUMENT["paths"]["/v1/deadLetters"]["get"]
    names = {p["name"] for p in listing["parameters"]}
    assert {"range.since", "range.until", "range.key", "page_size", "page_token"} <= names
    pause = DOCUMENT["paths"]["/v1/schedules/{key}:pause"]["post"]
    assert [p["name"] for p in pause["parameters"]] == ["key"]
    assert "requestBody" in pause
