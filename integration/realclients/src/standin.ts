// A stand-in model server on loopback for the official SDKs: it answers the
// first request of a conversation with an assistant turn of tool calls and
// every later one by checking the tool answers the agent sends back against
// the SDK's request types and the call ids it issued, then ends the
// conversation with a text that quotes the answers. Any mismatch is a 400
// with the reason, which the SDK raises in the agent loop.
import http from "node:http";
import type { AddressInfo } from "node:net";
import type OpenAI from "openai";
import type Anthropic from "@anthropic-ai/sdk";

type ChatParams = OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming;
type ChatToolMessage = OpenAI.Chat.Completions.ChatCompletionToolMessageParam;
type ResponsesParams = OpenAI.Responses.ResponseCreateParamsNonStreaming;
type FunctionCallOutput = OpenAI.Responses.ResponseInputItem.FunctionCallOutput;
type AnthropicParams = Anthropic.Messages.MessageCreateParamsNonStreaming;
type ToolResult = Anthropic.Messages.ToolResultBlockParam;

/** A tool call the stand-in makes the model ask for. */
export interface ScriptedCall {
  name: string;
  args: Record<string, unknown>;
  /** The answer must contain this text. */
  expect: string;
}

class Refusal extends Error {}

function check(cond: boolean, msg: string): asserts cond {
  if (!cond) throw new Refusal(msg);
}

export class StandIn {
  private server = http.createServer((req, res) => this.handle(req, res));
  private issued = new Map<string, ScriptedCall>(); // call id → call
  private seq = 0;
  /** Every tool answer checked, in order, as "dialect id: content". */
  readonly checked: string[] = [];

  constructor(private script: ScriptedCall[]) {}

