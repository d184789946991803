/** The low-level client: one method per endpoint of sandboxd's HTTP API. */

import { SandboxdError, TimeoutError, errorFor } from "./errors.js";
import type { Approval, Batch, FileInfo, Job, JobEvent, Page, Session, SessionRequest, SubmitRequest, Tool } from "./types.js";

export interface ClientOptions {
  /** Default: process.env.SANDBOXD_URL, else http://127.0.0.1:8080. */
  url?: string;
  /** Default: process.env.SANDBOXD_API_KEY. */
  apiKey?: string;
  /** Bounds each request beyond the time the server is asked to wait (ms). */
  timeoutMs?: number;
}

type Query = Record<string, string | number | undefined>;

function query(q: Query): string {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(q)) {
    if (v !== undefined && v !== "" && v !== 0) p.set(k, String(v));
  }
  const s = p.toString();
  return s ? "?" + s : "";
}

const seg = encodeURIComponent;

function filePath(sessionId: string, path: string): string {
  return `/v1/sessions/${seg(sessionId)}/files/` + path.replace(/^\/+/, "").split("/").map(seg).join("/");
}

function waitParam(ms?: number): string | undefined {
  return ms && ms > 0 ? `${Math.ceil(ms)}ms` : undefined;
}

const terminal = new Set(["succeeded", "failed", "cancelled"]);

interface RequestOptions {
  body?: unknown;
  raw?: BodyInit;
  contentType?: string;
  headers?: Record<string, string | undefined>;
  waitMs?: number;
  accept?: string;
  signal?: AbortSignal;
}

export class Client {
  readonly url: string;
  readonly apiKey: string;
  readonly timeoutMs: number;

  constructor(opts: ClientOptions = {}) {
    this.url = (opts.url ?? process.env.SANDBOXD_URL ?? "http://127.0.0.1:8080").replace(/\/+$/, "");
    this.apiKey = opts.apiKey ?? process.env.SANDBOXD_API_KEY ?? "";
    this.timeoutMs = opts.timeoutMs ?? 30_000;
  }

  private async request(method: string, path: string, o: RequestOptions = {}): Promise<Response> {
    const headers: Record<string, string> = { Accept: o.accept ?? "application/json" };
    if (this.apiKey) headers["Authorization"] = "Bearer " + this.apiKey;
    let body: BodyInit | undefined = o.raw;
    if (o.body !== undefined) {
      body = JSON.stringify(o.body);
      headers["Content-Type"] = "application/json";
    }
    if (o.contentType) headers["Content-Type"] = o.contentType;
    for (const [k, v] of Object.entries(o.headers ?? {})) if (v) headers[k] = v;
    const signal = o.signal ?? AbortSignal.timeout(this.timeoutMs + (o.waitMs ?? 0));
    let resp: Response;
    try {
      resp = await fetch(this.url + path, { method, headers, body, signal });
    } catch (e) {
      const err = e as Error;
      if (err.name === "TimeoutError" || err.name === "AbortError") {
        throw new TimeoutError(`no answer from ${this.url} in time`);
      }
      throw new SandboxdError(`cannot reach sandboxd at ${this.url}: ${(err.cause as Error | undefined)?.message ?? err.message}`);
    }
    if (!resp.ok) throw await this.error(resp);
    return resp;
  }

  private async error(resp: Response): Promise<SandboxdError> {
    const text = await resp.text();
    const retryAfter = Number(resp.headers.get("Retry-After") ?? 0) || 0;
    const rid = resp.headers.get("X-Request-ID") ?? "";
    try {
      const e = (JSON.parse(text) as { error: { code: string; message: string; details?: []; request_id?: string } }).error;
      if (e && e.code) {
        return new (errorFor(resp.status, e.code))(e.message, {
          code: e.code, status: resp.status, details: e.details ?? [], requestId: e.request_id ?? rid, retryAfter,
        });
      }
    } catch {
      // not the API's JSON error
    }
    return new (errorFor(resp.status, ""))(text.trim() || resp.statusText, { status: resp.status, requestId: rid, retryAfter });
  }

  private async json<T>(method: string, path: string, o: RequestOptions = {}): Promise<T> {
    const resp = await this.request(method, path, o);
    return (await resp.json()) as T;
  }

  private async bytes(path: string): Promise<{ data: Uint8Array; contentType: string }> {
    const resp = await this.request("GET", path, { accept: "*/*" });
    return { data: new Uint8Array(await resp.arrayBuffer()), contentType: resp.headers.get("Content-Type") ?? "" };
  }

