// Tests of the TypeScript client and its LangChain.js adapter against a real
// sandboxd (SANDBOXD_URL, SANDBOXD_API_KEY), run by
// integration/clients_test.go (TestTypeScriptClient) with node --test.

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import { ToolInputParsingException } from "@langchain/core/tools";

import {
  AuthenticationError, Client, ConflictError, NotFoundError, Sandbox, ServerError, TimeoutError, ToolError, UnavailableError, UnknownToolError,
  ValidationError, errorFor, executionError,
} from "../src/index.js";
import { sandboxdTools } from "../src/langchain.js";

describe("executionError", () => {
  it("names the code's exception", () => {
    assert.deepEqual(executionError("the code raised KeyError: 'k'", "Traceback ..."), { name: "KeyError", value: "'k'", traceback: "Traceback ..." });
    assert.equal(executionError("process exited with code 3", "").name, "Error");
  });
  it("has a class per error code", () => {
    // A 503 of any cause is "try again later", a reused idempotency key a conflict.
    for (const code of ["shutting_down", "unavailable", "disk_full", "store_unavailable", "replica_unavailable"]) {
      assert.equal(errorFor(503, code), UnavailableError, code);
    }
    assert.equal(errorFor(422, "idempotency_key_reused"), ConflictError);
    assert.equal(errorFor(422, "validation_failed"), ValidationError);
    assert.equal(errorFor(503, "something_new"), ServerError);
  });
});

describe("Sandbox", () => {
  let sbx: Sandbox;
  before(async () => {
    sbx = await Sandbox.create({ timeoutMs: 30_000 });
  });
  after(async () => {
    await sbx.kill();
  });

  it("runs code with state, streams and a value", async () => {
    const chunks: string[] = [];
    const e = await sbx.runCode('import sys\nprint("hi")\nprint("warn", file=sys.stderr)\nx = 21\nx * 2', {
      onStdout: (s) => chunks.push(s), onStderr: (s) => chunks.push(s),
    });
    assert.equal(e.error, undefined);
    assert.equal(e.value, "42");
    assert.deepEqual(e.logs, { stdout: ["hi\n", "42\n"], stderr: ["warn\n"] });
    assert.deepEqual(chunks, ["hi\n", "warn\n", "42\n"]);
    assert.equal((await sbx.runCode("x + 1")).value, "22");
  });

  it("reports the code's exception", async () => {
    const e = await sbx.runCode("1/0");
    assert.equal(e.error?.name, "ZeroDivisionError");
    assert.equal(e.error?.value, "division by zero");
  });

  it("returns PNG figures", async () => {
    const e = await sbx.runCode("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()");
    const pngs = await e.pngs();
    assert.equal(pngs.length, 1);
    assert.deepEqual([...pngs[0]!.slice(0, 4)], [0x89, 0x50, 0x4e, 0x47]);
  });

  it("moves files", async () => {
    assert.equal((await sbx.files.write("data/in.txt", "hello")).size, 5);
    assert.equal(await sbx.files.read("data/in.txt"), "hello");
    assert.deepEqual((await sbx.files.list("data")).map((f) => f.name), ["in.txt"]);
    assert.equal(await sbx.files.exists("data/missing"), false);
    await assert.rejects(sbx.files.read("nope.txt"), NotFoundError);
  });

  it("runs tools", async () => {
    const r = await sbx.run("bash", { command: "echo from-bash" });
    assert.equal(r.ok, true);
    assert.equal(r.content, "from-bash\n");
    assert.equal((await sbx.run("bash", { command: "exit 3" })).ok, false);
    await assert.rejects(sbx.run("bash", { command: "exit 3" }, { check: true }), ToolError);
  });

  it("times out and keeps the interpreter", async () => {
    await sbx.runCode("kept = 'yes'");
    await assert.rejects(sbx.runCode("while True: pass", { timeoutMs: 1000 }), TimeoutError);
    assert.equal((await sbx.runCode("kept")).value, "'yes'");
  });

  it("throws per error code", async () => {
    await assert.rejects(sbx.run("no_such_tool"), (e: unknown) => e instanceof UnknownToolError && e.status === 404);
    await assert.rejects(sbx.run("python_repl", { code: 5 }),
      (e: unknown) => e instanceof ValidationError && e.status === 422 && e.details[0]?.field === "/code");
    await assert.rejects(Sandbox.create({ apiKey: "not-a-key" }), (e: unknown) => e instanceof AuthenticationError && e.code === "unauthorized");
  });
});

describe("Client", () => {
  it("lists tools in each format, streams events and posts turns", async () => {
    const c = new Client();
    const tools = await c.tools();
    for (const f of ["openai", "anthropic", "mcp"] as const) assert.equal((await c.exportTools(f)).length, tools.length);
    const j = await c.submit({ tool: "bash", arguments: { command: "echo a; echo b >&2" } });
    const types: string[] = [];
    for await (const ev of c.events(j.id)) types.push(ev.type);
    assert.equal(types[0], "queued");
    assert.equal(types[types.length - 1], "finished");
    assert.equal((await c.wait(j.id)).state, "succeeded");
    const b = await c.postTurn({ role: "assistant", tool_calls: [{ id: "call_7", type: "function",
      function: { name: "bash", arguments: JSON.stringify({ command: "echo turned" }) } }] }, { waitMs: 60_000 });
    assert.equal(b.state, "completed");
    assert.equal(b.messages?.[0]?.["tool_call_id"], "call_7");
    await assert.rejects(c.get("job_missing"), NotFoundError);
  });
});

describe("LangChain.js adapter", () => {
  it("turns sandboxd's tools into @langchain/core tools", async () => {
    const c = new Client();
    const session = await c.createSession();
    try {
      const tools = await sandboxdTools({ client: c, sessionId: session.id });
      const byName = new Map(tools.map((t) => [t.name, t]));
      const listed = await c.tools();
      assert.equal(tools.length, listed.filter((t) => t.available).length);
      const repl = byName.get("python_repl")!;
      assert.deepEqual(repl.schema, listed.find((t) => t.name === "python_repl")!.input_schema);
      assert.equal(repl.description, listed.find((t) => t.name === "python_repl")!.description);

      // A direct invocation returns the content; a tool call a ToolMessage whose artifact is the job.
      assert.equal(await repl.invoke({ code: "acc = 40" }), "");
      assert.equal(await repl.invoke({ code: "acc + 2" }), "42\n");
      const msg = await repl.invoke({ type: "tool_call", id: "call_1", name: "python_repl", args: { code: "acc * 2" } });
      assert.equal(msg.content, "80\n");
      assert.equal(msg.tool_call_id, "call_1");
      assert.equal(msg.artifact.session_id, session.id);

      // A failed call is text the model reads; invalid arguments are refused by LangChain with the schema.
      assert.match(await byName.get("bash")!.invoke({ command: "exit 3" }), /Error: process exited with code 3/);
      await assert.rejects(repl.invoke({ code: 5 } as unknown as { code: string }), ToolInputParsingException);
    } finally {
      await c.deleteSession(session.id);
    }
  });
});
