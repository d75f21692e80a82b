"""The HTTP-compatible APIs of the server, all on its one HTTP port (`serve --http-port`):
SandboxFusion (`fusion.py`) and the Prime Sandboxes API with its gateway (`prime/`)."""

from sandboxes.server.http.server import HttpServer

__all__ = ["HttpServer"]
