"""The OpenAPI 3 document of the HTTP/JSON API, built from the routes and the
messages of the .proto files (served at /v1/openapi.json).

Schemas follow protobuf's JSON mapping: JSON names, 64-bit integers as strings,
bytes as base64, enums by name, Timestamp as RFC 3339 and Duration as "1.5s".
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from google.protobuf import descriptor

from clockwork_svc.api.http_rules import Route

FieldDescriptor = descriptor.FieldDescriptor
JSON = dict[str, Any]

ERROR_SCHEMA: JSON = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "status", "message"],
            "properties": {
                "code": {"type": "integer", "description": "The HTTP status."},
                "status": {"type": "string", "description": "The gRPC status name."},
                "message": {"type": "string"},
                "field": {
                    "type": "string",
                    "description": "The request field at fault, by proto name, if any.",
                },
            },
        }
    },
}

_SCALARS: dict[int, JSON] = {
    FieldDescriptor.TYPE_DOUBLE: {"type": "number", "format": "double"},
    FieldDescriptor.TYPE_FLOAT: {"type": "number", "format": "float"},
    FieldDescriptor.TYPE_INT32: {"type": "integer", "format": "int32"},
    FieldDescriptor.TYPE_SINT32: {"type": "integer", "format": "int32"},
    FieldDescriptor.TYPE_SFIXED32: {"type": "integer", "format": "int32"},
    FieldDescriptor.TYPE_UINT32: {"type": "integer", "format": "int64", "minimum": 0},
    FieldDescriptor.TYPE_FIXED32: {"type": "integer", "format": "int64", "minimum": 0},
    FieldDescriptor.TYPE_INT64: {"type": "string", "format": "int64"},
    FieldDescriptor.TYPE_SINT64: {"type": "string", "format": "int64"},
    FieldDescriptor.TYPE_SFIXED64: {"type": "string", "format": "int64"},
    FieldDescriptor.TYPE_UINT64: {"type": "string", "format": "uint64"},
    FieldDescriptor.TYPE_FIXED64: {"type": "string", "format": "uint64"},
    FieldDescriptor.TYPE_BOOL: {"type": "boolean"},
    FieldDescriptor.TYPE_STRING: {"type": "string"},
    FieldDescriptor.TYPE_BYTES: {"type": "string", "format": "byte"},
}
_WELL_KNOWN: dict[str, JSON] = {
    "google.protobuf.Timestamp": {"type": "string", "format": "date-time"},
    "google.protobuf.Duration": {
        "type": "string",
        "pattern": r"^-?[0-9]+(\.[0-9]{1,9})?s$",
        "example": "1.5s",
    },
}


def document(table: Iterable[Route], version: str) -> JSON:
    schemas: dict[str, JSON] = {}
    paths: dict[str, JSON] = {}
    for route in table:
        paths.setdefault(route.template.openapi_path, {})[route.http_method.lower()] = _operation(
            route, schemas
        )
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "Clockwork HTTP/JSON API",
            "version": version,
            "description": "The gRPC API's methods over HTTP, by the `google.api.http` "
            "rules and protobuf's JSON mapping. Authenticate with `Authorization: "
            "Bearer <token>`; an admin token names the tenant it acts for in the "
            "`Clockwork-Tenant` header.",
        },
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "schemas": {**schemas, "Error": ERROR_SCHEMA},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "responses": {
                "Error": {
                    "description": "The call failed: the gRPC status, the message, the field.",
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}
                    },
                }
            },
        },
    }


def _operation(route: Route, schemas: dict[str, JSON]) -> JSON:
    rpc = route.rpc
    service = rpc.containing_service.name
    parameters: list[JSON] = [
        {
            "name": name,
            "in": "path",
            "required": True,
            "schema": {"type": "string"},
            "description": "Percent-encode a `:` in it; `/` may stand as is.",
        }
        for name in route.template.variables
    ]
    operation: JSON = {
        "operationId": f"{service}_{rpc.name}",
        "tags": [service],
        "summary": f"{service}.{rpc.name} over HTTP.",
        "responses": {
            "200": {
                "description": "OK",
                "content": {"application/json": {"schema": _ref(rpc.output_type, schemas)}},
            },
            "default": {"$ref": "#/components/responses/Error"},
        },
    }
    if route.body:
        body_type = (
            rpc.input_type
            if route.body == "*"
            else rpc.input_type.fields_by_name[route.body].message_type
        )
        operation["requestBody"] = {
            "required": False,
            "content": {"application/json": {"schema": _ref(body_type, schemas)}},
        }
    else:
        parameters += _query_parameters(rpc.input_type, route.template.variables, schemas)
    if parameters:
        operation["parameters"] = parameters
    return operation


def _query_parameters(
    message_type: Any, path_fields: tuple[str, ...], schemas: dict[str, JSON], prefix: str = ""
) -> list[JSON]:
    found: list[JSON] = []
    for field in message_type.fields:
        if field.name in path_fields:
            continue
        kind = field.message_type
        if kind is not None and kind.full_name not in _WELL_KNOWN:
            if not field.is_repeated:
                found += _query_parameters(kind, (), schemas, prefix + field.name + ".")
            continue
        schema = _field_schema(field, schemas)
        parameter: JSON = {"name": prefix + field.name, "in": "query", "schema": schema}
        if field.is_repeated:
            parameter.update(style="form", explode=True)
        found.append(parameter)
    return found


def _ref(message_type: Any, schemas: dict[str, JSON]) -> JSON:
    name = message_type.full_name
    if name in _WELL_KNOWN:
        return dict(_WELL_KNOWN[name])
    short = name.rpartition(".")[2]
    if short not in schemas:
        schemas[short] = {}  # reserved first: messages may refer to themselves
        schemas[short] = {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                field.json_name: _field_schema(field, schemas) for field in message_type.fields
            },
        }
    return {"$ref": f"#/components/schemas/{short}"}


def _field_schema(field: Any, schemas: dict[str, JSON]) -> JSON:
    kind = field.message_type
    if kind is not None and kind.GetOptions().map_entry:
        value = kind.fields_by_name["value"]
        return {"type": "object", "additionalProperties": _single(value, schemas)}
    single = _single(field, schemas)
    return {"type": "array", "items": single} if field.is_repeated else single


def _single(field: Any, schemas: dict[str, JSON]) -> JSON:
    if field.message_type is not None:
        return _ref(field.message_type, schemas)
    if field.enum_type is not None:
        return {"type": "string", "enum": [value.name for value in field.enum_type.values]}
    return dict(_SCALARS[field.type])
