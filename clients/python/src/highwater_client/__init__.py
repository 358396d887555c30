"""Append highwater events inside your own PostgreSQL transactions (psycopg 3, SQLAlchemy 2.x)
and read your own writes. The asyncio forms are in ``highwater_client.aio``."""

from .errors import (
    HighwaterError,
    InvalidPayload,
    LimitExceeded,
    UnknownConsumer,
    UnknownEventType,
    VersionConflict,
)
from .events import Appended, NewEvent, Token, append, append_position, token
from .wait import WaitResult, wait_applied
from .wait_http import wait_applied_http

__all__ = [
    "Appended",
    "HighwaterError",
    "InvalidPayload",
    "LimitExceeded",
    "NewEvent",
    "Token",
    "UnknownConsumer",
    "UnknownEventType",
    "VersionConflict",
    "WaitResult",
    "append",
    "append_position",
    "token",
    "wait_applied",
    "wait_applied_http",
]

__version__ = "0.1.0"
