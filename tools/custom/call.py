# Calls the one function of a tool file with the call's arguments (JSON on
# stdin: source, file, function, arguments, content_and_artifact) and
# writes one JSON envelope to stdout: {"ok", "content", "error",
# "artifacts"}. What the function prints goes to stderr, so it never mixes
# with the envelope. Runs inside the tool's sandbox.
import base64, json, sys, traceback


def text(v):
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    if isinstance(v, (bytes, bytearray)):
        try:
            return bytes(v).decode("utf-8")
        except UnicodeDecodeError:
            return None
    return json.dumps(v, default=str, ensure_ascii=False)


def artifact(v, i):
    name, mime = f"artifact-{i}", ""
    if isinstance(v, dict) and "data" in v:
        name = str(v.get("name") or name)
        mime = str(v.get("mime_type") or "")
        v = v["data"]
    if isinstance(v, (bytes, bytearray)):
        data = bytes(v)
    elif isinstance(v, str):
        data, mime = v.encode("utf-8"), mime or "text/plain"
    else:
        data, mime = json.dumps(v, default=str).encode("utf-8"), mime or "application/json"
    return {"name": name, "mime_type": mime, "data": base64.b64encode(data).decode("ascii")}


def main():
    req = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    out = sys.stdout
    sys.stdout = sys.stderr
    env = {"ok": True, "content": ""}
    try:
        import linecache
        src = req["source"]
        linecache.cache[req["file"]] = (len(src), None, src.splitlines(True), req["file"])
        g = {"__name__": "sandboxd_tool", "__builtins__": __builtins__}
        exec(compile(req["source"], req["file"], "exec"), g)
        ret = g[req["function"]](**req["arguments"])
        arts = []
        if req.get("content_and_artifact"):
            if not (isinstance(ret, tuple) and len(ret) == 2):
                raise TypeError("the tool returns (content, artifact) but returned " + type(ret).__name__)
            ret, art = ret
            if art is not None:
                arts = art if isinstance(art, list) else [art]
        content = text(ret)
        if content is None:  # binary: an artifact, never the model's text
            arts.insert(0, ret)
            content = ""
        env["content"] = content
        if arts:
            env["artifacts"] = [artifact(a, i + 1) for i, a in enumerate(arts)]
    except BaseException as e:
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != req["file"]:
            tb = tb.tb_next
        lines = traceback.format_exception(type(e), e, tb)
        env = {"ok": False, "error": "".join(traceback.format_exception_only(type(e), e)).strip(),
               "traceback": "".join(lines)}
    out.write(json.dumps(env, ensure_ascii=False))
    out.flush()


main()
