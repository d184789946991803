export { Client, type ClientOptions } from "./client.js";
export * from "./errors.js";
export * from "./types.js";
export { Files, Sandbox, executionError, type Execution, type ExecutionError, type Logs, type RunOptions, type SandboxOptions, type ToolResult } from "./sandbox.js";
