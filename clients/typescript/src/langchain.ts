/**
 * The LangChain.js adapter: sandboxd's tools as @langchain/core tools, their
 * schemas from GET /v1/tools. A call runs as a sandboxd job (in a session when
 * sessionId is given); the model reads the content (a failure's error text
 * too), and the ToolMessage's artifact is the job.
 */

import { DynamicStructuredTool } from "@langchain/core/tools";

import { Client, type ClientOptions } from "./client.js";
import type { Job } from "./types.js";

export interface LangChainToolsOptions extends ClientOptions {
  client?: Client;
  /** Run every call in this session (state and files persist between calls). */
  sessionId?: string;
  /** Only these tools (default: every available one). */
  include?: string[];
  /** The limit of each call's wait (ms); default 5 minutes. */
  callTimeoutMs?: number;
}

/** What the model reads of a finished job. */
export function jobContent(job: Job): string {
  const r = job.result;
  if (!r) return `Error: the call ${job.state}${job.reason ? ` (${job.reason})` : ""}`;
  if (r.ok) return r.content;
  const parts = [r.content, r.error ? `Error: ${r.error}` : `Error: the call ${job.state}`].filter((s) => s);
  return parts.join("\n");
}

export async function sandboxdTools(opts: LangChainToolsOptions = {}): Promise<DynamicStructuredTool[]> {
  const client = opts.client ?? new Client(opts);
  const list = await client.tools();
  return list
    .filter((t) => t.available && (!opts.include || opts.include.includes(t.name)))
    .map(
      (t) =>
        new DynamicStructuredTool({
          name: t.name,
          description: t.description,
          schema: t.input_schema as Record<string, unknown> & { type: "object" },
          responseFormat: "content_and_artifact",
          func: async (input: Record<string, unknown>): Promise<[string, Job]> => {
            const job = await client.run(t.name, input, { sessionId: opts.sessionId, timeoutMs: opts.callTimeoutMs });
            return [jobContent(job), job];
          },
        }),
    );
}