  async listen(): Promise<string> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    const a = this.server.address() as AddressInfo;
    return `http://127.0.0.1:${a.port}`;
  }

  close(): void {
    this.server.close();
  }

  private id(prefix: string): string {
    this.seq++;
    return `${prefix}${this.seq.toString().padStart(4, "0")}`;
  }

  private handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      let status = 200;
      let body: unknown;
      try {
        const parsed: unknown = JSON.parse(Buffer.concat(chunks).toString("utf8"));
        switch (req.url) {
          case "/v1/chat/completions":
            body = this.chat(parsed as ChatParams);
            break;
          case "/v1/responses":
            body = this.responses(parsed as ResponsesParams);
            break;
          case "/v1/messages":
            body = this.anthropic(parsed as AnthropicParams);
            break;
          default:
            status = 404;
            body = { error: { message: `no route ${req.url}` } };
        }
      } catch (e) {
        status = 400;
        body = { error: { type: "invalid_request_error", message: `stand-in: ${(e as Error).message}` } };
      }
      res.writeHead(status, { "content-type": "application/json" });
      res.end(JSON.stringify(body));
    });
  }

  /** Checks one answer: an issued id, answered once, with the expected text. */
  private answer(dialect: string, id: string, content: string, answered: Set<string>): void {
    const call = this.issued.get(id);
    check(call !== undefined, `${dialect}: answer for call id ${id}, which was never issued`);
    check(!answered.has(id), `${dialect}: call id ${id} answered twice`);
    check(content.includes(call.expect), `${dialect}: answer ${JSON.stringify(content)} to ${call.name} lacks ${JSON.stringify(call.expect)}`);
    answered.add(id);
    this.checked.push(`${dialect} ${id}: ${content}`);
  }

  private issue(prefix: string): { id: string; call: ScriptedCall }[] {
    return this.script.map((call) => {
      const id = this.id(prefix);
      this.issued.set(id, call);
      return { id, call };
    });
  }

  private chat(p: ChatParams): OpenAI.Chat.Completions.ChatCompletion {
    const tools: ChatToolMessage[] = p.messages.filter((m): m is ChatToolMessage => m.role === "tool");
    const base = { id: this.id("chatcmpl-"), object: "chat.completion" as const, created: 0, model: p.model };
    if (tools.length === 0) {
      return {
        ...base,
        choices: [{
          index: 0, finish_reason: "tool_calls", logprobs: null,
          message: {
            role: "assistant", content: null, refusal: null,
            tool_calls: this.issue("call_").map(({ id, call }) => ({
              id, type: "function" as const, function: { name: call.name, arguments: JSON.stringify(call.args) },
            })),
          },
        }],
      };
    }
    const answered = new Set<string>();
    for (const m of tools) {
      check(typeof m.content === "string", "chat: tool message content is not a string");
      this.answer("chat", m.tool_call_id, m.content as string, answered);
    }
    check(answered.size === this.script.length, `chat: ${answered.size} of ${this.script.length} calls answered`);
    return {
      ...base,
      choices: [{ index: 0, finish_reason: "stop", logprobs: null,
        message: { role: "assistant", content: "done: " + tools.map((m) => m.content).join(" | "), refusal: null } }],
    };
  }

  private responses(p: ResponsesParams): unknown {
    const input = Array.isArray(p.input) ? p.input : [];
    const outputs: FunctionCallOutput[] = input.filter(
      (i): i is FunctionCallOutput => typeof i === "object" && i !== null && "type" in i && i.type === "function_call_output");
    const base = { id: this.id("resp_"), object: "response", created_at: 0, model: p.model, status: "completed",
      parallel_tool_calls: true, tool_choice: "auto", tools: [], error: null, incomplete_details: null,
      instructions: null, metadata: {}, temperature: 1, top_p: 1 };
    if (outputs.length === 0) {
      return {
        ...base,
        output: this.issue("call_").map(({ id, call }) => ({
          type: "function_call", id: this.id("fc_"), call_id: id, name: call.name,
          arguments: JSON.stringify(call.args), status: "completed",
        })),
      };
    }
    const answered = new Set<string>();
    for (const o of outputs) {
      check(typeof o.output === "string", "responses: function_call_output output is not a string");
      this.answer("responses", o.call_id, o.output as string, answered);
    }
    check(answered.size === this.script.length, `responses: ${answered.size} of ${this.script.length} calls answered`);
    const text = "done: " + outputs.map((o) => o.output).join(" | ");
    return { ...base, output: [{ type: "message", id: this.id("msg_"), role: "assistant", status: "completed",
      content: [{ type: "output_text", text, annotations: [] }] }] };
  }

  private anthropic(p: AnthropicParams): Anthropic.Messages.Message {
    const last = p.messages[p.messages.length - 1];
    check(last !== undefined && last.role === "user", "anthropic: the last message is not the user's");
    const blocks = typeof last.content === "string" ? [] : last.content;
    const results: ToolResult[] = blocks.filter((b): b is ToolResult => b.type === "tool_result");
    const base = { id: this.id("msg_"), type: "message" as const, role: "assistant" as const, model: p.model,
      stop_sequence: null, container: null,
      usage: { input_tokens: 1, output_tokens: 1, cache_creation_input_tokens: null, cache_read_input_tokens: null,
        server_tool_use: null, service_tier: null, cache_creation: null, inference_geo: null } };
    if (results.length === 0) {
      return {
        ...base, stop_reason: "tool_use",
        content: [
          { type: "text", text: "Let me run these.", citations: null },
          ...this.issue("toolu_").map(({ id, call }) => ({ type: "tool_use" as const, id, name: call.name, input: call.args, caller: { type: "direct" as const } })),
        ],
      } as unknown as Anthropic.Messages.Message;
    }
    check(blocks.length === results.length, "anthropic: the user message mixes tool results with other blocks");
    const answered = new Set<string>();
    for (const r of results) {
      check(typeof r.content === "string", "anthropic: tool_result content is not a string");
      check(r.is_error === false, `anthropic: tool_result ${r.tool_use_id} is an error: ${r.content}`);
      this.answer("anthropic", r.tool_use_id, r.content as string, answered);
    }
    check(answered.size === this.script.length, `anthropic: ${answered.size} of ${this.script.length} calls answered`);
    return { ...base, stop_reason: "end_turn",
      content: [{ type: "text", text: "done: " + results.map((r) => r.content).join(" | "), citations: null }] } as unknown as Anthropic.Messages.Message;
  }
}
