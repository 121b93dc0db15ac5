"""Requests from HTTP (path variables, query parameters, a JSON body) and replies to
JSON, by protobuf's JSON mapping: the messages of the .proto files are the only model.

A request body is parsed strictly: an unknown field, a value of the wrong type or
malformed JSON is refused with `InvalidArgument` naming the field (by its proto name,
as the gRPC API names it). Query parameters name fields by proto or JSON name, with
dots into nested messages (`range.since`); a repeated field takes the parameter once
per value. Replies use JSON names (lowerCamelCase) and show every field, zeros
included, so a client never has to know a field's default.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from google.protobuf import descriptor, json_format, message

from clockwork_svc.api.http_rules import Route
from clockwork_svc.errors import InvalidArgument

FieldDescriptor = descriptor.FieldDescriptor

_UNKNOWN_FIELD = re.compile(r'has no field named "([^"]+)" at "([^"]+)"')
_AT = re.compile(r" at ([A-Za-z_][\w.]*?)\.*$")
_FAILED_FIELD = re.compile(r"Failed to parse (\w+) field: ")
_CAMEL = re.compile(r"(?<=[a-z0-9])([A-Z])")
_TRUE = frozenset({"true", "1"})
_FALSE = frozenset({"false", "0"})


def request_of(
    route: Route,
    path_values: Mapping[str, str],
    query: Sequence[tuple[str, str]],
    body: bytes,
) -> message.Message:
    """The request message for an HTTP request matched to `route`."""
    request = route.new_request()
    if route.body:
        if query:
            raise InvalidArgument(query[0][0], "this call takes its fields in the body")
        if body.strip():
            target = request if route.body == "*" else getattr(request, route.body)
            _parse_body(body, target, prefix="" if route.body == "*" else route.body + ".")
    elif body.strip():
        raise InvalidArgument("body", "this call takes no body: pass its fields in the query")
    if query:
        _parse_query(query, request)
    for name, value in path_values.items():
        given = getattr(request, name)
        if given and given != value:
            raise InvalidArgument(name, f"the path names {value!r}, the body {given!r}")
        setattr(request, name, value)
    return request


def to_json(reply: message.Message) -> dict[str, Any]:
    return json_format.MessageToDict(reply, always_print_fields_with_no_presence=True)


def _parse_body(body: bytes, target: message.Message, prefix: str) -> None:
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidArgument("body", f"not valid JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise InvalidArgument("body", "must be a JSON object")
    try:
        json_format.ParseDict(document, target)
    except json_format.ParseError as exc:
        raise InvalidArgument(prefix + _field_of(str(exc)), _reason(str(exc))) from exc


def _parse_query(query: Sequence[tuple[str, str]], request: message.Message) -> None:
    document: dict[str, Any] = {}
    for name, value in query:
        node, field = _place(document, request.DESCRIPTOR, name)
        leaf = field.json_name
        converted = _scalar(name, field, value)
        if field.is_repeated:
            node.setdefault(leaf, []).append(converted)
        elif leaf in node:
            raise InvalidArgument(_proto_path(name), "given more than once")
        else:
            node[leaf] = converted
    try:
        json_format.ParseDict(document, request)
    except json_format.ParseError as exc:
        raise InvalidArgument(_field_of(str(exc)), _reason(str(exc))) from exc


def _place(
    document: dict[str, Any], message_type: Any, name: str
) -> tuple[dict[str, Any], FieldDescriptor]:
    """The dict in `document` where the parameter's value goes, and its field."""
    parts = name.split(".")
    node = document
    for depth, part in enumerate(parts):
        field = _field(message_type, part)
        if field is None:
            raise InvalidArgument(_proto_path(name), "no such field")
        if depth == len(parts) - 1:
            if field.message_type is not None and not _is_well_known(field):
                raise InvalidArgument(_proto_path(name), "is a message: name one of its fields")
            return node, field
        if field.message_type is None or field.is_repeated:
            raise InvalidArgument(_proto_path(name), "no such field")
        child = node.setdefault(field.json_name, {})
        node, message_type = child, field.message_type
    raise AssertionError("unreachable: the loop returns on its last part")


def _field(message_type: Any, name: str) -> FieldDescriptor | None:
    found: FieldDescriptor | None = message_type.fields_by_name.get(name)
    if found is not None:
        return found
    return next((f for f in message_type.fields if f.json_name == name), None)


def _is_well_known(field: FieldDescriptor) -> bool:
    kind = field.message_type
    return kind is not None and kind.full_name.startswith("google.protobuf.")


def _scalar(name: str, field: FieldDescriptor, value: str) -> Any:
    if field.type != FieldDescriptor.TYPE_BOOL:
        return value
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise InvalidArgument(_proto_path(name), f"must be true or false, not {value!r}")


def _field_of(problem: str) -> str:
    """The field a json_format error is about, by proto name (best effort)."""
    unknown = _UNKNOWN_FIELD.search(problem)
    if unknown:
        path = [*unknown.group(2).split(".")[1:], unknown.group(1)]
        return _proto_path(".".join(path))
    at = _AT.search(problem.strip())
    if at:
        return _proto_path(".".join(at.group(1).split(".")[1:]))
    return _proto_path(".".join(_FAILED_FIELD.findall(problem))) or "body"


def _reason(problem: str) -> str:
    """The end of a json_format error, without its chain of field names."""
    if _UNKNOWN_FIELD.search(problem):
        return "no such field"
    reason = _FAILED_FIELD.sub("", problem).split("\n")[0].strip()
    return _AT.sub("", reason).rstrip(".") or "cannot be parsed"


def _proto_path(path: str) -> str:
    return _CAMEL.sub(lambda m: "_" + m.group(1).lower(), path)
