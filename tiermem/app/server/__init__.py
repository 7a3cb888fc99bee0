"""`tiermem serve`: the public `Memory` API over HTTP, API keys, and the memory panel at `/`.

- `app.create_app(settings)`: the ASGI application (FastAPI; OpenAPI at `/docs`);
- `routes`: the `/v1` JSON API, one `Memory` call per route;
- `keys`: hashed API keys and the one authorisation decision;
- `problems`: errors as `application/problem+json`, the body size limit;
- `service`: the server's `Memory`, driven from one worker thread;
- `panel`, `panel_data`, `html`: the server-rendered memory panel.
"""
