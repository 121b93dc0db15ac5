"""Writes docs/api.md from the .proto files and their comments.

Usage: python scripts/gen_api_docs.py [OUT_FILE]
tests/unit/test_generated_code.py checks that docs/api.md is up to date.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from google.api import annotations_pb2
from google.protobuf import descriptor_pb2
from grpc_tools import protoc

REPO = Path(__file__).resolve().parent.parent
PROTO_ROOT = REPO / "proto"

_TYPES = {
    number: name[5:].lower() for name, number in descriptor_pb2.FieldDescriptorProto.Type.items()
}


_HTTP_SECTION = [
    "## HTTP/JSON API",
    "",
    "With `--http-listen HOST:PORT` (`clockwork dev`: `127.0.0.1:7080` by default), the api",
    "also serves every RPC below as JSON over HTTP, at the path its `google.api.http` option",
    "names (the `HTTP:` line under each RPC). The JSON is protobuf's JSON mapping of the",
    "same messages: field names in lowerCamelCase (the proto names are accepted too), enums",
    "by name, 64-bit integers as strings, bytes (a payload) in base64, times in RFC 3339 and",
    'durations as `"90s"`. Replies show every field, zeros included. A call goes through',
    "the same admission, authentication and validation as over gRPC: `Authorization: Bearer",
    "<token>`, and for an admin acting for a tenant, `Clockwork-Tenant: <tenant>`. The OpenAPI",
    "3 document is at `/v1/openapi.json`.",
    "",
    "A key goes in the path as it is, `/` included; a `:` in its last segment is sent as",
    "`%3A` when a verb (`:pause`) could follow. A call whose rule takes the JSON body takes",
    "no query parameters; a `GET` takes its fields in the query (`range.since=...` into a",
    "nested message, a repeated field once per value).",
    "",
    "An error is JSON: the HTTP status, the gRPC status name, the message and the field at",
    "fault (by proto name; empty when none is):",
    "",
    "```json",
    '{"error": {"code": 400, "status": "INVALID_ARGUMENT",',
    '           "message": "must have 5 fields (minute hour day-of-month month day-of-week), got 2",',  # noqa: E501
    '           "field": "spec.cron.expression"}}',
    "```",
    "",
    "| gRPC status | HTTP |",
    "|---|---|",
    "| `INVALID_ARGUMENT` (also malformed JSON, an unknown field, a wrong type) | 400 |",
    "| `UNAUTHENTICATED` | 401 |",
    "| `PERMISSION_DENIED` | 403 |",
    "| `NOT_FOUND` (also another tenant's schedule, and a path no route has) | 404 |",
    "| a path with another HTTP method | 405 |",
    "| `ALREADY_EXISTS`, `ABORTED`, `FAILED_PRECONDITION` | 409 |",
    "| a body larger than twice `--max-message-size` (`RESOURCE_EXHAUSTED`) | 413 |",
    "| a body that is not `application/json` | 415 |",
    "| `RESOURCE_EXHAUSTED` | 429 |",
    "| `UNAVAILABLE` (with `Retry-After` when the api is at its in-flight limit) | 503 |",
    "",
    "Examples (`tests/integration/test_http_docs.py` runs each block against a real api,",
    "with `CLOCKWORK_HTTP=http://127.0.0.1:7080` and a tenant's token in `CLOCKWORK_TOKEN`):",
    "",
    "```sh",
    '# A one-shot: the payload {"invoice": 42} in base64.',
    'curl -fsS -X POST "$CLOCKWORK_HTTP/v1/schedules" \\',
    "  -H \"Authorization: Bearer $CLOCKWORK_TOKEN\" -H 'Content-Type: application/json' \\",
    '  -d \'{"key": "invoices/2026-12/acme",',
    '       "spec": {"once": {"at": "2030-01-01T09:00:00Z"},',
    '                "http": {"url": "https://example.com/hooks/invoice"},',
    '                "payload": "eyJpbnZvaWNlIjogNDJ9"}}\'',
    "```",
    "",
    "```sh",
    "# Every weekday at 09:00 in Paris, with retries.",
    'curl -fsS -X POST "$CLOCKWORK_HTTP/v1/schedules" \\',
    "  -H \"Authorization: Bearer $CLOCKWORK_TOKEN\" -H 'Content-Type: application/json' \\",
    '  -d \'{"key": "reports/daily",',
    '       "spec": {"cron": {"expression": "0 9 * * MON-FRI",',
    '                         "timezone": "Europe/Paris"},',
    '                "http": {"url": "https://example.com/hooks/report"},',
    '                "retry": {"kind": "EXPONENTIAL", "maxAttempts": 5,',
    '                          "initialDelay": "2s"}},',
    '       "labels": {"team": "finance"}}\'',
    "```",
    "",
    "```sh",
    "# Read it back with its next three occurrence times; list the team's active ones.",
    'curl -fsS "$CLOCKWORK_HTTP/v1/schedules/reports/daily?upcomingCount=3" \\',
    '  -H "Authorization: Bearer $CLOCKWORK_TOKEN"',
    'curl -fsS "$CLOCKWORK_HTTP/v1/schedules?labelSelector=team%3Dfinance&states=ACTIVE" \\',
    '  -H "Authorization: Bearer $CLOCKWORK_TOKEN"',
    "```",
    "",
    "```sh",
    "# Pause with a note, resume, run once now, then see the executions.",
    'curl -fsS -X POST "$CLOCKWORK_HTTP/v1/schedules/reports/daily:pause" \\',
    "  -H \"Authorization: Bearer $CLOCKWORK_TOKEN\" -H 'Content-Type: application/json' \\",
    '  -d \'{"note": "quarter close"}\'',
    'curl -fsS -X POST "$CLOCKWORK_HTTP/v1/schedules/reports/daily:resume" \\',
    '  -H "Authorization: Bearer $CLOCKWORK_TOKEN"',
    'curl -fsS -X POST "$CLOCKWORK_HTTP/v1/schedules/reports/daily:trigger" \\',
    '  -H "Authorization: Bearer $CLOCKWORK_TOKEN"',
    'curl -fsS "$CLOCKWORK_HTTP/v1/executions?key=reports/daily" \\',
    '  -H "Authorization: Bearer $CLOCKWORK_TOKEN"',
    "```",
    "",
    "```sh",
    "# Dead letters of the last day, then redrive them all.",
    "since=$(date -u -d '1 day ago' +%Y-%m-%dT%H:%M:%SZ)",
    'curl -fsS "$CLOCKWORK_HTTP/v1/deadLetters?range.since=$since" \\',
    '  -H "Authorization: Bearer $CLOCKWORK_TOKEN"',
    'curl -fsS -X POST "$CLOCKWORK_HTTP/v1/deadLetters:redrive" \\',
    "  -H \"Authorization: Bearer $CLOCKWORK_TOKEN\" -H 'Content-Type: application/json' \\",
    '  -d "{\\"range\\": {\\"since\\": \\"$since\\"}}"',
    "```",
    "",
    "```sh",
    "# A bad cron expression: 400, naming the field.",
    'curl -sS -X POST "$CLOCKWORK_HTTP/v1/schedules" \\',
    "  -H \"Authorization: Bearer $CLOCKWORK_TOKEN\" -H 'Content-Type: application/json' \\",
    '  -d \'{"key": "bad", "spec": {"cron": {"expression": "every day"},',
    '                          "http": {"url": "https://example.com/"}}}\'',
    "```",
    "",
]


def _descriptors() -> descriptor_pb2.FileDescriptorSet:
    protos = sorted(PROTO_ROOT.rglob("*.proto"))
    include = Path(protoc.__file__).parent / "_proto"
    # google/api/annotations.proto and http.proto ship in googleapis-common-protos.
    googleapis = Path(annotations_pb2.__file__).parent.parent.parent
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "set.pb"
        args = [
            "protoc",
            f"-I{PROTO_ROOT}",
            f"-I{include}",
            f"-I{googleapis}",
            "--include_source_info",
            f"--descriptor_set_out={out}",
            *[str(p) for p in protos],
        ]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
        return descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())


def _comments(file: descriptor_pb2.FileDescriptorProto) -> dict[tuple[int, ...], str]:
    return {
        tuple(loc.path): " ".join(
            line.strip() for line in loc.leading_comments.strip().splitlines()
        )
        for loc in file.source_code_info.location
        if loc.leading_comments
    }


def _field_type(field: descriptor_pb2.FieldDescriptorProto) -> str:
    name = field.type_name.rsplit(".", 1)[-1] if field.type_name else _TYPES[field.type]
    if field.type_name.endswith("Entry"):
        return "map<string, string>"
    repeated = field.label == descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
    return f"repeated {name}" if repeated else name


def _http_line(method: descriptor_pb2.MethodDescriptorProto) -> str:
    rule = method.options.Extensions[annotations_pb2.http]
    kind = rule.WhichOneof("pattern")
    where = {"": "fields in the query", "*": "JSON body: the request"}.get(
        rule.body, f"JSON body: `{rule.body}`"
    )
    return f"HTTP: `{kind.upper()} {getattr(rule, kind)}` ({where})."


def render() -> str:
    out = [
        "# API reference (v1)",
        "",
        "Generated from `proto/` by `scripts/gen_api_docs.py`; do not edit by hand.",
        "",
        "Calls carry `authorization: Bearer <token>`; the token decides the tenant. A server",
        "running without auth (`clockwork dev` on loopback) reads the tenant from the",
        "`clockwork-tenant` metadata key instead (default `default`). The standard",
        "`grpc.health.v1.Health` service and server reflection are open. A call may carry",
        "W3C `traceparent` metadata: a schedule it creates keeps that trace context, and its",
        'deliveries continue the trace (docs/operations.md, "Traces").',
        "",
        "Errors: `INVALID_ARGUMENT` (the message starts with the offending field's path,",
        "e.g. `spec.cron.expression: ...`), `NOT_FOUND`, `ALREADY_EXISTS` (create with a",
        "different spec), `ABORTED` (expected_version mismatch or concurrent change),",
        "`FAILED_PRECONDITION` (e.g. resuming a cancelled schedule), `UNAUTHENTICATED`,",
        "`RESOURCE_EXHAUSTED` (message larger than 8 MiB), `UNAVAILABLE` (store unreachable,",
        "or the server at its `--max-in-flight` limit; every call is idempotent and safe to",
        "retry). The Python client (`clockwork_svc/client.py`) raises one `ClockworkError`",
        "subclass per code, from the table in `clockwork_svc/api/status.py`.",
        "",
        "A call refused for overload did nothing (it is refused before authentication and",
        "decoding) and carries a retry hint in the trailing metadata `grpc-retry-pushback-ms`,",
        "which gRPC's built-in retries follow in place of their own backoff. A client",
        "configures them with this service config (the Python client's; it also goes on",
        "retrying a hinted refusal past the fifth attempt, until the call's deadline):",
        "",
        "```json",
        '{"methodConfig": [{"name": [{"service": "clockwork.api.v1.SchedulerService"},',
        '                            {"service": "clockwork.api.v1.TenantService"}],',
        '                   "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.2s",',
        '                                   "maxBackoff": "3s", "backoffMultiplier": 2,',
        '                                   "retryableStatusCodes": ["UNAVAILABLE"]}}]}',
        "```",
        "",
        *_HTTP_SECTION,
        "## Schedule operations compared with Temporal's",
        "",
        "`GetSchedule` answers with the next occurrence times (`upcoming_fire_times`, as",
        "Temporal's `DescribeSchedule` gives `future_action_times`) and the latest executions;",
        "`PreviewSchedule` computes the times of a trigger without creating anything (Temporal",
        "has no dry run). `TriggerSchedule` is Temporal's `TriggerImmediately`, with three",
        "differences. It takes an optional payload for that run. It is idempotent on a",
        "client-given `request_id` (kept 24 hours), so a retried call fires once. And it has",
        "no overlap policy of its own: every triggered run is sent, as under Temporal's",
        "`ALLOW_ALL`. As in Temporal, a paused schedule can be triggered and a triggered run",
        "does not move the timetable: it does not count towards `fired_count` or a trigger's",
        "`count`, and it leaves `next_fire_time` where it was. Unlike an occurrence, a",
        "pending triggered run is not superseded by a pause or an update, only by a cancel.",
        "A redrive of a triggered run's dead letter sends its payload again, with the same",
        "delivery id; like every redrive, it is skipped while the schedule is paused.",
        "",
        "Labels are Kubernetes labels (Temporal's search attributes, untyped); `ListSchedules`",
        "filters by a Kubernetes label selector, a key prefix and states, and pages through a",
        "large tenant without a table scan (a filtered page may be short: follow the token).",
        "`BulkScheduleAction` pauses, resumes, cancels or triggers what such a filter matches",
        "(Temporal has no bulk schedule action): a page per call, each schedule acted on once",
        "however often a call is repeated, and a dry run that counts and names the matches.",
        "",
        "Overlap policies are Temporal's `SKIP`, `BUFFER_ONE` and `ALLOW_ALL` (Temporal's",
        "default is `SKIP`; Clockwork's is `ALLOW_ALL`, what it did before policies existed).",
        "`BUFFER_ALL`, `CANCEL_OTHER` and `TERMINATE_OTHER` are not offered: a callback cannot",
        "be cancelled, and an ordering key already sends every occurrence in turn. Skipped",
        "occurrences get a SKIPPED execution, and occurrences missed while no worker fired",
        "them one SKIPPED execution per run, naming how many.",
        "",
        "`BackfillSchedule` is Temporal's backfill of a past range, with the occurrences'",
        "own delivery ids (a receiver deduplicates the ones it saw) and at most 1000",
        "occurrences a call (a larger range is refused, naming `end`, rather than queued). It",
        "sends every occurrence in the range, as under `ALLOW_ALL`, at the pace of the tenant's",
        "delivery limits. A paused schedule is refused, since a pause supersedes pending",
        "backfilled runs; Temporal backfills a paused schedule.",
        "",
    ]
    for file in _descriptors().file:
        comments = _comments(file)
        out += [f"Package `{file.package}`, file `{file.name}`.", ""]
        for si, service in enumerate(file.service):
            out += [f"## Service `{service.name}`", ""]
            for mi, method in enumerate(service.method):
                doc = comments.get((6, si, 2, mi), "")
                out += [
                    f"### `{method.name}({method.input_type.rsplit('.', 1)[-1]})` → "
                    f"`{method.output_type.rsplit('.', 1)[-1]}`",
                    "",
                    doc,
                    "",
                    _http_line(method),
                    "",
                ]
        out += ["## Messages", ""]
        for mi, message in enumerate(file.message_type):
            out += [
                f"### `{message.name}`",
                "",
                comments.get((4, mi), ""),
                "",
                "| field | type | description |",
                "|---|---|---|",
            ]
            for fi, field in enumerate(message.field):
                doc = comments.get((4, mi, 2, fi), "").replace("|", "\\|")
                out.append(f"| `{field.name}` | {_field_type(field)} | {doc} |")
            for ei, enum in enumerate(message.enum_type):
                values = ", ".join(f"`{v.name}`" for v in enum.value)
                out += [
                    "",
                    f"Enum `{message.name}.{enum.name}`: {values}. "
                    + comments.get((4, mi, 4, ei), ""),
                ]
            out.append("")
        out += ["## Enums", ""]
        for ei, enum in enumerate(file.enum_type):
            out += [f"### `{enum.name}`", "", comments.get((5, ei), ""), ""]
            for vi, value in enumerate(enum.value):
                doc = comments.get((5, ei, 2, vi), "")
                out.append(f"- `{value.name}`" + (f": {doc}" if doc else ""))
            out.append("")
    return "\n".join(line.rstrip() for line in out).replace("\n\n\n", "\n\n").rstrip() + "\n"


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "docs" / "api.md"
    target.write_text(render())
    print(target)
