# sandboxd REPL server: runs cells for the agent over fds 3 (requests in)
# and 4 (messages out), 4-byte big-endian length + JSON each way.
# Kept import-light: every module here is already loaded at startup or
# cheap; json is the only real import, traceback only on errors.
import sys, os, signal, io, _ast, _thread, json

_R, _W = 3, 4
_CHUNK = 1 << 18       # characters per output message
_MAXTEXT = 1 << 18     # characters kept of a value repr or a traceback
_MAXART = 3 << 20      # bytes of PNG per cell
os.set_inheritable(_R, False)
os.set_inheritable(_W, False)
_dumps = json.JSONEncoder(ensure_ascii=False, check_circular=False).encode
_loads = json.loads
_lock = _thread.allocate_lock()
_busy = False     # user code is running: SIGINT raises KeyboardInterrupt
_sending = 0      # a frame is half written: defer the interrupt
_pending = False


def _sigint(signum, frame):
    global _pending
    if not _busy:
        return
    if _sending:
        _pending = True
        return
    raise KeyboardInterrupt


def _send(obj):
    global _sending, _pending
    b = _dumps(obj).encode('utf-8', 'replace')
    v = memoryview(len(b).to_bytes(4, 'big') + b)
    with _lock:
        _sending += 1
        try:
            while v:
                v = v[os.write(_W, v):]
        finally:
            _sending -= 1
    if _pending and _busy and not _sending:
        _pending = False
        raise KeyboardInterrupt


def _recv():
    h = b''
    while len(h) < 4:
        c = os.read(_R, 4 - len(h))
        if not c:
            os._exit(0)
        h += c
    n = int.from_bytes(h, 'big')
    parts = []
    while n:
        c = os.read(_R, min(n, 1 << 20))
        if not c:
            os._exit(0)
        parts.append(c)
        n -= len(c)
    return _loads(b''.join(parts))


class _Out(io.TextIOBase):
    """sys.stdout/sys.stderr: line-buffered, each flush is one frame."""
    encoding = 'utf-8'
    errors = 'replace'

    def __init__(self, name):
        self._name = name
        self._buf = []
        self._n = 0

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError('write() argument must be str, not %s' % type(s).__name__)
        if s:
            self._buf.append(s)
            self._n += len(s)
            if '\n' in s or self._n > 8192:
                self.flush()
        return len(s)

    def flush(self):
        if self._buf:
            d = ''.join(self._buf)
            self._buf = []
            self._n = 0
            for i in range(0, len(d), _CHUNK):  # bound each message
                _send({'t': 'o', 's': self._name, 'd': d[i:i + _CHUNK]})

    def writable(self):
        return True

    def isatty(self):
        return False


sys.path.insert(0, '')  # like a notebook: modules in the working directory import
_out = _Out('stdout')
_err = _Out('stderr')
sys.stdout = sys.__stdout__ = _out
sys.stderr = sys.__stderr__ = _err
_g = {'__name__': '__main__', '__builtins__': __builtins__}
_sources = {}
_ncell = 0


def _clip(s):
    if len(s) <= _MAXTEXT:
        return s
    h = _MAXTEXT // 2
    return '%s\n[... %d characters truncated ...]\n%s' % (s[:h], len(s) - 2 * h, s[-h:])


def _fmt(e):
    import traceback, linecache
    for fn, src in _sources.items():
        linecache.cache[fn] = (len(src), None, src.splitlines(True), fn)
    tb = e.__traceback__
    while tb is not None and not tb.tb_frame.f_code.co_filename.startswith('<cell-'):
        tb = tb.tb_next
    return _clip(''.join(traceback.format_exception(type(e), e, tb)))


def _figures():
    plt = sys.modules.get('matplotlib.pyplot')
    if plt is None:
        return []
    out = []
    try:
        import base64
        total = 0
        for num in plt.get_fignums():
            b = io.BytesIO()
            plt.figure(num).savefig(b, format='png')
            total += len(b.getvalue())
            if total > _MAXART:
                _err.write('sandboxd: figure %d dropped: artifacts over %d bytes\n' % (num, _MAXART))
                continue
            out.append({'name': 'figure-%d.png' % num, 'mime_type': 'image/png',
                        'data': base64.b64encode(b.getvalue()).decode()})
        plt.close('all')
    except Exception as e:
        _err.write('sandboxd: saving figures failed: %r\n' % (e,))
    return out


def _exit_status(code):
    # What the interpreter's exit status would be after SystemExit(code):
    # None is 0, an int is itself (as the kernel keeps it), anything else
    # is printed to stderr and is 1.
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    _err.write('%s\n' % (code,))
    return 1


def _run(code):
    global _busy, _ncell
    _ncell += 1
    fn = '<cell-%d>' % _ncell
    _sources[fn] = code
    res = {'t': 'r', 'ok': True}
    signal.signal(signal.SIGINT, _sigint)  # the user may have replaced it
    _busy = True
    try:
        tree = compile(code, fn, 'exec', _ast.PyCF_ONLY_AST)
        last = None
        if tree.body and isinstance(tree.body[-1], _ast.Expr):
            last = _ast.Expression(tree.body.pop().value)
        exec(compile(tree, fn, 'exec'), _g)
        if last is not None:
            v = eval(compile(last, fn, 'eval'), _g)
            if v is not None:
                _g['_'] = v
                res['value'] = _clip(repr(v))
    except KeyboardInterrupt as e:
        _busy = False
        res.update(ok=False, error=_fmt(e), interrupted=True, exit_code=1)
    except SystemExit as e:  # the session survives sys.exit(): status as a process's
        _busy = False
        n = _exit_status(e.code)
        if n:
            res.update(ok=False, exit_code=n)
    except BaseException as e:
        _busy = False
        res.update(ok=False, error=_fmt(e), exit_code=1)
    _busy = False
    return res


def _main():
    global _busy
    while True:
        req = _recv()
        try:
            res = _run(req['code'])
            _out.flush()
            _err.flush()
            arts = _figures()
            if arts:
                res['artifacts'] = arts
        except KeyboardInterrupt:
            _busy = False
            res = {'t': 'r', 'ok': False, 'error': 'KeyboardInterrupt\n', 'interrupted': True, 'exit_code': 1}
        res['id'] = req.get('id', 0)  # the agent takes only the answer to its cell
        _send(res)


_main()
