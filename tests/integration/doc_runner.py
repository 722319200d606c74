"""Runs the examples of Markdown files as written, in the order written,
file after file, against one fresh `make run` server, as a reader who
follows the documents would (test_docs.py runs it in a network namespace
of its own, so that 127.0.0.1:6379 is free whatever runs beside).

    doc_runner.py WORKDIR FILE.md...

What runs, by the fence's language:
  sh      by bash -e in WORKDIR, with build/ on PATH (the floodgate tool);
          redis-cli fails on an error reply unless the line's comment says
          "(error)"; a line whose comment says "(exit N)" must exit N
  redis   one command a line, sent by redis-cli (text after '#' is a
          comment; "(error)" there: the reply must be an error)
  python  in one interpreter a file, so a block sees what the file's
          blocks before it defined; a ">>>" block runs its statements (a
          traceback shown must be raised)
  c       compiled through pkg-config against a staged `make install`,
          then run
  nginx   an http {} block, checked by nginx -t with the module loaded
  other   read, not run (syntax, output, configuration)

Marks, an HTML comment on the line before the fence:
  <!-- not run: why -->   a block to read only (it installs into the
                          system, needs hardware or hours ...)
  <!-- file: NAME -->     the block is the file NAME in WORKDIR

Servers: one with the module on 127.0.0.1:6379, as `make run` starts it,
and one more for every other redis://127.0.0.1:PORT a file names.

Two terminals: in a sh block, "# in a second terminal" ends the first
terminal's part, which goes on in the background; the second part starts
once the server holds a blocked client (the first part waits in it), and
"# then" waits for both before the rest.

Exit status 0 when every block ran as its document says; otherwise the
block's place and what went wrong, on stderr.
"""

import os
import re
import shlex
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(REPO, "build")
MODULE = os.path.join(BUILD, "floodgate.so")
NGINX_MODULE = os.path.join(BUILD, "nginx", "objs", "ngx_http_floodgate_module.so")
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
MARK = re.compile(r"<!--\s*(not run|file):\s*(.*?)\s*-->\s*$")
ERROR_REPLY = re.compile(r"^(ERR|WRONGTYPE|OOM|NOPERM|NOAUTH|NOSCRIPT|BUSY\w*|CROSSSLOT|"
                         r"READONLY|NOREPLICAS|EXECABORT|UNBLOCKED|LOADING|TRYAGAIN) ")
TIMEOUT = 60

SHELL_PRELUDE = r"""
set -eo pipefail
redis-cli() {
    local out rc=0
    out=$(command redis-cli "$@") || rc=$?
    [ -n "$out" ] && printf '%s\n' "$out"
    [ "$rc" -eq 0 ] || return "$rc"
    if printf '%s\n' "$out" | head -1 | grep -Eq '""" + ERROR_REPLY.pattern[1:] + r"""'; then
        [ -n "$DOC_EXPECT_ERROR" ] && return 0
        echo "an error reply where the document shows none" >&2; return 1
    fi
    if [ -n "$DOC_EXPECT_ERROR" ]; then echo "no error reply where the document shows one" >&2; return 1; fi
}
doc_exit() {
    local want=$1 rc=0; shift
    "$@" || rc=$?
    [ "$rc" -eq "$want" ] || { echo "exit $rc where the document says $want" >&2; return 1; }
}
"""


class Failed(Exception):
    pass


def blocks(text):
    """(line, language, body, mark, mark value) of each fenced block."""
    for m in BLOCK.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = MARK.match(before.strip())
        yield line, m.group(1), m.group(2), mark and mark.group(1), mark and mark.group(2)


def comment_start(line):
    """Where a shell line's comment starts (an unquoted '#' at the start of
    a word), or -1."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return i
    return -1


def shell_line(line):
    """A document's line as the runner runs it: an expected error or exit."""
    at = comment_start(line)
    code, comment = (line, "") if at < 0 else (line[:at].rstrip(), line[at:])
    if not code.strip():
        return line
    exit_code = re.search(r"\(exit (\d+)\)", comment)
    if exit_code:
        return "doc_exit %s %s" % (exit_code.group(1), code)
    if "(error)" in comment:
        return "DOC_EXPECT_ERROR=1 " + code
    return code