  health(): Promise<{ status: string; version?: string }> {
    return this.json("GET", "/healthz");
  }

  // -- jobs -----------------------------------------------------------------

  /** POST /v1/jobs; with waitMs the server holds the answer until the job finishes or the wait elapses. */
  submit(req: SubmitRequest, waitMs?: number): Promise<Job> {
    return this.json("POST", "/v1/jobs" + query({ wait: waitParam(waitMs) }), { body: req, waitMs });
  }

  /** GET /v1/jobs/{id}, waiting up to waitMs for it to finish. */
  get(id: string, waitMs?: number): Promise<Job> {
    return this.json("GET", `/v1/jobs/${seg(id)}` + query({ wait: waitParam(waitMs) }), { waitMs });
  }

  /** Long-polls until the job is terminal; TimeoutError after timeoutMs. */
  async wait(id: string, timeoutMs?: number): Promise<Job> {
    const deadline = timeoutMs === undefined ? Infinity : Date.now() + timeoutMs;
    for (;;) {
      const left = Math.min(300_000, deadline - Date.now());
      if (left <= 0) throw new TimeoutError(`job ${id} did not finish in ${timeoutMs} ms`);
      const j = await this.get(id, left);
      if (terminal.has(j.state)) return j;
    }
  }

  /** Submits a call and waits for it. */
  async run(tool: string, args: Record<string, unknown> = {}, opts: { sessionId?: string; timeoutMs?: number } = {}): Promise<Job> {
    const j = await this.submit({ tool, arguments: args, session_id: opts.sessionId }, Math.min(opts.timeoutMs ?? 300_000, 300_000));
    return terminal.has(j.state) ? j : this.wait(j.id, opts.timeoutMs);
  }

  async listJobs(filters: { tool?: string; state?: string; session?: string; tenant?: string; since?: string; until?: string; limit?: number; cursor?: string } = {}): Promise<Page<Job>> {
    const out = await this.json<{ jobs: Job[]; next_cursor: string }>("GET", "/v1/jobs" + query(filters));
    return { items: out.jobs, nextCursor: out.next_cursor };
  }

  cancel(id: string): Promise<Job> {
    return this.json("POST", `/v1/jobs/${seg(id)}/cancel`);
  }

  timeline(id: string): Promise<Record<string, unknown>> {
    return this.json("GET", `/v1/jobs/${seg(id)}/timeline`);
  }

  /** GET /v1/jobs/{id}/artifacts/{name}. */
  artifact(id: string, name: string): Promise<{ data: Uint8Array; contentType: string }> {
    return this.bytes(`/v1/jobs/${seg(id)}/artifacts/${seg(name)}`);
  }

  /** GET an artifact by its result URL. */
  async download(url: string): Promise<Uint8Array> {
    return (await this.bytes(url)).data;
  }

