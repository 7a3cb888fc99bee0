"""A real S3 API for the object-store tests: moto's server on a free port, one bucket per test."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any

import boto3
import pyarrow.parquet as pq

from tiermem.settings import Settings, resolve_settings

KEY, SECRET, REGION = "test-key", "test-secret", "us-east-1"


@dataclass
class S3Server:
    endpoint: str
    process: subprocess.Popen[bytes]

    def client(self) -> Any:
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=KEY,
            aws_secret_access_key=SECRET,
            region_name=REGION,
        )

    def new_bucket(self) -> str:
        name = f"tiermem-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_listening(proc: subprocess.Popen[bytes], port: int, deadline_s: float = 60.0) -> bool:
    """True once the server accepts connections; False if it exited (its port was taken meanwhile)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            return False
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            time.sleep(0.05)  # polling a real condition (the port), bounded by the deadline
    raise RuntimeError(f"moto_server did not listen on port {port} within {deadline_s:.0f} s")


def start_s3() -> Iterator[S3Server]:
    """Start moto's S3 server (a few tries: another process may take the free port first)."""
    server = Path(sys.executable).with_name("moto_server")
    for _attempt in range(5):
        port = _free_port()
        proc = subprocess.Popen(
            [str(server), "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            if _wait_listening(proc, port):
                yield S3Server(f"http://127.0.0.1:{port}", proc)
                return
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    raise RuntimeError("moto_server could not start")


def write_config(data_dir: Path, server: S3Server, bucket: str) -> Settings:
    """A data root whose tiermem.toml points the cold tier at the bucket; its resolved settings."""
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "tiermem.toml").write_text(
        f'cold_url = "s3://{bucket}/cold"\n'
        "[cold]\n"
        f'endpoint_url = "{server.endpoint}"\n'
        f'region = "{REGION}"\n'
        f'access_key_id = "{KEY}"\n'
        f'secret_access_key = "{SECRET}"\n'
        "allow_http = true\n",
        encoding="utf-8",
    )
    return resolve_settings(data_dir=data_dir, env={})


def bucket_objects(server: S3Server, bucket: str) -> dict[str, bytes]:
    """Every object in the bucket, by key."""
    s3 = server.client()
    out: dict[str, bytes] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for obj in page.get("Contents", []):
            out[obj["Key"]] = s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
    return out


def bucket_text(server: S3Server, bucket: str) -> bytes:
    """Every byte in the bucket, with Parquet decoded (its pages are compressed)."""
    chunks = []
    for key, body in bucket_objects(server, bucket).items():
        chunks.append(body)
        if key.endswith(".parquet"):
            chunks.append(str(pq.read_table(BytesIO(body)).to_pylist()).encode())
    return b"\n".join(chunks)
