"""CLI for the HTTP server: `tiermem serve` and `tiermem keys create|list|revoke`."""

from __future__ import annotations

import argparse
from typing import Any

from tiermem.app.api import Memory
from tiermem.app.cli import add_json_flag, command
from tiermem.errors import ValidationError
from tiermem.output import emit_json, format_table

MAX_WORKERS = 64


def _serve(args: argparse.Namespace, memory: Memory) -> int:
    from tiermem.app.server.app import serve

    # Checked here, before the server starts: uvicorn reports a bad port with a traceback.
    if not 0 <= args.port <= 65535:
        raise ValidationError("--port", f"{args.port} is not a port (0 to 65535)")
    if args.max_body_bytes < 1:
        raise ValidationError("--max-body-bytes", f"{args.max_body_bytes}: expected at least 1")
    if not 1 <= args.workers <= MAX_WORKERS:
        raise ValidationError("--workers", f"{args.workers}: expected 1 to {MAX_WORKERS}")
    # A data root that cannot be made fails here, in one line, not inside the server's start-up.
    memory.settings.data_dir.mkdir(parents=True, exist_ok=True)
    return serve(
        memory.settings,
        host=args.host,
        port=args.port,
        max_body_bytes=args.max_body_bytes,
        log_level=args.log_level,
        workers=args.workers,
    )


def _keys(args: argparse.Namespace, memory: Memory) -> int:
    from tiermem.app.server.keys import KeyStore

    store = KeyStore(memory.settings)
    if args.action == "create":
        created = store.create(operator=args.operator, agent_id=args.agent, user=args.user, label=args.label)
        if args.json:
            emit_json(created)
        else:
            bound = (
                "operator"
                if args.operator
                else f"agent {args.agent}" + (f", user {args.user}" if args.user else "")
            )
            print(created["key"])
            print(f"({created['key_id']}, {bound}; shown once: keep it now)")
        return 0
    if args.action == "list":
        rows = store.list()
        if args.json:
            emit_json(rows)
        else:
            print(
                format_table(
                    ["key_id", "kind", "agent", "user", "created", "revoked"],
                    [
                        [r["key_id"], r["kind"], r["agent_id"], r["user"], r["created_at"], r["revoked_at"]]
                        for r in rows
                    ],
                )
            )
        return 0
    if not args.key_id:
        raise ValidationError("KEY_ID", "tiermem keys revoke needs a KEY_ID (see `tiermem keys list`)")
    done = store.revoke(args.key_id)
    if args.json:
        emit_json(done)
    else:
        print(f"revoked {args.key_id}")
    return 0


def register(sub: Any) -> None:
    from tiermem.app.server import DEFAULT_HOST, DEFAULT_MAX_BODY, DEFAULT_PORT

    p = command(
        sub,
        "serve",
        _serve,
        "serve the memory over HTTP (JSON API, OpenAPI at /docs, the memory panel at /)",
        "  tiermem keys create --operator --json     # a key for the panel and the API\n"
        "  tiermem serve                             # http://127.0.0.1:8765/\n"
        "  tiermem serve --port 9000 --max-body-bytes 262144\n",
    )
    p.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST})")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    p.add_argument(
        "--max-body-bytes",
        type=int,
        default=DEFAULT_MAX_BODY,
        help=f"largest request body accepted (default {DEFAULT_MAX_BODY:,})",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="server processes sharing the port (default 1; each runs its Python on one core)",
    )
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])

    p = command(
        sub,
        "keys",
        _keys,
        "create, list or revoke the API keys of `tiermem serve` (stored hashed; shown once)",
        "  tiermem keys create --operator --json\n"
        "  tiermem keys create --agent support-bot --json\n"
        "  tiermem keys create --agent support-bot --user alice --json   # only alice's memory\n"
        "  tiermem keys list\n"
        "  tiermem keys revoke key_0123456789ab\n",
    )
    p.add_argument("action", choices=["create", "list", "revoke"])
    p.add_argument("key_id", nargs="?", help="for revoke: the key's id (from `keys list`)")
    p.add_argument("--operator", action="store_true", help="a key for every agent and the operator endpoints")
    p.add_argument("--agent", help="a key that reaches only this agent")
    p.add_argument("--user", help="with --agent: a key that reaches only this user of the agent")
    p.add_argument("--label", help="a note kept with the key (who it is for)")
    add_json_flag(p)
