"""What the server benchmarks (`engine_idle.py`, `engine_latency.py`, `fanout.py`) share: a
`sluice server` on a throwaway home with a member's token, its HTTP API, the release binary,
and a fresh PostgreSQL database. Python's standard library only.
"""

import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def request(port, method, path, token=None, body=None, timeout=60, conn=None):
    """One HTTP request to the server on `port`: (status, body bytes). With `conn`, on that
    keep-alive connection (left open)."""
    own = conn is None
    if own:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    headers = {}
    if token:
        headers["Authorization"] = "Bearer " + token
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    conn.request(method, path, body=data, headers=headers)
    r = conn.getresponse()
    out = (r.status, r.read())
    if own:
        conn.close()
    return out


def sluice_binary(log):
    """The release `sluice` (built first unless NO_BUILD=1), or SLUICE=PATH."""
    if not os.environ.get("NO_BUILD"):
        log("building the release binaries")
        subprocess.run(["cargo", "build", "--release", "-p", "sluice-engine", "-p", "sluice-runtime"],
                       cwd=ROOT, check=True)
    return os.environ.get("SLUICE") or os.path.join(ROOT, "target", "release", "sluice")


def fresh_database(url, name):
    """A database `name` of its own on the PostgreSQL server of `url`: its URL."""
    name = f"{name}_{os.getpid()}"
    subprocess.run(["psql", url, "-qc", f"CREATE DATABASE {name}"], check=True,
                   capture_output=True)
    return f"{url.rsplit('/', 1)[0]}/{name}"


class Server:
    """`sluice server` on a home of its own (state in `state`, a PostgreSQL URL, or the home's
    SQLite), a member token of team `bench`, ready when made. `path` folders go first on the
    server's PATH (a stand-in `nvidia-smi`, say)."""

    def __init__(self, sluice, state, prefix, path=(), rate=1000000):
        self.home = tempfile.mkdtemp(prefix=prefix)
        self.env = dict(os.environ, SLUICE_HOME=self.home)
        if path:
            self.env["PATH"] = os.pathsep.join(list(path) + [os.environ.get("PATH", "")])
        if state:
            self.env["SLUICE_STATE"] = state
        out = subprocess.run(
            [sluice, "token", "create", "--team", "bench", "--role", "member", "--output", "json"],
            env=self.env, capture_output=True, text=True, check=True,
        )
        self.token = json.loads(out.stdout)["token"]
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sluice, "server", "--listen", f"127.0.0.1:{self.port}", "--rate", str(rate)],
            env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if request(self.port, "GET", "/readyz")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise SystemExit("the server did not become ready")

    def call(self, method, path, body=None, timeout=60):
        """A request with the member's token: (status, body bytes)."""
        return request(self.port, method, path, self.token, body, timeout)

    def submit(self, source, path, timeout=60):
        """Submits a pipeline's text: its run's id."""
        status, body = self.call("POST", "/api/v1/runs", {"source": source, "path": path},
                                 timeout)
        if status != 201:
            raise SystemExit(f"submit {path}: {status} {body[:200]!r}")
        return json.loads(body)["id"]

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        # Whatever still runs of the runs' steps (their runtimes outlive the server).
        subprocess.run(["pkill", "-f", f"{self.home}/"], check=False)
        shutil.rmtree(self.home, ignore_errors=True)


def logger(name):
    def log(*a):
        print(f"{name}:", *a, file=sys.stderr, flush=True)
    return log
