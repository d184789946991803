/** The API's JSON shapes (api/wire in the Go module, api/openapi.yaml). */

import type { Problem } from "./errors.js";

export type JobState = "queued" | "pending_approval" | "running" | "succeeded" | "failed" | "cancelled";

export interface Limits {
  memory_bytes?: number;
  pids?: number;
  cpu_millis?: number;
  timeout_ms?: number;
  output_bytes?: number;
  nofile?: number;
  file_size_bytes?: number;
  disk_bytes?: number;
  disk_inodes?: number;
}

export interface Artifact {
  name: string;
  mime_type: string;
  size: number;
  url?: string;
}

export interface Result {
  ok: boolean;
  content: string;
  error?: string;
  artifacts?: Artifact[];
  usage: { wall_ms: number; cpu_ms?: number; peak_memory_bytes?: number; bytes_in?: number; bytes_out?: number };
  effects?: string[];
  process?: { exit_code: number; signal?: string; oom_killed?: boolean; timed_out?: boolean; fork_loop?: boolean; stdout: string; stderr: string };
  truncated?: boolean;
  /** The repr() of a session python_repl cell's trailing expression. */
  value?: string;
}

export interface Job {
  id: string;
  tenant: string;
  tool: string;
  call_id: string;
  arguments: Record<string, unknown>;
  idempotency_key?: string;
  runner?: string;
  session_id?: string;
  limits: Limits;
  state: JobState;
  reason?: string;
  result?: Result;
  attempts: number;
  created_at: string;
  started_at?: string;
  finished_at?: string;
  guard?: Record<string, unknown>;
  egress?: Record<string, unknown>[];
  callback?: { url: string; state: string; attempts?: { at: string; duration_ms: number; status?: number; error?: string }[] };
}

export interface JobEvent {
  seq: number;
  type: "queued" | "pending_approval" | "started" | "stdout" | "stderr" | "killed" | "finished";
  time: string;
  data?: string;
  job?: Job;
}

export interface SubmitRequest {
  tool?: string;
  arguments?: Record<string, unknown> | string;
  call_id?: string;
  call?: Record<string, unknown>;
  idempotency_key?: string;
  limits?: Limits;
  session_id?: string;
  callback_url?: string;
}

/** A tool in sandboxd's own shape (GET /v1/tools). */
export interface Tool {
  name: string;
  description: string;
  input_schema: Record<string, unknown>;
  output_schema?: Record<string, unknown>;
  effects: string[];
  parallel_safe: boolean;
  idempotent?: boolean;
  source?: string;
  available: boolean;
  unavailable?: string;
}

export interface SessionRequest {
  image?: string;
  effects?: string[];
  limits?: Limits;
  ttl_seconds?: number;
  idle_timeout_seconds?: number;
}

export interface Session {
  id: string;
  tenant: string;
  image: string;
  effects: string[];
  limits: Limits;
  state: "creating" | "active" | "closed" | "failed";
  reason: string;
  ttl_seconds: number;
  idle_timeout_seconds: number;
  created_at: string;
  expires_at: string;
  last_used_at: string;
  closed_at?: string;
  sandbox?: string;
}

export interface FileInfo {
  name: string;
  type: "file" | "dir" | "symlink" | "other";
  size: number;
  mode: string;
  mod_time: string;
}

export interface Approval {
  id: string;
  tenant: string;
  job_id: string;
  session_id?: string;
  tool: string;
  arguments: Record<string, unknown>;
  effects: string[];
  rule: string;
  reason?: string;
  state: "pending" | "approved" | "denied" | "expired";
  created_at: string;
  expires_at: string;
  decided_at?: string;
  decision_reason?: string;
}

export interface CallRecord {
  call_id: string;
  tool: string;
  job_id?: string;
  state: string;
  ok: boolean;
  error?: string;
  details?: Problem[];
  content: string;
  is_error: boolean;
}

export interface Batch {
  id: string;
  state: "pending_approval" | "running" | "completed";
  dialect: string;
  mode: string;
  session_id?: string;
  messages?: Record<string, unknown>[];
  text?: string;
  final_answer?: string;
  calls: CallRecord[];
  effects: Record<string, number>;
  created_at: string;
  finished_at?: string;
  note?: string;
}

export interface Page<T> {
  items: T[];
  nextCursor: string;
}
