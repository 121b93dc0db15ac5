"""The HTTP routes read from the protos' `google.api.http` options, and the matching
of request paths against them."""

from __future__ import annotations

import pytest

from clockwork_svc.api import http_rules
from clockwork_svc.api.http_rules import NoRoute, PathTemplate
from clockwork_svc.server.grpc_server import SERVICES

ROUTES = http_rules.routes(SERVICES)


def test_every_rpc_of_every_service_has_one_route() -> None:
    rpcs = {f"/{s.full_name}/{m.name}" for s in SERVICES for m in s.methods}
    assert sorted(r.grpc_method for r in ROUTES) == sorted(rpcs)
    # No two routes answer the same method and path.
    seen = {(r.http_method, r.template.openapi_path) for r in ROUTES}
    assert len(seen) == len(ROUTES)


def test_a_path_variable_must_be_a_string_field_of_the_request() -> None:
    scheduler = SERVICES[0]
    for route in ROUTES:
        for name in route.template.variables:
            assert name in route.rpc.input_type.fields_by_name
    assert scheduler.name == "SchedulerService"


@pytest.mark.parametrize(
    ("method", "path", "rpc", "values"),
    [
        ("POST", "/v1/schedules", "CreateSchedule", {}),
        ("POST", "/v1/schedules:batchCreate", "BatchCreateSchedules", {}),
        ("GET", "/v1/schedules/job-1", "GetSchedule", {"key": "job-1"}),
        # A key holds `/` as is, and `:` unless a verb could follow it.
        ("GET", "/v1/schedules/billing/2026/inv:7", "GetSchedule", {"key": "billing/2026/inv:7"}),
        ("POST", "/v1/schedules/a/b:c:pause", "PauseSchedule", {"key": "a/b:c"}),
        ("GET", "/v1/schedules/a%3Apause", "GetSchedule", {"key": "a:pause"}),
        ("POST", "/v1/schedules/a%3Apause:cancel", "CancelSchedule", {"key": "a:pause"}),
        ("GET", "/v1/schedules/caf%C3%A9", "GetSchedule", {"key": "café"}),
        ("PUT", "/v1/schedules/k", "UpdateSchedule", {"key": "k"}),
        ("GET", "/v1/executions", "ListExecutions", {}),
        ("PUT", "/v1/tenants/acme/limits", "SetTenantLimits", {"name": "acme"}),
        ("POST", "/v1/tenants/acme:pause", "PauseTenant", {"name": "acme"}),
        ("GET", "/v1/cluster/load", "GetClusterLoad", {}),
        ("PUT", "/v1/cluster/scaleDecision", "RecordScaleDecision", {}),
    ],
)
def test_paths_resolve_to_their_rpc(
    method: str, path: str, rpc: str, values: dict[str, str]
) -> None:
    route, found = http_rules.resolve(ROUTES, method, path)
    assert (route.rpc.name, found) == (rpc, values)


@pytest.mark.parametrize(
    ("method", "path", "known"),
    [
        ("DELETE", "/v1/schedules/k", True),
        ("GET", "/v1/schedules:batchCreate", True),
        ("GET", "/v2/schedules", False),
        ("GET", "/v1/schedules/", False),
        ("GET", "/v1/schedules//k", False),
        ("GET", "/v1/tenants/a/b", False),
        ("POST", "/v1/tenants/acme:explode", True),  # GET reads tenant "acme:explode"
    ],
)
def test_unknown_paths_and_methods(method: str, path: str, known: bool) -> None:
    with pytest.raises(NoRoute) as err:
        http_rules.resolve(ROUTES, method, path)
    assert err.value.path_known is known


def test_a_variable_that_is_not_utf8_once_decoded_is_refused() -> None:
    with pytest.raises(ValueError, match="UTF-8"):
        http_rules.resolve(ROUTES, "GET", "/v1/schedules/%FF")


@pytest.mark.parametrize(
    "template",
    ["v1/x", "/v1/{key=**}/more", "/v1/{key=a}", "/v1/{1key}", "/v1//x", "/v1/x*"],
)
def test_templates_outside_the_supported_syntax_are_refused(template: str) -> None:
    with pytest.raises(ValueError, match=r"\*\*|bad|starts with"):
        PathTemplate.parse(template)


def test_a_template_in_openapi_notation() -> None:
    template = PathTemplate.parse("/v1/schedules/{key=**}:pause")
    assert template.openapi_path == "/v1/schedules/{key}:pause"
    assert template.variables == ("key",)
    assert template.verb == "pause"
