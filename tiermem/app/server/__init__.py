"""`tiermem serve`: the public `Memory` API over HTTP, API keys, and the memory panel at `/`.

- `app.create_app(settings)`: the ASGI application (FastAPI; OpenAPI at `/docs`);
- `routes`: the `/v1` JSON API, one `Memory` call per route;
- `keys`: hashed API keys and the one authorisation decision;
- `problems`: errors as `application/problem+json`, the body size limit;
- `service`: the server's `Memory`, driven from one worker thread;
- `panel`, `panel_data`, `html`: the server-rendered memory panel.
"""

# Defaults of `tiermem serve`, here so that the CLI can show them without loading FastAPI.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
DEFAULT_MAX_BODY = 1_048_576  # bytes; a turn of two 100,000-character texts fits
