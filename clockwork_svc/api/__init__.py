"""The gRPC API: generated code (v1/*_pb2*), its conversion to the domain (v1/convert.py)
and the status mapping (status.py)."""

DEFAULT_ADDRESS = "127.0.0.1:7070"
"""Where `clockwork api` and `clockwork dev` listen unless told otherwise, and so where
the client, the CLI and the operator connect unless told otherwise."""
