"""Generated protobuf / gRPC stubs of proto/service.proto (regenerate: `python -m sandboxes._proto.generate`)."""
