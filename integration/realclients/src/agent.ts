// Agent loops with the official SDKs, sandboxd as their tool executor: ask
// the (stand-in) model, post its assistant turn as it came out of the SDK to
// sandboxd's POST /v1/tool-calls, and send the tool messages sandboxd
// answers back as the next request, typed as the SDK's own request types,
// until the model answers with text. Run: SANDBOXD_URL=... node dist/agent.js
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";
import { StandIn, type ScriptedCall } from "./standin.js";

const sandboxd = process.env.SANDBOXD_URL ?? "http://127.0.0.1:8080";

/** sandboxd's answer, with the messages typed for the dialect. */
interface Batch<M> {
  id: string;
  state: string;
  dialect: string;
  messages: M[];
  calls: { call_id: string; tool: string; job_id?: string; ok: boolean; content: string }[];
  effects: Record<string, number>;
}

async function runTools<M>(turn: unknown): Promise<Batch<M>> {
  const res = await fetch(`${sandboxd}/v1/tool-calls`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(turn),
  });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`sandboxd answered ${res.status}: ${text}`);
  const b = JSON.parse(text) as Batch<M>;
  if (b.state !== "completed") throw new Error(`batch ${b.id} is ${b.state}`);
  if (process.env.TAMPER === "1" && b.calls[0]) {
    // The test's proof that the stand-in checks: a wrong id must be refused.
    const id = b.calls[0].call_id;
    return JSON.parse(JSON.stringify(b).split(JSON.stringify(id)).join(JSON.stringify("call_tampered"))) as Batch<M>;
  }
  return b;
}

const script: ScriptedCall[] = [
  { name: "python_repl", args: { code: "sum(range(10)) * 2" }, expect: "90" },
  { name: "calculator", args: { expression: "2**10" }, expect: "1024" },
  { name: "bash", args: { command: "echo from-bash" }, expect: "from-bash" },
];

async function chat(baseURL: string): Promise<string> {
  const client = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: "test-key" });
  const messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [{ role: "user", content: "Compute some things." }];
  for (let turn = 0; turn < 4; turn++) {
    const completion = await client.chat.completions.create({ model: "stand-in", messages });
    const msg = completion.choices[0]?.message;
    if (!msg) throw new Error("chat: no choice");
    if (!msg.tool_calls?.length) return msg.content ?? "";
    messages.push(msg); // the assistant message as the SDK returned it
    const batch = await runTools<OpenAI.Chat.Completions.ChatCompletionToolMessageParam>(msg);
    messages.push(...batch.messages);
  }
  throw new Error("chat: no final answer");
}

async function responses(baseURL: string): Promise<string> {
  const client = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: "test-key" });
  const input: OpenAI.Responses.ResponseInput = [{ role: "user", content: "Compute some things." }];
  for (let turn = 0; turn < 4; turn++) {
    const response = await client.responses.create({ model: "stand-in", input });
    const calls = response.output.filter((o): o is OpenAI.Responses.ResponseFunctionToolCall => o.type === "function_call");
    if (calls.length === 0) return response.output_text;
    input.push(...calls);
    const batch = await runTools<OpenAI.Responses.ResponseInputItem.FunctionCallOutput>(response.output);
    input.push(...batch.messages);
  }
  throw new Error("responses: no final answer");
}

async function anthropic(baseURL: string): Promise<string> {
  const client = new Anthropic({ baseURL, apiKey: "test-key" });
  const messages: Anthropic.Messages.MessageParam[] = [{ role: "user", content: "Compute some things." }];
  for (let turn = 0; turn < 4; turn++) {
    const message = await client.messages.create({ model: "stand-in", max_tokens: 1024, messages });
    if (message.stop_reason !== "tool_use") {
      return message.content.map((b) => (b.type === "text" ? b.text : "")).join("");
    }
    messages.push({ role: "assistant", content: message.content });
    const batch = await runTools<Anthropic.Messages.MessageParam>(message);
    messages.push(...batch.messages);
  }
  throw new Error("anthropic: no final answer");
}

async function main(): Promise<void> {
  const standIn = new StandIn(script);
  const base = await standIn.listen();
  try {
    for (const [name, loop] of [["chat", chat], ["responses", responses], ["anthropic", anthropic]] as const) {
      const final = await loop(base);
      for (const c of script) {
        if (!final.includes(c.expect)) throw new Error(`${name}: final answer ${JSON.stringify(final)} lacks ${c.expect}`);
      }
      console.log(`${name}: ${final}`);
    }
    console.log(`checked ${standIn.checked.length} tool answers`);
    if (standIn.checked.length !== 3 * script.length) throw new Error(`checked ${standIn.checked.length} answers`);
  } finally {
    standIn.close();
  }
}

main().catch((e: unknown) => {
  console.error(e instanceof Error ? e.stack ?? e.message : e);
  process.exit(1);
});
