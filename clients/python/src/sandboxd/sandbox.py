"""Sandbox: a sandboxd session with the ergonomics of the E2B code
interpreter (``with Sandbox() as sbx: sbx.run_code("1 + 1").text``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Union

from .client import JSON, Client
from .errors import SandboxdError, TimeoutError, ToolError



@dataclass
class Artifact:
    """A file a call produced (a matplotlib figure is an image/png)."""

    name: str
    mime_type: str
    size: int
    url: str
    _client: Optional[Client] = field(default=None, repr=False, compare=False)
    _data: Optional[bytes] = field(default=None, repr=False, compare=False)

    @property
    def data(self) -> bytes:
        """The artifact's bytes (downloaded on first use)."""
        if self._data is None:
            if self._client is None or not self.url:
                raise SandboxdError(f"artifact {self.name} has no URL")
            self._data = self._client.download(self.url)
        return self._data


@dataclass
class ExecutionError:
    """An exception raised by the code (E2B's ``execution.error``)."""

    name: str
    value: str
    traceback: str


@dataclass
class Logs:
    stdout: List[str] = field(default_factory=list)
    stderr: List[str] = field(default_factory=list)


@dataclass
class Execution:
    """The outcome of ``run_code``.

    ``text`` is the call's content (what a model reads: stdout, the value,
    stderr under "[stderr]"); ``value`` the repr of the cell's trailing
    expression (the result's ``value``; None when there is none or it is
    None); ``logs.stdout``/``logs.stderr`` the output chunks as they
    streamed (the printed value last); ``pngs`` the figures' bytes."""

    text: str
    value: Optional[str]
    logs: Logs
    artifacts: List[Artifact]
    error: Optional[ExecutionError]
    job: JSON = field(repr=False)

    @property
    def stdout(self) -> str:
        return "".join(self.logs.stdout)

    @property
    def stderr(self) -> str:
        return "".join(self.logs.stderr)

    @property
    def pngs(self) -> List[bytes]:
        return [a.data for a in self.artifacts if a.mime_type == "image/png"]


@dataclass
class ToolResult:
    """The outcome of ``run(tool, **args)``."""

    ok: bool
    content: str
    error: str
    artifacts: List[Artifact]
    job: JSON = field(repr=False)


@dataclass
class FileInfo:
    name: str
    type: str  # file, dir, symlink or other
    size: int
    mode: str
    mod_time: str


def _file_info(d: Dict[str, Any]) -> FileInfo:
    return FileInfo(d.get("name", ""), d.get("type", ""), int(d.get("size", 0)), d.get("mode", ""), d.get("mod_time", ""))


def _artifacts(client: Client, result: Optional[JSON]) -> List[Artifact]:
    out = []
    for a in (result or {}).get("artifacts") or []:
        out.append(Artifact(a.get("name", ""), a.get("mime_type", ""), int(a.get("size", 0)), a.get("url", ""), client))
    return out


_RAISED = "the code raised "
_EXC = re.compile(r"^([A-Za-z_][\w.]*)(?::\s?(.*))?$")


def _execution_error(error: str, traceback: str) -> ExecutionError:
    """The code's exception from the result's error ("the code raised
    ZeroDivisionError: division by zero") and its traceback; any other
    failure (a timeout, sys.exit) is named Error."""
    if error.startswith(_RAISED):
        m = _EXC.match(error[len(_RAISED):].strip())
        if m:
            return ExecutionError(m.group(1), m.group(2) or "", traceback)
    return ExecutionError("Error", error, traceback)


class Files:
    """The session's workspace (/workspace in the sandbox)."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sbx = sandbox

    def write(self, path: str, data: Union[str, bytes]) -> FileInfo:
        return _file_info(self._sbx.client.put_file(self._sbx.id, path, data))

    def read(self, path: str, format: str = "text") -> Union[str, bytes]:
        """The file's content: str (format "text") or bytes ("bytes")."""
        got = self._sbx.client.get_file(self._sbx.id, path)
        if isinstance(got, list):
            raise SandboxdError(f"{path} is a directory")
        return got.decode() if format == "text" else got

    def list(self, path: str = "/") -> List[FileInfo]:
        got = self._sbx.client.get_file(self._sbx.id, path)
        if not isinstance(got, list):
            raise SandboxdError(f"{path} is not a directory")
        return [_file_info(e) for e in got]

    def exists(self, path: str) -> bool:
        from .errors import NotFoundError

        try:
            self._sbx.client.get_file(self._sbx.id, path)
            return True
        except NotFoundError:
            return False