def terminal_parts(body):
    """[(first, second)] pieces of a sh block: a piece runs its first part
    in the background and its second part once the server holds a blocked
    client; a piece without a second terminal is (lines, None)."""
    pieces, first, second, current = [], [], None, None
    current = first
    for line in body.splitlines():
        text = line.strip().lower()
        if text.startswith("# in a second terminal"):
            second = []
            current = second
            continue
        if text.startswith("# then") and second is not None:
            pieces.append((first, second))
            first, second = [], None
            current = first
            continue
        current.append(line)
    pieces.append((first, second))
    return pieces


def blocked_clients():
    out = subprocess.run(["redis-cli", "INFO", "clients"], capture_output=True, text=True,
                         errors="backslashreplace").stdout
    m = re.search(r"blocked_clients:(\d+)", out)
    return int(m.group(1)) if m else 0


def bash(lines, env, cwd, background=False):
    script = SHELL_PRELUDE + "\n".join(shell_line(l) for l in lines) + "\n"
    proc = subprocess.Popen(["bash", "-c", script], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="backslashreplace")
    if background:
        return proc
    return finish(proc)


def finish(proc):
    try:
        out, _ = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        raise Failed("still running after %d s:\n%s" % (TIMEOUT, out))
    if proc.returncode != 0:
        raise Failed("exit %d:\n%s" % (proc.returncode, out))
    return out


def run_sh(body, env, cwd):
    for first, second in terminal_parts(body):
        if second is None:
            bash(first, env, cwd)
            continue
        before = blocked_clients()
        proc = bash(first, env, cwd, background=True)
        deadline = time.monotonic() + TIMEOUT
        while blocked_clients() <= before:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise Failed("the first terminal never waited in the server:\n%s" % finish(proc))
            time.sleep(0.01)
        bash(second, env, cwd)
        finish(proc)


def run_redis(body, env, cwd):
    lines = []
    for line in body.splitlines():
        code, _, comment = line.partition("#")
        if not code.strip():
            continue
        prefix = "DOC_EXPECT_ERROR=1 " if "(error)" in comment else ""
        # the words as redis-cli's prompt reads them, none for the shell
        words = " ".join(shlex.quote(w) for w in shlex.split(code))
        lines.append(prefix + "redis-cli " + words)
    bash(lines, env, cwd)


def python_code(body):
    """A block's code; a ">>>" transcript's statements, each a try when a
    traceback follows it in the transcript."""
    if not body.lstrip().startswith(">>>"):
        return body
    statements, current = [], None
    for line in body.splitlines():
        if line.startswith(">>> "):
            current = [line[4:], False]
            statements.append(current)
        elif line.startswith("... ") and current:
            current[0] += "\n" + line[4:]
        elif current and re.match(r"[\w.]*(Error|Exception)\b", line):
            current[1] = True
    out = []
    for code, raises in statements:
        if raises:
            out.append("try:\n    %s\nexcept Exception as e:\n    print(repr(e))\n"
                       "else:\n    raise SystemExit('no exception where the document shows one')"
                       % code.replace("\n", "\n    "))
        else:
            out.append("print(repr(%s))" % code if "=" not in code and "\n" not in code else code)
    return "\n".join(out) + "\n"


PYTHON_DRIVER = r"""
import sys, traceback
scope = {"__name__": "__main__"}
while True:
    size = sys.stdin.readline()
    if not size:
        break
    code = sys.stdin.read(int(size))
    try:
        exec(compile(code, "<example>", "exec"), scope)
        answer = "ok"
    except BaseException:
        answer = traceback.format_exc()
    sys.stdout.flush()
    sys.stderr.write("@@%d\n%s" % (len(answer), answer))
    sys.stderr.flush()
"""


