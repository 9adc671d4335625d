"""Code generated from ``protos/`` by ``python -m grpc_tools.protoc`` (see protos/README.md). Do not edit."""
