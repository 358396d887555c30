"""Shared by the tests: the database test.sh prepared (DATABASE_URL), real dispatchers started
from $HIGHWATER_BIN, and small helpers. No mocks: everything talks to real processes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


def required(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(f"{name} is not set: run the tests with clients/python/test.sh")
    return value


DATABASE_URL = required("DATABASE_URL")
HIGHWATER_BIN = required("HIGHWATER_BIN")
# test.sh's temporary directory: pid files of the dispatchers, which it kills if a test dies.
TMP = Path(required("HW_TEST_TMP"))
# SQLAlchemy's name for the same database through psycopg 3.
SQLALCHEMY_URL = DATABASE_URL.replace("postgres://", "postgresql+psycopg://", 1)
# The bearer token every dispatcher started here accepts on its HTTP endpoints.
AUTH_TOKEN = "test-token-" + uuid.uuid4().hex


def uid(prefix: str) -> str:
    """A fresh id, so that no two tests share a stream."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Dispatcher:
    url: str
    process: subprocess.Popen[bytes]


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=2) as res:
            return bool(res.status == 200)
    except OSError:
        return False  # not listening yet, or 503 while it starts


@contextmanager
def dispatcher(group: str) -> Iterator[Dispatcher]:
    """`highwater dispatch --group GROUP`, ready (/readyz 200) when entered, stopped at exit."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = TMP / f"dispatcher-{group}-{port}.log"
    env = {
        **os.environ,
        "HIGHWATER_SSE_TOKENS": AUTH_TOKEN,
        "HIGHWATER_INSTANCE_ID": uid(group),
    }
    args = [HIGHWATER_BIN, "dispatch", "--group", group, "--listen", f"127.0.0.1:{port}",
            "--shutdown-grace", "1s", "--metrics-interval", "1s"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=out)
    pid_file = TMP / "pids" / str(proc.pid)
    pid_file.parent.mkdir(exist_ok=True)
    pid_file.touch()
    try:
        deadline = time.monotonic() + 20
        while not _ready(url):
            if proc.poll() is not None:
                raise RuntimeError(f"dispatcher exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"dispatcher not ready after 20 s:\n{log.read_text()[-4000:]}")
            time.sleep(0.05)
        yield Dispatcher(url, proc)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        pid_file.unlink(missing_ok=True)
