# Derives a tool from a Python file defining one function, the way
# LangChain's @tool does: the name, the description (the docstring; none is
# refused) and the input schema (from the signature's type hints and
# defaults). It reads the source on stdin and prints one JSON object. The
# file is parsed, never imported or run: deriving a schema executes none of
# the tool's code (and runs inside a sandbox anyway).
import ast, json, re, sys

SECTIONS = re.compile(r"^\s*(Args|Arguments|Parameters|Params|Returns?|Yields?|Raises|Examples?|Notes?|See Also|Attributes)\s*:\s*$")
ARGLINE = re.compile(r"^\s*\*{0,2}(\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")
SETTINGS = {"effects", "parallel_safe", "idempotent", "return_direct", "result_as_answer", "response_format", "timeout", "image"}


class Refused(Exception):
    pass


def parse_doc(doc):
    lines = doc.splitlines()
    desc, args, section, current, indent = [], {}, None, None, None
    for line in lines:
        m = SECTIONS.match(line)
        if m:
            section, current = m.group(1).lower(), None
            continue
        if section is None:
            desc.append(line)
        elif section in ("args", "arguments", "parameters", "params"):
            if not line.strip():
                continue
            ind = len(line) - len(line.lstrip())
            am = ARGLINE.match(line)
            if am and (indent is None or ind <= indent):
                indent, current = ind, am.group(1)
                args[current] = am.group(3).strip()
            elif current is not None:
                args[current] = (args[current] + " " + line.strip()).strip()
    return "\n".join(desc).strip(), args


def literal(node, what):
    try:
        return ast.literal_eval(node)
    except Exception:
        raise Refused(f"{what} must be a literal (a number, string, list, dict, True, False or None)")


def base_name(node):
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def schema_of(node, where):
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            raise Refused(f"{where}: cannot read the type hint {node.value!r}")
    if isinstance(node, ast.Constant) and node.value is None:
        return {"type": "null"}
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return union([schema_of(node.left, where), schema_of(node.right, where)])
    name = base_name(node)
    simple = {"int": {"type": "integer"}, "float": {"type": "number"}, "str": {"type": "string"},
              "bool": {"type": "boolean"}, "list": {"type": "array"}, "List": {"type": "array"},
              "Sequence": {"type": "array"}, "tuple": {"type": "array"}, "Tuple": {"type": "array"},
              "set": {"type": "array", "uniqueItems": True}, "dict": {"type": "object"},
              "Dict": {"type": "object"}, "Mapping": {"type": "object"}, "Any": {}, "None": {"type": "null"},
              "NoneType": {"type": "null"}}
    if name is not None and not isinstance(node, ast.Subscript):
        if name in simple:
            return dict(simple[name])
        raise Refused(f"{where}: unsupported type hint {name} (use int, float, str, bool, list[...], dict[...], Optional[...], Literal[...])")
    if isinstance(node, ast.Subscript):
        outer = base_name(node.value)
        sl = node.slice
        params = list(sl.elts) if isinstance(sl, ast.Tuple) else [sl]
        if outer in ("list", "List", "Sequence", "set"):
            s = {"type": "array", "items": schema_of(params[0], where)}
            if outer == "set":
                s["uniqueItems"] = True
            return s
        if outer in ("tuple", "Tuple"):
            if len(params) == 2 and isinstance(params[1], ast.Constant) and params[1].value is Ellipsis:
                return {"type": "array", "items": schema_of(params[0], where)}
            items = [schema_of(p, where) for p in params]
            return {"type": "array", "prefixItems": items, "minItems": len(items), "maxItems": len(items)}
        if outer in ("dict", "Dict", "Mapping"):
            s = {"type": "object"}
            if len(params) == 2:
                s["additionalProperties"] = schema_of(params[1], where)
            return s
        if outer == "Optional":
            return union([schema_of(params[0], where), {"type": "null"}])
        if outer == "Union":
            return union([schema_of(p, where) for p in params])
        if outer == "Literal":
            values = [literal(p, f"{where}: a Literal value") for p in params]
            s = {"enum": values}
            kinds = {type(v) for v in values}
            if len(kinds) == 1:
                k = kinds.pop()
                t = {str: "string", bool: "boolean", int: "integer", float: "number"}.get(k)
                if t:
                    s["type"] = t
            return s
        if outer == "Annotated":
            s = schema_of(params[0], where)
            for extra in params[1:]:
                if isinstance(extra, ast.Constant) and isinstance(extra.value, str):
                    s["description"] = extra.value
            return s
        raise Refused(f"{where}: unsupported type hint {outer}[...]")
    raise Refused(f"{where}: unsupported type hint {ast.dump(node)[:60]}")


def union(schemas):
    flat = []
    for s in schemas:
        flat.extend(s["anyOf"] if list(s) == ["anyOf"] else [s])
    return flat[0] if len(flat) == 1 else {"anyOf": flat}


def derive(src):
    try:
        tree = ast.parse(src)
    except SyntaxError as e:
        raise Refused(f"syntax error at line {e.lineno}: {e.msg}")
    settings = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            n = node.targets[0].id
            if n in SETTINGS:
                settings[n] = literal(node.value, f"the setting {n}")
    funcs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and not n.name.startswith("_")]
    if len(funcs) != 1:
        names = ", ".join(f.name for f in funcs) or "none"
        raise Refused(f"a tool file defines exactly one public function (a name not starting with _); this one defines {len(funcs)}: {names}")
    f = funcs[0]
    if isinstance(f, ast.AsyncFunctionDef):
        raise Refused(f"function {f.name} is async; write a plain def")
    doc = ast.get_docstring(f)
    if not doc or not doc.strip():
        raise Refused(f"function {f.name} has no docstring: a tool needs a description (LangChain's @tool refuses such a function too)")
    desc, argdocs = parse_doc(doc)
    if not desc:
        raise Refused(f"function {f.name}'s docstring has no description before its sections")
    a = f.args
    if a.vararg or a.kwarg:
        raise Refused(f"function {f.name} takes *args or **kwargs; a tool's parameters must be named")
    if a.posonlyargs:
        raise Refused(f"function {f.name} has positional-only parameters; a tool is called with keyword arguments")
    props, required = {}, []
    pos_defaults = [None] * (len(a.args) - len(a.defaults)) + list(a.defaults)
    for p, d in list(zip(a.args, pos_defaults)) + list(zip(a.kwonlyargs, a.kw_defaults)):
        where = f"parameter {p.arg}"
        if p.annotation is None:
            raise Refused(f"{where} of {f.name} has no type hint")
        s = schema_of(p.annotation, where)
        if argdocs.get(p.arg):
            s["description"] = argdocs[p.arg]
        if d is None:
            required.append(p.arg)
        else:
            s["default"] = literal(d, f"the default of {where}")
        props[p.arg] = s
    split = settings.get("response_format") == "content_and_artifact"
    ret = f.returns
    if ret is not None and isinstance(ret, ast.Subscript) and base_name(ret.value) in ("tuple", "Tuple"):
        sl = ret.slice
        if isinstance(sl, ast.Tuple) and len(sl.elts) == 2 and settings.get("response_format") is None:
            split = True
    schema = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        schema["required"] = required
    out = {"name": f.name, "description": desc, "input_schema": schema, "content_and_artifact": split}
    for k in ("effects", "parallel_safe", "idempotent", "return_direct", "result_as_answer", "timeout", "image"):
        if k in settings:
            out[k] = settings[k]
    return out


def main():
    try:
        out = derive(sys.stdin.read())
    except Refused as e:
        out = {"error": str(e)}
    sys.stdout.write(json.dumps(out))


main()
