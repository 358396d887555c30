"""Read-your-writes through the dispatcher: ``GET {base_url}/v1/consumers/{consumer}/applied
?after=TOKEN&timeout=...ms[&instance=...]`` with a bearer token (engine/src/wait_http.rs).

One long-poll request, answered by the dispatcher's own deadline, so the standard library's
urllib is all it takes: there is nothing to retry (a retried wait would only wait longer).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.error import HTTPError
from urllib.parse import quote, urlencode
from urllib.request import Request, urlopen

from .errors import HighwaterError, UnknownConsumer
from .events import Token
from .wait import WaitResult

# Our socket timeout beyond the server's: a net in case the dispatcher never answers.
NET_SECONDS = 10.0


def request_for(
    base_url: str, consumer: str, token: Token, timeout: float, auth_token: str, instance: str | None
) -> Request:
    query = {"after": str(token), "timeout": f"{max(0, round(timeout * 1000))}ms"}
    if instance is not None:
        query["instance"] = instance
    url = f"{base_url.rstrip('/')}/v1/consumers/{quote(consumer, safe='')}/applied?{urlencode(query)}"
    headers = {"Authorization": f"Bearer {auth_token}", "Accept": "application/json"}
    return Request(url, headers=headers, method="GET")


def result_of(consumer: str, status: int, text: str) -> WaitResult:
    """The answer's meaning: 200 applied, 408 timed out; anything else raises."""
    body: dict[str, Any] = {}
    try:
        parsed = json.loads(text)
        if isinstance(parsed, dict):
            body = parsed
    except ValueError:
        pass  # 401 answers in plain text
    error = body.get("error")
    reason = error if isinstance(error, str) else (text.strip() or f"HTTP {status}")
    if status == 200:
        return WaitResult(body.get("applied") is True)
    if status == 408:
        return WaitResult(False, body.get("pending"))
    if status == 404:
        raise UnknownConsumer(consumer, reason, status=404)
    raise HighwaterError(f"dispatcher answered {status}: {reason}", status=status)


def wait_applied_http(
    base_url: str,
    consumer: str,
    token: Token,
    *,
    auth_token: str,
    timeout: float = 5.0,
    instance: str | None = None,
) -> WaitResult:
    """The wait of wait_applied through the dispatcher's HTTP endpoint (its ``--listen``
    address; `auth_token` one of its SSE tokens: HIGHWATER_SSE_TOKENS / --sse-tokens-file).

    200 returns ``WaitResult(True)``, 408 ``WaitResult(False, pending)``; 404 raises
    UnknownConsumer, 400 (malformed token, token ahead, timeout above 5 minutes), 401 (no or
    unknown bearer token) and 503 raise HighwaterError with ``status`` and the dispatcher's
    reason. A dispatcher that cannot be reached raises urllib's URLError.
    """
    req = request_for(base_url, consumer, token, timeout, auth_token, instance)
    try:
        with urlopen(req, timeout=timeout + NET_SECONDS) as res:
            status, raw = res.status, res.read()
    except HTTPError as e:
        status, raw = e.code, e.read()
        e.close()
    return result_of(consumer, status, raw.decode("utf-8", "replace"))
