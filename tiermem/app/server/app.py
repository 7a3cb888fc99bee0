"""The ASGI application of `tiermem serve`, and running it under uvicorn."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING

from fastapi import FastAPI

from tiermem import __version__
from tiermem.app.server import DEFAULT_MAX_BODY, panel, routes
from tiermem.app.server.keys import KeyStore
from tiermem.app.server.problems import BodyLimit, install_handlers
from tiermem.app.server.service import MemoryService
from tiermem.app.server.turn_route import TurnRoute
from tiermem.settings import Settings

# Net new tracked objects between two collections of the young generation (the default is 700).
YOUNG_COLLECTION = 20_000

if TYPE_CHECKING:
    import uvicorn


def create_app(
    settings: Settings, *, max_body_bytes: int = DEFAULT_MAX_BODY, server_process: bool = False
) -> FastAPI:
    """The application over the data root of `settings` (opened at startup, closed at shutdown).

    `server_process`: this process exists to serve it (`tiermem serve`), so what start-up built
    is kept out of the garbage collector's passes (`freeze_startup`)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.service = MemoryService(settings)
        # Open the hot store and catch up with the log before the first request.
        await app.state.service.run(app.state.service.refresh)
        await app.state.service.warm()
        if server_process:
            freeze_startup()
        try:
            yield
        finally:
            app.state.service.close()
            app.state.keys.close()

    app = FastAPI(
        title="tiermem",
        version=__version__,
        description="Tiered, event-sourced memory for LLM agents: the `Memory` API over HTTP. "
        "Send `Authorization: Bearer <key>` (keys from `tiermem keys create`). "
        "Errors are `application/problem+json`.",
        lifespan=lifespan,
        docs_url=None,  # served below with local assets: the default page loads them from a CDN
        redoc_url=None,
    )
    app.state.keys = KeyStore(settings)
    app.state.settings = settings
    install_handlers(app)
    app.add_middleware(BodyLimit, limit=max_body_bytes)

    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, str]:
        """Ready to serve (the hot store is open): no key needed."""
        return {"status": "ok", "version": __version__}

    _mount_docs(app)
    app.include_router(routes.router)
    app.include_router(panel.router)
    return app


def _mount_docs(app: FastAPI) -> None:
    """OpenAPI's try-it page at /docs, its JavaScript and CSS served from the installed package."""
    from fastapi.openapi.docs import get_swagger_ui_html
    from fastapi.responses import HTMLResponse
    from fastapi.staticfiles import StaticFiles
    from swagger_ui_bundle import swagger_ui_path

    app.mount("/docs-assets", StaticFiles(directory=str(swagger_ui_path)), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="tiermem API",
            swagger_js_url="/docs-assets/swagger-ui-bundle.js",
            swagger_css_url="/docs-assets/swagger-ui.css",
            swagger_favicon_url="/docs-assets/favicon-32x32.png",
        )


def application(
    settings: Settings, *, max_body_bytes: int = DEFAULT_MAX_BODY, server_process: bool = False
) -> TurnRoute:
    """What `tiermem serve` runs: the application, with posted turns answered in front of the
    framework (see `turn_route`; the same contract, without its per-request machinery)."""
    app = create_app(settings, max_body_bytes=max_body_bytes, server_process=server_process)
    return TurnRoute(app, max_body_bytes)


def uvicorn_config(app: TurnRoute, host: str, port: int, log_level: str) -> uvicorn.Config:
    """uvicorn's settings for `tiermem serve`: its HTTP protocol answers ordinary posted turns
    itself (`turn_protocol`), everything else goes to the application as usual."""
    import uvicorn

    from tiermem.app.server.turn_protocol import TurnProtocol

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        server_header=False,
        http=TurnProtocol,
    )


def serve(
    settings: Settings,
    *,
    host: str,
    port: int,
    max_body_bytes: int,
    log_level: str = "info",
    workers: int = 1,
) -> int:
    """Run the server until interrupted, in this process or in `workers` processes; the exit status."""
    if workers > 1:
        from tiermem.app.server.workers import serve_workers

        return serve_workers(
            settings,
            host=host,
            port=port,
            max_body_bytes=max_body_bytes,
            log_level=log_level,
            workers=workers,
        )
    import uvicorn

    app = application(settings, max_body_bytes=max_body_bytes, server_process=True)
    server = uvicorn.Server(uvicorn_config(app, host, port, log_level))
    with suppress(KeyboardInterrupt):
        server.run()
    # uvicorn's own run exits with 3 when the server never started (a busy port, say).
    return 0 if server.started else 3


def freeze_startup() -> None:
    """Keep what start-up built (the modules, the framework, the models, the stores: it lives as
    long as the server process) out of the garbage collector's passes, and collect the young
    generation only every `YOUNG_COLLECTION` tracked objects. Only where this process is the
    server: an application embedded in another process leaves its collector alone.

    A full pass walks every object it tracks while holding the interpreter, which stalls the
    event loop and the memory thread alike; and with the default threshold (700 objects) the
    objects of the requests in flight (tens per request, 64 requests) outlived a young
    collection several times a second, were promoted, and brought on a full pass every second
    or two. Requests free their objects by reference counting; little of what they make is
    cyclic garbage, so collecting rarely costs no memory to speak of."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION, *gc.get_threshold()[1:])
