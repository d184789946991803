"""Tests of the sandboxd Python client against a real sandboxd.

Run by integration/clients_test.go (TestPythonClient) with SANDBOXD_URL
and SANDBOXD_API_KEY set, in a virtual environment of Debian's python3
where the package was installed with pip."""

import json
import os
import unittest

import sandboxd
from sandboxd import Client, Sandbox
from sandboxd.errors import error_for
from sandboxd.sandbox import _execution_error


class ErrorTest(unittest.TestCase):
    def test_execution_error(self):
        e = _execution_error("the code raised KeyError: 'k'", "Traceback ...")
        self.assertEqual((e.name, e.value, e.traceback), ("KeyError", "'k'", "Traceback ..."))
        self.assertEqual(_execution_error("process exited with code 3", "").name, "Error")

    def test_error_classes(self):
        # A 503 of any cause is "try again later", a reused idempotency key
        # a conflict (not a 422 validation error without details).
        for code in ("shutting_down", "unavailable", "disk_full", "store_unavailable", "replica_unavailable"):
            self.assertIs(error_for(503, code), sandboxd.UnavailableError, code)
        self.assertIs(error_for(422, "idempotency_key_reused"), sandboxd.ConflictError)
        self.assertIs(error_for(422, "validation_failed"), sandboxd.ValidationError)
        self.assertIs(error_for(503, "something_new"), sandboxd.ServerError)


class LiveTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sbx = Sandbox(timeout=30)

    @classmethod
    def tearDownClass(cls):
        cls.sbx.kill()

    def test_run_code(self):
        chunks = []
        e = self.sbx.run_code('import sys\nprint("hi")\nprint("warn", file=sys.stderr)\nx = 21\nx * 2',
                              on_stdout=chunks.append, on_stderr=chunks.append)
        self.assertIsNone(e.error)
        self.assertEqual(e.value, "42")
        self.assertEqual(e.stdout, "hi\n42\n")
        self.assertEqual(e.stderr, "warn\n")
        self.assertEqual(chunks, ["hi\n", "warn\n", "42\n"])
        self.assertIn("42", e.text)
        self.assertEqual(self.sbx.run_code("x + 1").value, "22")  # the interpreter keeps its globals
        self.assertIsNone(self.sbx.run_code("y = 1").value)

    def test_exception(self):
        e = self.sbx.run_code("1/0")
        self.assertIsNotNone(e.error)
        self.assertEqual(e.error.name, "ZeroDivisionError")
        self.assertEqual(e.error.value, "division by zero")
        self.assertIn("Traceback", e.error.traceback)

    def test_png(self):
        e = self.sbx.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()")
        self.assertIsNone(e.error)
        self.assertEqual(len(e.pngs), 1)
        self.assertTrue(e.pngs[0].startswith(b"\x89PNG"))
        self.assertEqual(len(e.pngs[0]), e.artifacts[0].size)

    def test_files(self):
        info = self.sbx.files.write("data/in.txt", "hello")
        self.assertEqual(info.size, 5)
        self.assertEqual(self.sbx.files.read("data/in.txt"), "hello")
        self.assertEqual(self.sbx.files.read("data/in.txt", format="bytes"), b"hello")
        self.assertEqual([f.name for f in self.sbx.files.list("data")], ["in.txt"])
        self.assertEqual(self.sbx.run_code("open('data/in.txt').read().upper()").value, "'HELLO'")
        self.assertTrue(self.sbx.files.exists("data/in.txt"))
        self.assertFalse(self.sbx.files.exists("data/missing.txt"))
        with self.assertRaises(sandboxd.NotFoundError):
            self.sbx.files.read("nope.txt")

    def test_run_tool(self):
        r = self.sbx.run("bash", command="echo from-bash > b.txt; cat b.txt")
        self.assertTrue(r.ok)
        self.assertEqual(r.content, "from-bash\n")
        r = self.sbx.run("bash", command="exit 3")
        self.assertFalse(r.ok)
        self.assertIn("code 3", r.error)
        with self.assertRaises(sandboxd.ToolError):
            self.sbx.run("bash", command="exit 3", check=True)

    def test_timeout(self):
        self.sbx.run_code("kept = 'yes'")
        with self.assertRaises(sandboxd.TimeoutError) as cm:
            self.sbx.run_code("while True: pass", timeout=1)
        self.assertIsInstance(cm.exception, TimeoutError)  # also the builtin
        self.assertEqual(self.sbx.run_code("kept").value, "'yes'")

    def test_unknown_tool(self):
        with self.assertRaises(sandboxd.UnknownToolError) as cm:
            self.sbx.run("no_such_tool")
        self.assertEqual(cm.exception.code, "unknown_tool")
        self.assertEqual(cm.exception.status, 404)

    def test_validation_error(self):
        with self.assertRaises(sandboxd.ValidationError) as cm:
            self.sbx.run("python_repl", code=5)
        self.assertEqual(cm.exception.status, 422)
        self.assertEqual(cm.exception.details[0]["field"], "/code")

    def test_bad_key(self):
        with self.assertRaises(sandboxd.AuthenticationError) as cm:
            Sandbox(api_key="not-a-key")
        self.assertEqual(cm.exception.code, "unauthorized")
        with self.assertRaises(sandboxd.AuthenticationError):
            Client(api_key="not-a-key").tools()

    def test_client(self):
        c = Client()
        names = [t["name"] for t in c.tools()]
        self.assertIn("python_repl", names)
        for fmt in ("openai", "anthropic", "mcp"):
            self.assertEqual(len(c.tools(fmt)), len(names))
        self.assertEqual(c.tool("bash", "openai")["type"], "function")
        j = c.submit("bash", {"command": "echo a; echo b >&2"}, session_id=self.sbx.id)
        types = [ev["type"] for ev in c.events(j["id"])]
        self.assertEqual(types[0], "queued")
        self.assertEqual(types[-1], "finished")
        self.assertEqual(c.wait(j["id"])["state"], "succeeded")
        self.assertIn(j["id"], [x["id"] for x in c.list_jobs(session=self.sbx.id, limit=100)["jobs"]])
        turn = {"role": "assistant", "tool_calls": [{"id": "call_9", "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"command": "echo turned"})}}]}
        b = c.post_turn(turn, session_id=self.sbx.id, wait=60)
        self.assertEqual(b["state"], "completed")
        self.assertEqual(b["messages"][0]["tool_call_id"], "call_9")
        self.assertIn("turned", b["messages"][0]["content"])
        self.assertEqual(c.get_turn(b["id"])["id"], b["id"])
        with self.assertRaises(sandboxd.NotFoundError):
            c.get("job_missing")


if __name__ == "__main__":
    unittest.main()
