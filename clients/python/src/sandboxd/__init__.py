"""sandboxd: run LLM agents' tool calls and code in sandboxes.

    from sandboxd import Sandbox
    with Sandbox() as sbx:
        print(sbx.run_code("1 + 1").value)   # 2
"""

from .client import Client
from .errors import (
    AuthenticationError,
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
    SandboxdError,
    ServerError,
    TimeoutError,
    ToolError,
    UnavailableError,
    UnknownToolError,
    UnsupportedError,
    ValidationError,
    WorkspaceFullError,
)
from .sandbox import Artifact, Execution, ExecutionError, FileInfo, Files, Logs, Sandbox, ToolResult

__all__ = [
    "Artifact", "AuthenticationError", "Client", "ConflictError", "Execution", "ExecutionError", "FileInfo",
    "Files", "InvalidRequestError", "Logs", "NotFoundError", "PermissionDeniedError", "RateLimitError",
    "Sandbox", "SandboxdError", "ServerError", "TimeoutError", "ToolError", "ToolResult", "UnavailableError",
    "UnknownToolError", "UnsupportedError", "ValidationError", "WorkspaceFullError",
]
__version__ = "0.1.0"
