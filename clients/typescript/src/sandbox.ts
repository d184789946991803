/** Sandbox: a sandboxd session with the ergonomics of the E2B code interpreter. */

import { Client, type ClientOptions } from "./client.js";
import { NotFoundError, SandboxdError, TimeoutError, ToolError } from "./errors.js";
import type { Artifact, FileInfo, Job, Result, Session } from "./types.js";

/** An exception raised by the code (E2B's execution.error). */
export interface ExecutionError {
  name: string;
  value: string;
  traceback: string;
}

export interface Logs {
  stdout: string[];
  stderr: string[];
}

export interface Execution {
  /** The call's content: what a model reads (stdout, the value, stderr under "[stderr]"). */
  text: string;
  /** The repr of the cell's trailing expression (the result's value); undefined when there is none or it is None. */
  value: string | undefined;
  /** The output chunks as they streamed (the printed value last). */
  logs: Logs;
  artifacts: Artifact[];
  error: ExecutionError | undefined;
  job: Job;
  /** The figures' PNG bytes (downloaded). */
  pngs(): Promise<Uint8Array[]>;
}

export interface ToolResult {
  ok: boolean;
  content: string;
  error: string;
  artifacts: Artifact[];
  job: Job;
}

export interface RunOptions {
  timeoutMs?: number;
  onStdout?: (chunk: string) => void;
  onStderr?: (chunk: string) => void;
}

const RAISED = "the code raised ";

/** The code's exception from the result's error ("the code raised ZeroDivisionError: division by zero"). */
export function executionError(error: string, traceback: string): ExecutionError {
  if (error.startsWith(RAISED)) {
    const m = /^([A-Za-z_][\w.]*)(?::\s?(.*))?$/.exec(error.slice(RAISED.length).trim());
    if (m) return { name: m[1]!, value: m[2] ?? "", traceback };
  }
  return { name: "Error", value: error, traceback };
}

export interface SandboxOptions extends ClientOptions {
  /** The default limit of each call (ms); default 60 s. */
  timeoutMs?: number;
  effects?: string[];
  image?: string;
  ttlSeconds?: number;
  idleTimeoutSeconds?: number;
}

export class Files {
  constructor(private readonly sbx: Sandbox) {}

  write(path: string, data: string | Uint8Array): Promise<FileInfo> {
    return this.sbx.client.putFile(this.sbx.id, path, data);
  }

  async read(path: string): Promise<string>;
  async read(path: string, format: "bytes"): Promise<Uint8Array>;
  async read(path: string, format: "text" | "bytes" = "text"): Promise<string | Uint8Array> {
    const got = await this.sbx.client.getFile(this.sbx.id, path);
    if (Array.isArray(got)) throw new SandboxdError(`${path} is a directory`);
    return format === "text" ? new TextDecoder().decode(got) : got;
  }

  async list(path = "/"): Promise<FileInfo[]> {
    const got = await this.sbx.client.getFile(this.sbx.id, path);
    if (!Array.isArray(got)) throw new SandboxdError(`${path} is not a directory`);
    return got;
  }

  async exists(path: string): Promise<boolean> {
    try {
      await this.sbx.client.getFile(this.sbx.id, path);
      return true;
    } catch (e) {
      if (e instanceof NotFoundError) return false;
      throw e;
    }
  }
}

/** A sandboxd session: one sandbox whose interpreter and workspace persist between calls. */
export class Sandbox {
  readonly files: Files;

  private constructor(readonly client: Client, readonly session: Session, readonly timeoutMs: number) {
    this.files = new Files(this);
  }

  get id(): string {
    return this.session.id;
  }

  /** Creates a session (url and apiKey default to SANDBOXD_URL and SANDBOXD_API_KEY). */
  static async create(opts: SandboxOptions = {}): Promise<Sandbox> {
    const client = new Client({ url: opts.url, apiKey: opts.apiKey });
    const session = await client.createSession({
      image: opts.image, effects: opts.effects, ttl_seconds: opts.ttlSeconds, idle_timeout_seconds: opts.idleTimeoutSeconds,
    });
    return new Sandbox(client, session, opts.timeoutMs ?? 60_000);
  }

  /** Closes the session (its sandbox and workspace are destroyed). */
  async kill(): Promise<void> {
    try {
      await this.client.deleteSession(this.id);
    } catch (e) {
      if (!(e instanceof SandboxdError)) throw e;
    }
  }

  private async call(tool: string, args: Record<string, unknown>, o: RunOptions, logs: Logs): Promise<Job> {
    const limit = o.timeoutMs ?? this.timeoutMs;
    const job = await this.client.submit({ tool, arguments: args, session_id: this.id });
    let final: Job | undefined;
    for await (const ev of this.client.events(job.id, { signal: AbortSignal.timeout(limit + 60_000) })) {
      if (ev.type === "stdout") {
        logs.stdout.push(ev.data ?? "");
        o.onStdout?.(ev.data ?? "");
      } else if (ev.type === "stderr") {
        logs.stderr.push(ev.data ?? "");
        o.onStderr?.(ev.data ?? "");
      } else if (ev.type === "finished") {
        final = ev.job;
      }
    }
    if (!final?.result) final = await this.client.get(job.id);
    if (final.reason === "timeout") {
      throw new TimeoutError(`${tool} timed out after ${limit} ms: ${final.result?.error ?? ""}`, { code: "timeout" });
    }
    return final;
  }

  private artifacts(res: Result | undefined): Artifact[] {
    return res?.artifacts ?? [];
  }

  /**
   * Runs a Python cell in the session's interpreter. An exception in the code is execution.error (not thrown);
   * a cell running longer than timeoutMs throws TimeoutError (the interpreter keeps its state).
   */
  async runCode(code: string, o: RunOptions = {}): Promise<Execution> {
    const limit = o.timeoutMs ?? this.timeoutMs;
    const logs: Logs = { stdout: [], stderr: [] };
    const job = await this.call("python_repl", { code, timeout_seconds: Math.max(1, Math.round(limit / 1000)) }, o, logs);
    const res = job.result;
    const content = res?.content ?? "";
    const ok = res?.ok ?? false;
    const artifacts = this.artifacts(res);
    const client = this.client;
    return {
      text: content,
      value: ok ? res?.value || undefined : undefined,
      logs,
      artifacts,
      error: ok ? undefined : executionError(res?.error || job.reason || "failed", res?.process?.stderr || content),
      job,
      pngs: () => Promise.all(artifacts.filter((a) => a.mime_type === "image/png" && a.url).map((a) => client.download(a.url!))),
    };
  }

  /** Calls any tool in the session; a failed call is ok=false (check: true throws ToolError). */
  async run(tool: string, args: Record<string, unknown> = {}, o: RunOptions & { check?: boolean } = {}): Promise<ToolResult> {
    const job = await this.call(tool, args, o, { stdout: [], stderr: [] });
    const res = job.result;
    const out: ToolResult = { ok: res?.ok ?? false, content: res?.content ?? "", error: res?.error ?? "", artifacts: this.artifacts(res), job };
    if (o.check && !out.ok) throw new ToolError(`${tool} failed: ${out.error || job.reason}`, { code: job.reason ?? "" });
    return out;
  }
}
