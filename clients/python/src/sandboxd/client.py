"""The low-level client: one method per endpoint of sandboxd's HTTP API.
Answers are the API's JSON objects as dicts (see api/openapi.yaml)."""

from __future__ import annotations

import builtins
import json
import os
import socket
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple, Union, cast

from .errors import SandboxdError, TimeoutError, error_for

JSON = Dict[str, Any]

DEFAULT_URL = "http://127.0.0.1:8080"


def _q(params: Mapping[str, Any]) -> str:
    items = {k: v for k, v in params.items() if v not in (None, "", 0)}
    return ("?" + urllib.parse.urlencode(items)) if items else ""


def _seg(s: str) -> str:
    return urllib.parse.quote(s, safe="")


def _file_path(session_id: str, path: str) -> str:
    parts = [urllib.parse.quote(p, safe="") for p in path.lstrip("/").split("/")]
    return f"/v1/sessions/{_seg(session_id)}/files/" + "/".join(parts)


def _wait(seconds: Optional[float]) -> Optional[str]:
    if seconds is None or seconds <= 0:
        return None
    return f"{int(seconds * 1000)}ms"


class Client:
    """A client of one sandboxd server.

    ``url`` and ``api_key`` default to the environment's SANDBOXD_URL and
    SANDBOXD_API_KEY. ``timeout`` (seconds) bounds each request beyond the
    time the server is asked to wait."""

    def __init__(self, url: Optional[str] = None, api_key: Optional[str] = None, *, timeout: float = 30.0) -> None:
        self.url = (url or os.environ.get("SANDBOXD_URL") or DEFAULT_URL).rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("SANDBOXD_API_KEY", "")
        self.timeout = timeout

    # -- transport ---------------------------------------------------------

    def _open(
        self,
        method: str,
        path: str,
        body: Optional[bytes] = None,
        content_type: str = "",
        headers: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
        accept: str = "application/json",
    ) -> Any:
        req = urllib.request.Request(self.url + path, data=body, method=method)
        if content_type:
            req.add_header("Content-Type", content_type)
        req.add_header("Accept", accept)
        if self.api_key:
            req.add_header("Authorization", "Bearer " + self.api_key)
        for k, v in (headers or {}).items():
            if v:
                req.add_header(k, v)
        try:
            return urllib.request.urlopen(req, timeout=timeout or self.timeout)
        except urllib.error.HTTPError as e:
            raise self._error(e) from None
        except (socket.timeout, builtins.TimeoutError) as e:
            raise TimeoutError(f"no answer from {self.url} in time: {e}") from None
        except urllib.error.URLError as e:
            if isinstance(e.reason, socket.timeout):
                raise TimeoutError(f"no answer from {self.url} in time") from None
            raise SandboxdError(f"cannot reach sandboxd at {self.url}: {e.reason}") from None

    @staticmethod
    def _error(e: urllib.error.HTTPError) -> SandboxdError:
        data = e.read(64 << 10)
        retry = int(e.headers.get("Retry-After") or 0) if (e.headers.get("Retry-After") or "").isdigit() else 0
        rid = e.headers.get("X-Request-ID") or ""
        try:
            err = json.loads(data)["error"]
            code, msg = err.get("code", ""), err.get("message", "")
            return error_for(e.code, code)(
                msg, code=code, status=e.code, details=err.get("details") or [],
                request_id=err.get("request_id") or rid, retry_after=retry)
        except (ValueError, KeyError, TypeError, AttributeError):
            text = data.decode("utf-8", "replace").strip() or str(e.reason)
            return error_for(e.code, "")(text, status=e.code, request_id=rid, retry_after=retry)

    def _json(self, method: str, path: str, body: Any = None, *, headers: Optional[Mapping[str, str]] = None,
              wait: Optional[float] = None, raw: Optional[bytes] = None, content_type: str = "") -> JSON:
        data = raw
        if body is not None:
            data, content_type = json.dumps(body).encode(), "application/json"
        timeout = self.timeout + (wait or 0)
        with self._open(method, path, data, content_type, headers, timeout) as resp:
            out = json.loads(resp.read() or b"null")
        if not isinstance(out, dict):
            raise SandboxdError(f"{method} {path}: the answer is not a JSON object")
        return out

    def _bytes(self, method: str, path: str, timeout: Optional[float] = None) -> Tuple[bytes, str]:
        with self._open(method, path, accept="*/*", timeout=timeout) as resp:
            return resp.read(), resp.headers.get("Content-Type", "")

    # -- health ------------------------------------------------------------

    def health(self) -> JSON:
        """GET /healthz."""
        return self._json("GET", "/healthz")

    # -- jobs --------------------------------------------------------------

    def submit(
        self,
        tool: str = "",
        arguments: Optional[Mapping[str, Any]] = None,
        *,
        call: Optional[Mapping[str, Any]] = None,
        call_id: str = "",
        session_id: str = "",
        idempotency_key: str = "",
        limits: Optional[Mapping[str, int]] = None,
        callback_url: str = "",
        wait: Optional[float] = None,
    ) -> JSON:
        """POST /v1/jobs: a call of tool with arguments (or a raw OpenAI,
        Anthropic or MCP ``call``). With ``wait`` (seconds) the server holds
        the answer until the job finishes or the wait elapses."""
        body: JSON = {}
        for k, v in (("tool", tool), ("arguments", arguments), ("call", call), ("call_id", call_id),
                     ("session_id", session_id), ("idempotency_key", idempotency_key), ("limits", limits),
                     ("callback_url", callback_url)):
            if v:
                body[k] = v
        if "arguments" not in body and arguments is not None:
            body["arguments"] = {}
        return self._json("POST", "/v1/jobs" + _q({"wait": _wait(wait)}), body, wait=wait)

    def get(self, job_id: str, *, wait: Optional[float] = None) -> JSON:
        """GET /v1/jobs/{id}, waiting up to ``wait`` seconds for it to finish."""
        return self._json("GET", f"/v1/jobs/{_seg(job_id)}" + _q({"wait": _wait(wait)}), wait=wait)

    def wait(self, job_id: str, timeout: Optional[float] = None) -> JSON:
        """Long-polls until the job is terminal; TimeoutError after
        ``timeout`` seconds (None: no limit)."""
        import time

        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = 300.0 if deadline is None else min(300.0, deadline - time.monotonic())
            if left <= 0:
                raise TimeoutError(f"job {job_id} did not finish in {timeout}s")
            j = self.get(job_id, wait=max(left, 0.001))
            if j["state"] in ("succeeded", "failed", "cancelled"):
                return j

    def list_jobs(self, **filters: Any) -> JSON:
        """GET /v1/jobs with filters tool, state, session, tenant, since,
        until, limit, cursor: {"jobs": [...], "next_cursor": ...}."""
        return self._json("GET", "/v1/jobs" + _q(filters))

    def cancel(self, job_id: str) -> JSON:
        """POST /v1/jobs/{id}/cancel."""
        return self._json("POST", f"/v1/jobs/{_seg(job_id)}/cancel")

    def timeline(self, job_id: str) -> JSON:
        """GET /v1/jobs/{id}/timeline."""
        return self._json("GET", f"/v1/jobs/{_seg(job_id)}/timeline")

    def artifact(self, job_id: str, name: str) -> Tuple[bytes, str]:
        """GET /v1/jobs/{id}/artifacts/{name}: the bytes and the mime type."""
        return self._bytes("GET", f"/v1/jobs/{_seg(job_id)}/artifacts/{_seg(name)}")

    def download(self, url: str) -> bytes:
        """GET an artifact by its result URL (relative to the server)."""
        return self._bytes("GET", url)[0]

    def events(self, job_id: str, *, after: Optional[int] = None, timeout: Optional[float] = None) -> Iterator[JSON]:
        """GET /v1/jobs/{id}/events: the job's events (replayed, then live)
        until the finished event. ``timeout`` bounds the silence between
        two lines (heartbeats come every 15 s)."""
        headers = {"Last-Event-ID": str(after)} if after is not None else {}
        resp = self._open("GET", f"/v1/jobs/{_seg(job_id)}/events", headers=headers,
                          timeout=timeout or max(self.timeout, 60.0), accept="text/event-stream")
        with resp:
            data: List[str] = []
            while True:
                try:
                    line = resp.readline()
                except (socket.timeout, builtins.TimeoutError):
                    raise TimeoutError(f"the event stream of {job_id} was silent for too long") from None
                if not line:
                    raise SandboxdError(f"the event stream of {job_id} ended before the finished event")
                text = line.decode("utf-8").rstrip("\r\n")
                if text == "":
                    if not data:
                        continue
                    ev = json.loads("\n".join(data))
                    data = []
                    yield ev
                    if ev.get("type") == "finished":
                        return
                elif text.startswith("data:"):
                    data.append(text[5:].lstrip(" ") if text.startswith("data: ") else text[5:])

    # -- tools -------------------------------------------------------------

    def tools(self, format: str = "") -> List[JSON]:
        """GET /v1/tools: sandboxd's own shape, or format openai, anthropic, mcp."""
        return cast(List[JSON], self._json("GET", "/v1/tools" + _q({"format": format}))["tools"])

    def tool(self, name: str, format: str = "") -> JSON:
        """GET /v1/tools/{name}."""
        return self._json("GET", f"/v1/tools/{_seg(name)}" + _q({"format": format}))

    # -- sessions and files ------------------------------------------------

    def create_session(self, *, image: str = "", effects: Optional[List[str]] = None,
                       limits: Optional[Mapping[str, int]] = None, ttl_seconds: int = 0,
                       idle_timeout_seconds: int = 0) -> JSON:
        """POST /v1/sessions."""
        body: JSON = {}
        for k, v in (("image", image), ("effects", effects), ("limits", limits), ("ttl_seconds", ttl_seconds),
                     ("idle_timeout_seconds", idle_timeout_seconds)):
            if v:
                body[k] = v
        return self._json("POST", "/v1/sessions", body, wait=60)

    def get_session(self, session_id: str) -> JSON:
        return self._json("GET", f"/v1/sessions/{_seg(session_id)}")

    def list_sessions(self, **filters: Any) -> JSON:
        """GET /v1/sessions (state, limit, cursor)."""
        return self._json("GET", "/v1/sessions" + _q(filters))

    def delete_session(self, session_id: str) -> JSON:
        return self._json("DELETE", f"/v1/sessions/{_seg(session_id)}")

    def put_file(self, session_id: str, path: str, data: Union[bytes, str]) -> JSON:
        """PUT /v1/sessions/{id}/files/{path}: the file's entry."""
        if isinstance(data, str):
            data = data.encode()
        return self._json("PUT", _file_path(session_id, path), raw=data, content_type="application/octet-stream")

    def get_file(self, session_id: str, path: str) -> Union[bytes, List[JSON]]:
        """GET /v1/sessions/{id}/files/{path}: a file's bytes, or a
        directory's entries."""
        with self._open("GET", _file_path(session_id, path), accept="*/*") as resp:
            body = resp.read()
            if resp.headers.get("Content-Type", "").startswith("application/json"):
                return cast(List[JSON], json.loads(body)["entries"])
            return cast(bytes, body)

    def put_archive(self, session_id: str, directory: str, tar: bytes) -> int:
        """POST /v1/sessions/{id}/archive: unpacks a tar (or tar.gz); the
        number of entries written."""
        out = self._json("POST", f"/v1/sessions/{_seg(session_id)}/archive" + _q({"path": directory}),
                         raw=tar, content_type="application/x-tar")
        return int(out["entries"])

    def get_archive(self, session_id: str, directory: str) -> bytes:
        """GET /v1/sessions/{id}/archive: a tar of the directory."""
        return self._bytes("GET", f"/v1/sessions/{_seg(session_id)}/archive" + _q({"path": directory}))[0]

    # -- approvals ---------------------------------------------------------

    def list_approvals(self, **filters: Any) -> JSON:
        """GET /v1/approvals (state, limit, cursor)."""
        return self._json("GET", "/v1/approvals" + _q(filters))

    def get_approval(self, approval_id: str) -> JSON:
        return self._json("GET", f"/v1/approvals/{_seg(approval_id)}")

    def decide_approval(self, approval_id: str, approve: bool, reason: str = "") -> JSON:
        """POST /v1/approvals/{id}."""
        body: JSON = {"decision": "approve" if approve else "deny"}
        if reason:
            body["reason"] = reason
        return self._json("POST", f"/v1/approvals/{_seg(approval_id)}", body)

    # -- turns -------------------------------------------------------------

    def post_turn(self, turn: Union[Mapping[str, Any], List[Any], str], *, session_id: str = "",
                  idempotency_key: str = "", callback_url: str = "", wait: Optional[float] = None) -> JSON:
        """POST /v1/tool-calls: one model turn as the model wrote it (a dict
        or list is sent as JSON, a str as ReAct text)."""
        q = _q({"wait": _wait(wait), "session_id": session_id, "callback_url": callback_url})
        headers = {"Idempotency-Key": idempotency_key}
        if isinstance(turn, str):
            return self._json("POST", "/v1/tool-calls" + q, raw=turn.encode(), content_type="text/plain",
                              headers=headers, wait=wait or 300)
        return self._json("POST", "/v1/tool-calls" + q, turn, headers=headers, wait=wait or 300)

    def get_turn(self, batch_id: str, *, wait: Optional[float] = None) -> JSON:
        return self._json("GET", f"/v1/tool-calls/{_seg(batch_id)}" + _q({"wait": _wait(wait)}), wait=wait)


OutputCallback = Callable[[str], None]
