/** Exceptions of the sandboxd client: one class per API error code. */

export interface Problem {
  field: string;
  message: string;
}

/** A non-2xx answer of the server (the base class alone: a transport failure). */
export class SandboxdError extends Error {
  readonly code: string;
  readonly status: number;
  readonly details: Problem[];
  readonly requestId: string;
  /** Retry-After in seconds (429, 503), else 0. */
  readonly retryAfter: number;

  constructor(message: string, opts: { code?: string; status?: number; details?: Problem[]; requestId?: string; retryAfter?: number } = {}) {
    super(opts.code && opts.status ? `${opts.code} (HTTP ${opts.status}): ${message}` : message);
    this.name = new.target.name;
    this.code = opts.code ?? "";
    this.status = opts.status ?? 0;
    this.details = opts.details ?? [];
    this.requestId = opts.requestId ?? "";
    this.retryAfter = opts.retryAfter ?? 0;
  }
}

/** invalid_request (400), body_too_large (413). */
export class InvalidRequestError extends SandboxdError {}
/** unauthorized (401): a missing or wrong API key. */
export class AuthenticationError extends SandboxdError {}
/** forbidden, effect_not_allowed (403). */
export class PermissionDeniedError extends SandboxdError {}
/** not_found (404). */
export class NotFoundError extends SandboxdError {}
/** unknown_tool (404). */
export class UnknownToolError extends NotFoundError {}
/** conflict, session_closed (409); idempotency_key_reused (422: the key was used for another request). */
export class ConflictError extends SandboxdError {}
/** validation_failed (422): details name each field. */
export class ValidationError extends SandboxdError {}
/** unsupported (422). */
export class UnsupportedError extends SandboxdError {}
/** queue_full, session_limit (429). */
export class RateLimitError extends SandboxdError {}
/** workspace_full (507). */
export class WorkspaceFullError extends SandboxdError {}
/** shutting_down, unavailable (the runner), disk_full (the host's disk), store_unavailable, replica_unavailable (503): retry after retryAfter seconds. */
export class UnavailableError extends SandboxdError {}
/** A job that ran out of time, the server's 504, or the client's deadline. */
export class TimeoutError extends SandboxdError {}
/** internal (500) and other 5xx. */
export class ServerError extends SandboxdError {}
/** A tool call that ran and failed (run(..., {check: true})). */
export class ToolError extends SandboxdError {}

type ErrorClass = new (message: string, opts?: ConstructorParameters<typeof SandboxdError>[1]) => SandboxdError;

const byCode: Record<string, ErrorClass> = {
  invalid_request: InvalidRequestError,
  body_too_large: InvalidRequestError,
  method_not_allowed: InvalidRequestError,
  unauthorized: AuthenticationError,
  forbidden: PermissionDeniedError,
  effect_not_allowed: PermissionDeniedError,
  not_found: NotFoundError,
  unknown_tool: UnknownToolError,
  conflict: ConflictError,
  session_closed: ConflictError,
  validation_failed: ValidationError,
  unsupported: UnsupportedError,
  queue_full: RateLimitError,
  session_limit: RateLimitError,
  workspace_full: WorkspaceFullError,
  idempotency_key_reused: ConflictError,
  shutting_down: UnavailableError,
  unavailable: UnavailableError,
  disk_full: UnavailableError,
  store_unavailable: UnavailableError,
  replica_unavailable: UnavailableError,
  timeout: TimeoutError,
  internal: ServerError,
};

/** The exception class of an answer's status and code. */
export function errorFor(status: number, code: string): ErrorClass {
  const c = byCode[code];
  if (c) return c;
  if (status === 401) return AuthenticationError;
  if (status === 403) return PermissionDeniedError;
  if (status === 404) return NotFoundError;
  if (status === 409) return ConflictError;
  if (status === 422) return ValidationError;
  if (status === 429) return RateLimitError;
  if (status === 504) return TimeoutError;
  if (status >= 500) return ServerError;
  return InvalidRequestError;
}