  /** The job's events (replayed, then live) until the finished event. */
  async *events(id: string, opts: { after?: number; signal?: AbortSignal } = {}): AsyncGenerator<JobEvent> {
    const headers: Record<string, string | undefined> = {};
    if (opts.after !== undefined) headers["Last-Event-ID"] = String(opts.after);
    const ctl = new AbortController();
    opts.signal?.addEventListener("abort", () => ctl.abort(opts.signal?.reason));
    const resp = await this.request("GET", `/v1/jobs/${seg(id)}/events`, { headers, accept: "text/event-stream", signal: ctl.signal });
    const reader = resp.body!.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "";
    let data: string[] = [];
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) throw new SandboxdError(`the event stream of ${id} ended before the finished event`);
        buf += value;
        let nl: number;
        while ((nl = buf.indexOf("\n")) >= 0) {
          const line = buf.slice(0, nl).replace(/\r$/, "");
          buf = buf.slice(nl + 1);
          if (line === "") {
            if (data.length === 0) continue;
            const ev = JSON.parse(data.join("\n")) as JobEvent;
            data = [];
            yield ev;
            if (ev.type === "finished") return;
          } else if (line.startsWith("data:")) {
            data.push(line.slice(line.startsWith("data: ") ? 6 : 5));
          }
        }
      }
    } finally {
      ctl.abort();
      reader.releaseLock();
    }
  }

  // -- tools ----------------------------------------------------------------

  /** GET /v1/tools in sandboxd's own shape. */
  async tools(): Promise<Tool[]> {
    return (await this.json<{ tools: Tool[] }>("GET", "/v1/tools")).tools;
  }

  /** GET /v1/tools?format=: openai, anthropic or mcp. */
  async exportTools(format: "openai" | "anthropic" | "mcp"): Promise<Record<string, unknown>[]> {
    return (await this.json<{ tools: Record<string, unknown>[] }>("GET", "/v1/tools" + query({ format }))).tools;
  }

  tool(name: string, format?: "openai" | "anthropic" | "mcp"): Promise<Record<string, unknown>> {
    return this.json("GET", `/v1/tools/${seg(name)}` + query({ format }));
  }

  // -- sessions and files ---------------------------------------------------

  createSession(req: SessionRequest = {}): Promise<Session> {
    return this.json("POST", "/v1/sessions", { body: req, waitMs: 60_000 });
  }

  getSession(id: string): Promise<Session> {
    return this.json("GET", `/v1/sessions/${seg(id)}`);
  }

  async listSessions(filters: { state?: string; limit?: number; cursor?: string } = {}): Promise<Page<Session>> {
    const out = await this.json<{ sessions: Session[]; next_cursor: string }>("GET", "/v1/sessions" + query(filters));
    return { items: out.sessions, nextCursor: out.next_cursor };
  }

  deleteSession(id: string): Promise<Session> {
    return this.json("DELETE", `/v1/sessions/${seg(id)}`);
  }

  putFile(sessionId: string, path: string, data: string | Uint8Array): Promise<FileInfo> {
    return this.json("PUT", filePath(sessionId, path), { raw: data as BodyInit, contentType: "application/octet-stream" });
  }

  /** A file's bytes, or a directory's entries. */
  async getFile(sessionId: string, path: string): Promise<Uint8Array | FileInfo[]> {
    const resp = await this.request("GET", filePath(sessionId, path), { accept: "*/*" });
    if ((resp.headers.get("Content-Type") ?? "").startsWith("application/json")) {
      return ((await resp.json()) as { entries: FileInfo[] }).entries;
    }
    return new Uint8Array(await resp.arrayBuffer());
  }

  /** Unpacks a tar (or tar.gz) into dir; the number of entries written. */
  async putArchive(sessionId: string, dir: string, tar: Uint8Array): Promise<number> {
    const out = await this.json<{ entries: number }>("POST", `/v1/sessions/${seg(sessionId)}/archive` + query({ path: dir }),
      { raw: tar as BodyInit, contentType: "application/x-tar" });
    return out.entries;
  }

  async getArchive(sessionId: string, dir: string): Promise<Uint8Array> {
    return (await this.bytes(`/v1/sessions/${seg(sessionId)}/archive` + query({ path: dir }))).data;
  }

  // -- approvals ------------------------------------------------------------

  async listApprovals(filters: { state?: string; limit?: number; cursor?: string } = {}): Promise<Page<Approval>> {
    const out = await this.json<{ approvals: Approval[]; next_cursor: string }>("GET", "/v1/approvals" + query(filters));
    return { items: out.approvals, nextCursor: out.next_cursor };
  }

  getApproval(id: string): Promise<Approval> {
    return this.json("GET", `/v1/approvals/${seg(id)}`);
  }

  decideApproval(id: string, approve: boolean, reason?: string): Promise<Approval> {
    return this.json("POST", `/v1/approvals/${seg(id)}`, { body: { decision: approve ? "approve" : "deny", reason } });
  }

  // -- turns ----------------------------------------------------------------

  /** POST /v1/tool-calls: one model turn as the model wrote it (an object as JSON, a string as ReAct text). */
  postTurn(turn: unknown, opts: { sessionId?: string; idempotencyKey?: string; callbackUrl?: string; waitMs?: number } = {}): Promise<Batch> {
    const path = "/v1/tool-calls" + query({ wait: waitParam(opts.waitMs), session_id: opts.sessionId, callback_url: opts.callbackUrl });
    const headers = { "Idempotency-Key": opts.idempotencyKey };
    const waitMs = opts.waitMs ?? 300_000;
    if (typeof turn === "string") return this.json("POST", path, { raw: turn, contentType: "text/plain", headers, waitMs });
    return this.json("POST", path, { body: turn, headers, waitMs });
  }

  getTurn(id: string, waitMs?: number): Promise<Batch> {
    return this.json("GET", `/v1/tool-calls/${seg(id)}` + query({ wait: waitParam(waitMs) }), { waitMs });
  }
}