class Sandbox:
    """A sandboxd session: one sandbox whose Python interpreter (globals,
    imports) and workspace files persist between calls.

    ``url``/``api_key`` default to SANDBOXD_URL/SANDBOXD_API_KEY;
    ``timeout`` (seconds) is the default limit of each call; ``effects``,
    ``image``, ``ttl`` and ``idle_timeout`` go to the session (the server's
    defaults when left out). Use it as a context manager, or call
    ``kill()``."""

    def __init__(
        self,
        url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        timeout: float = 60.0,
        effects: Optional[List[str]] = None,
        image: str = "",
        ttl: int = 0,
        idle_timeout: int = 0,
        request_timeout: float = 30.0,
    ) -> None:
        self.client = Client(url, api_key, timeout=request_timeout)
        self.timeout = timeout
        self.session = self.client.create_session(image=image, effects=effects, ttl_seconds=ttl,
                                                  idle_timeout_seconds=idle_timeout)
        self.id: str = self.session["id"]
        self.files = Files(self)

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.kill()

    def kill(self) -> None:
        """Closes the session (its sandbox and workspace are destroyed)."""
        try:
            self.client.delete_session(self.id)
        except SandboxdError:
            pass

    def _call(self, tool: str, args: Dict[str, Any], timeout: Optional[float],
              on_stdout: Optional[Callable[[str], None]], on_stderr: Optional[Callable[[str], None]],
              logs: Logs) -> JSON:
        limit = self.timeout if timeout is None else timeout
        job = self.client.submit(tool, args, session_id=self.id)
        final: Optional[JSON] = None
        for ev in self.client.events(job["id"], timeout=limit + 60):
            t = ev.get("type")
            if t == "stdout":
                logs.stdout.append(ev.get("data", ""))
                if on_stdout:
                    on_stdout(ev.get("data", ""))
            elif t == "stderr":
                logs.stderr.append(ev.get("data", ""))
                if on_stderr:
                    on_stderr(ev.get("data", ""))
            elif t == "finished":
                final = ev.get("job")
        if not final or not final.get("result"):
            final = self.client.get(job["id"])
        if final.get("reason") == "timeout":
            raise TimeoutError(f"{tool} timed out after {limit:g}s: " + ((final.get("result") or {}).get("error") or ""),
                               code="timeout")
        return final

    def run_code(
        self,
        code: str,
        *,
        timeout: Optional[float] = None,
        on_stdout: Optional[Callable[[str], None]] = None,
        on_stderr: Optional[Callable[[str], None]] = None,
    ) -> Execution:
        """Runs a Python cell in the session's interpreter. An exception in
        the code is ``execution.error`` (not raised); a cell running longer
        than ``timeout`` seconds raises TimeoutError (the interpreter keeps
        its state); API errors raise their SandboxdError subclass."""
        limit = self.timeout if timeout is None else timeout
        args: Dict[str, Any] = {"code": code, "timeout_seconds": max(1, int(round(limit)))}
        logs = Logs()
        job = self._call("python_repl", args, limit, on_stdout, on_stderr, logs)
        res = job.get("result") or {}
        content = res.get("content", "")
        error = None
        value = None
        if res.get("ok"):
            value = res.get("value") or None
        else:
            proc = res.get("process") or {}
            error = _execution_error(str(res.get("error") or job.get("reason", "failed")),
                                     str(proc.get("stderr") or content))
        return Execution(content, value, logs, _artifacts(self.client, res), error, job)

    def run(self, tool: str, *, timeout: Optional[float] = None, check: bool = False,
            on_stdout: Optional[Callable[[str], None]] = None, on_stderr: Optional[Callable[[str], None]] = None,
            **args: Any) -> ToolResult:
        """Calls any tool in the session (``run("bash", command="ls")``).
        A failed call is ``ok=False`` (``check=True`` raises ToolError)."""
        job = self._call(tool, args, timeout, on_stdout, on_stderr, Logs())
        res = job.get("result") or {}
        out = ToolResult(bool(res.get("ok")), res.get("content", ""), res.get("error", ""),
                         _artifacts(self.client, res), job)
        if check and not out.ok:
            raise ToolError(f"{tool} failed: {out.error or job.get('reason', '')}", code=job.get("reason", ""))
        return out
