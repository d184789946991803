"""Exceptions of the sandboxd client: one class per API error code."""

from __future__ import annotations

import builtins
from typing import Any, Dict, List, Optional, Type


class SandboxdError(Exception):
    """A non-2xx answer of the server (or, for the base class alone, a
    transport failure). ``code`` is the API's error code."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "",
        status: int = 0,
        details: Optional[List[Dict[str, Any]]] = None,
        request_id: str = "",
        retry_after: int = 0,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.details: List[Dict[str, Any]] = details or []
        self.request_id = request_id
        self.retry_after = retry_after

    def __str__(self) -> str:
        if self.code and self.status:
            return f"{self.code} (HTTP {self.status}): {self.message}"
        return self.message


class InvalidRequestError(SandboxdError):
    """invalid_request (400), body_too_large (413)."""


class AuthenticationError(SandboxdError):
    """unauthorized (401): a missing or wrong API key."""


class PermissionDeniedError(SandboxdError):
    """forbidden, effect_not_allowed (403)."""


class NotFoundError(SandboxdError):
    """not_found (404): no such job, session, file, approval or batch."""


class UnknownToolError(NotFoundError):
    """unknown_tool (404)."""


class ConflictError(SandboxdError):
    """conflict, session_closed (409); idempotency_key_reused (422: the key
    was used for another request)."""


class ValidationError(SandboxdError):
    """validation_failed (422): the arguments do not match the tool's
    schema; ``details`` lists each field and what was expected."""


class UnsupportedError(SandboxdError):
    """unsupported (422)."""


class RateLimitError(SandboxdError):
    """queue_full, session_limit (429); ``retry_after`` is in seconds."""


class WorkspaceFullError(SandboxdError):
    """workspace_full (507): the session's disk limit."""


class UnavailableError(SandboxdError):
    """shutting_down, unavailable (the runner), disk_full (the host's
    disk), store_unavailable, replica_unavailable (503): try again after
    ``retry_after`` seconds."""


class TimeoutError(SandboxdError, builtins.TimeoutError):
    """A job ran out of time (its reason is ``timeout``), the server's
    timeout (504) or the client's own deadline."""


class ServerError(SandboxdError):
    """internal (500) and other 5xx."""


class ToolError(SandboxdError):
    """A tool call that ran and failed, raised by ``run(..., check=True)``."""


_BY_CODE: Dict[str, Type[SandboxdError]] = {
    "invalid_request": InvalidRequestError,
    "body_too_large": InvalidRequestError,
    "method_not_allowed": InvalidRequestError,
    "unauthorized": AuthenticationError,
    "forbidden": PermissionDeniedError,
    "effect_not_allowed": PermissionDeniedError,
    "not_found": NotFoundError,
    "unknown_tool": UnknownToolError,
    "conflict": ConflictError,
    "session_closed": ConflictError,
    "validation_failed": ValidationError,
    "unsupported": UnsupportedError,
    "queue_full": RateLimitError,
    "session_limit": RateLimitError,
    "workspace_full": WorkspaceFullError,
    "idempotency_key_reused": ConflictError,
    "shutting_down": UnavailableError,
    "unavailable": UnavailableError,
    "disk_full": UnavailableError,
    "store_unavailable": UnavailableError,
    "replica_unavailable": UnavailableError,
    "timeout": TimeoutError,
    "internal": ServerError,
}


def error_for(status: int, code: str) -> Type[SandboxdError]:
    """The exception class of an answer's status and code."""
    if code in _BY_CODE:
        return _BY_CODE[code]
    if status == 401:
        return AuthenticationError
    if status == 403:
        return PermissionDeniedError
    if status == 404:
        return NotFoundError
    if status == 409:
        return ConflictError
    if status == 422:
        return ValidationError
    if status == 429:
        return RateLimitError
    if status == 504:
        return TimeoutError
    if status >= 500:
        return ServerError
    return InvalidRequestError
