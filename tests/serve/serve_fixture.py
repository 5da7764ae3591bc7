"""What the end-to-end tests of specd serve share: failing with a message, and a real
`specd serve` process waited for until it listens (its port read from its start line, never a
fixed sleep)."""
import re
import subprocess
import sys
import threading
import time


def fail(msg):
    print("FAIL:", msg, flush=True)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def start(cmd, pattern):
    """Starts cmd and waits for pattern (with one group: the port) on its stderr: (process,
    port)."""
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    lines = []
    deadline = time.time() + 120
    while time.time() < deadline:
        line = p.stderr.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(pattern, line)
        if m:
            # keep draining stderr so the process never blocks on a full pipe
            threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
            return p, int(m.group(1))
    p.kill()
    fail("%s did not start:\n%s" % (cmd[0], "".join(lines)))


def start_serve(specd, model, args):
    """`specd serve -m MODEL --port 0 ARGS...`: (process, port) once it listens."""
    return start([specd, "serve", "-m", model, "--port", "0"] + list(args),
                 r"listening on http://127\.0\.0\.1:(\d+)")


def stop_serve(p):
    """SIGTERM, and a clean exit (under the sanitizers a leak or an error makes it non-zero)."""
    p.terminate()
    try:
        rc = p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        fail("specd serve did not stop on SIGTERM")
    check(rc == 0, "specd serve exited %d on SIGTERM" % rc)
