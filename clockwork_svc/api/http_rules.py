"""The HTTP/JSON routes of the v1 services, read from their `google.api.http` options.

Every RPC carries its rule in its .proto file (`option (google.api.http)`): an HTTP
method, a path template and where the request body goes. The HTTP gateway and the
OpenAPI document both take their routes from here, so the JSON API is the gRPC API
and cannot drift from it.

Path templates follow google/api/http.proto: literal segments, `{field}` (one
segment), `{field=**}` (the rest of the path, last), and an optional `:verb` after
the last segment. Matching works on the raw (percent-encoded) path and decodes a
variable's value afterwards, so a key may hold `/` as is, and `%3A` stands for a `:`
that would otherwise read as a verb.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass

from google.api import annotations_pb2, http_pb2
from google.protobuf import descriptor, message, message_factory

_METHODS = ("get", "put", "post", "delete", "patch")


class NoRoute(Exception):
    """No route has this path (404), or none has it with this HTTP method (405)."""

    def __init__(self, path_known: bool) -> None:
        super().__init__("method not allowed" if path_known else "no such path")
        self.path_known = path_known


@dataclass(frozen=True, slots=True)
class Segment:
    """A literal segment, or a variable holding one segment (or, with `rest`, the
    remaining ones)."""

    literal: str = ""
    variable: str = ""
    rest: bool = False


@dataclass(frozen=True, slots=True)
class PathTemplate:
    text: str
    segments: tuple[Segment, ...]
    verb: str

    @classmethod
    def parse(cls, text: str) -> PathTemplate:
        """Raises ValueError for a template outside the subset described above."""
        if not text.startswith("/"):
            raise ValueError(f"{text!r}: a path template starts with /")
        path, verb = text[1:], ""
        last_slash = path.rfind("/")
        last_colon = path.rfind(":")
        if last_colon > last_slash and not path[last_colon:].endswith("}"):
            path, verb = path[:last_colon], path[last_colon + 1 :]
        segments = tuple(_segment(text, part) for part in path.split("/"))
        if any(s.rest for s in segments[:-1]):
            raise ValueError(f"{text!r}: `**` may only be the last segment")
        return cls(text, segments, verb)

    @property
    def variables(self) -> tuple[str, ...]:
        return tuple(s.variable for s in self.segments if s.variable)

    @property
    def openapi_path(self) -> str:
        """The template in OpenAPI's notation: `/v1/schedules/{key}:pause`."""
        parts = [s.literal or "{" + s.variable + "}" for s in self.segments]
        return "/" + "/".join(parts) + (":" + self.verb if self.verb else "")

    def match(self, raw_segments: list[str], verb: str) -> dict[str, str] | None:
        """The variables' raw (still percent-encoded) values, or None."""
        if verb != self.verb:
            return None
        found: dict[str, str] = {}
        for i, segment in enumerate(self.segments):
            if segment.rest:
                rest = raw_segments[i:]
                if not rest or not all(rest):
                    return None
                found[segment.variable] = "/".join(rest)
                return found
            if i >= len(raw_segments):
                return None
            raw = raw_segments[i]
            if segment.variable:
                if not raw:
                    return None
                found[segment.variable] = raw
            elif raw != segment.literal:
                return None
        return found if len(raw_segments) == len(self.segments) else None


def _segment(template: str, part: str) -> Segment:
    if not (part.startswith("{") and part.endswith("}")):
        if not part or any(c in part for c in "{}*"):
            raise ValueError(f"{template!r}: bad segment {part!r}")
        return Segment(literal=part)
    name, _, pattern = part[1:-1].partition("=")
    if not name.isidentifier() or pattern not in ("", "*", "**"):
        raise ValueError(f"{template!r}: bad variable {part!r}")
    return Segment(variable=name, rest=pattern == "**")


@dataclass(frozen=True, slots=True)
class Route:
    http_method: str
    template: PathTemplate
    # "" (no body: the fields come from the path and the query), "*" (the body is the
    # request) or a field name (the body is that field).
    body: str
    rpc: descriptor.MethodDescriptor

    @property
    def grpc_method(self) -> str:
        """The method's gRPC path: `/clockwork.api.v1.SchedulerService/GetSchedule`."""
        return f"/{self.rpc.containing_service.full_name}/{self.rpc.name}"

    def new_request(self) -> message.Message:
        return message_factory.GetMessageClass(self.rpc.input_type)()


def routes(services: Iterable[descriptor.ServiceDescriptor]) -> tuple[Route, ...]:
    """Every method's route; raises ValueError naming a method without a rule, with a
    rule this module cannot serve, or whose path variable is not a request field."""
    found: list[Route] = []
    for service in services:
        for rpc in service.methods:
            found.append(_route(rpc))
    return tuple(found)


def _route(rpc: descriptor.MethodDescriptor) -> Route:
    options = rpc.GetOptions()
    if not options.HasExtension(annotations_pb2.http):
        raise ValueError(f"{rpc.full_name} has no google.api.http option")
    rule: http_pb2.HttpRule = options.Extensions[annotations_pb2.http]
    kind = rule.WhichOneof("pattern")
    if kind not in _METHODS:
        raise ValueError(f"{rpc.full_name}: unsupported pattern {kind!r}")
    if rule.additional_bindings or rule.response_body:
        raise ValueError(f"{rpc.full_name}: additional bindings and response_body are unsupported")
    template = PathTemplate.parse(getattr(rule, kind))
    fields = rpc.input_type.fields_by_name
    for name in template.variables:
        if name not in fields or fields[name].type != descriptor.FieldDescriptor.TYPE_STRING:
            raise ValueError(f"{rpc.full_name}: path variable {name!r} is not a string field")
    if rule.body not in ("", "*") and rule.body not in fields:
        raise ValueError(f"{rpc.full_name}: body {rule.body!r} is not a field")
    return Route(kind.upper(), template, rule.body, rpc)


def split_path(raw_path: str) -> tuple[list[str], str]:
    """A raw path's segments and its verb (the text after a `:` in the last segment,
    or "")."""
    segments = raw_path.lstrip("/").split("/")
    last = segments[-1]
    head, colon, verb = last.rpartition(":")
    if not colon:
        return segments, ""
    return [*segments[:-1], head], verb


def resolve(
    table: Iterable[Route], http_method: str, raw_path: str
) -> tuple[Route, dict[str, str]]:
    """The route for a request and its path variables, percent-decoded; raises
    NoRoute, or ValueError for a variable that is not UTF-8 once decoded."""
    segments, verb = split_path(raw_path)
    # A verb reading first: `/v1/schedules/a:b:pause` pauses "a:b"; then the path
    # whole, so `GET /v1/schedules/a:b` reads "a:b".
    tries = [(segments, verb), (raw_path.lstrip("/").split("/"), "")] if verb else [(segments, "")]
    path_known = False
    for path, wanted_verb in tries:
        for route in table:
            raw = route.template.match(path, wanted_verb)
            if raw is None:
                continue
            if route.http_method != http_method:
                path_known = True
                continue
            return route, {name: _decode(value) for name, value in raw.items()}
    raise NoRoute(path_known)


def _decode(raw: str) -> str:
    try:
        return urllib.parse.unquote(raw, errors="strict")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{raw!r} is not UTF-8 once percent-decoded") from exc