class Python:
    """One interpreter for the python blocks of a file, in order: a block
    sees what the blocks before it defined, as in one program."""

    def __init__(self, env, cwd):
        self.proc = subprocess.Popen([sys.executable, "-u", "-c", PYTHON_DRIVER], cwd=cwd,
                                     env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)

    def run(self, code):
        self.proc.stdin.write("%d\n%s" % (len(code), code))
        self.proc.stdin.flush()
        while True:  # the block's own stderr comes first
            line = self.proc.stderr.readline()
            if not line:
                raise Failed("the interpreter ended")
            if line.startswith("@@"):
                answer = self.proc.stderr.read(int(line[2:]))
                break
        if answer != "ok":
            raise Failed(answer)

    def stop(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=TIMEOUT)


def run_c(body, env, cwd, line):
    source = os.path.join(cwd, "example_%d.c" % line)
    with open(source, "w") as f:
        f.write(body)
    flags = "$(pkg-config --cflags --libs floodgate) -Wl,-rpath,$(pkg-config --variable=libdir " \
            "floodgate)"
    if "floodgate_libevent.h" in body:
        flags += " $(pkg-config --libs libevent)"
    program = source[:-2]
    bash(["cc -Wall -Werror -o %s %s %s" % (program, source, flags), program], env, cwd)


def run_nginx(body, env, cwd, line):
    if not body.lstrip().startswith("http"):
        return  # a directive shown alone
    conf = os.path.join(cwd, "nginx_%d.conf" % line)
    with open(conf, "w") as f:
        f.write("load_module %s;\nerror_log stderr;\npid %s/nginx.pid;\nevents {}\n%s"
                % (NGINX_MODULE, cwd, body))
    bash(["nginx -t -q -p %s/ -c %s" % (cwd, conf)], env, cwd)


class Servers:
    """redis-server with the module on each port, as `make run` starts it."""

    def __init__(self, ports, cwd):
        self.procs = []
        for port in ports:
            self.procs.append(subprocess.Popen(
                ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--dir", cwd, "--loadmodule", MODULE],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for port in ports:
            deadline = time.monotonic() + TIMEOUT
            while subprocess.run(["redis-cli", "-p", str(port), "PING"], capture_output=True,
                                 text=True).stdout.strip() != "PONG":
                if time.monotonic() > deadline:
                    raise Failed("no server on port %d" % port)
                time.sleep(0.02)

    def stop(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait(timeout=TIMEOUT)


def run_file(path, env, cwd):
    """The examples of one document; how many ran."""
    text = open(path).read()
    python = Python(env, cwd)
    ran = 0
    try:
        for line, language, body, mark, value in blocks(text):
            if mark == "not run":
                if not value:
                    raise Failed("%s:%d: a block not run says why" % (path, line))
                continue
            if mark == "file":
                with open(os.path.join(cwd, value), "w") as f:
                    f.write(body)
                continue
            run = RUNS.get(language)
            if run is None:
                continue
            try:
                run(body, env, cwd, line, python)
            except Failed as e:
                raise Failed("%s:%d (%s): %s" % (path, line, language, e))
            ran += 1
    finally:
        python.stop()
    return ran


RUNS = {
    "sh": lambda body, env, cwd, line, python: run_sh(body, env, cwd),
    "redis": lambda body, env, cwd, line, python: run_redis(body, env, cwd),
    "python": lambda body, env, cwd, line, python: python.run(python_code(body)),
    "c": lambda body, env, cwd, line, python: run_c(body, env, cwd, line),
    "nginx": lambda body, env, cwd, line, python: run_nginx(body, env, cwd, line),
}
RUNS["bash"] = RUNS["shell"] = RUNS["sh"]


def main(cwd, paths):
    texts = "".join(open(p).read() for p in paths)
    ports = sorted({6379} | {int(p) for p in re.findall(r"redis://127\.0\.0\.1:(\d+)", texts)})
    env = dict(os.environ, PATH=BUILD + os.pathsep + os.environ["PATH"],
               PYTHONPATH=os.path.join(REPO, "bindings", "python"))
    env.pop("FLOODGATE_URL", None)
    servers = Servers(ports, cwd)
    try:
        for path in paths:
            ran = run_file(path, env, cwd)
            print("%s: examples ran: %d" % (os.path.relpath(path, REPO), ran))
    finally:
        servers.stop()


if __name__ == "__main__":
    try:
        main(sys.argv[1], sys.argv[2:])
    except Failed as e:
        print(e, file=sys.stderr)
        sys.exit(1)
