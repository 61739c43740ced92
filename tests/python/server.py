"""posenc-server as a child process for the Python client tests, and what their modules share:
servers and clients for a whole module (serve_module, BackendServers), the golden cases
(load_golden_case) and seeded random numbers (rng).

The server listens on 127.0.0.1:0 (a free port chosen by the kernel) and logs the port it got
("posenc-server listening on HOST:PORT ..."); a reader thread collects its output so that the
pipe never fills. With metrics=True it also serves Prometheus metrics on a free port
(--metrics_address), read by requests_total(). POSENC_SERVER_PATH names the binary (ctest sets
it), else build/release/posenc-server of this checkout.
"""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def server_path():
    path = (os.environ.get("POSENC_SERVER_PATH")
            or os.path.join(ROOT, "build", "release", "posenc-server"))
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"posenc-server not found at {path} (build it, or set "
                           "POSENC_SERVER_PATH)")
    return path


def golden_dir():
    return os.environ.get("POSENC_GOLDEN_DIR") or os.path.join(ROOT, "tests", "golden")


def load_golden_case(folder):
    """The case of a golden folder: case.json with its "inputs" and "outputs" read from their .npy
    files (by key) and "params" ({} when absent)."""
    with open(os.path.join(folder, "case.json"), encoding="utf-8") as f:
        case = json.load(f)
    for group in ("inputs", "outputs"):
        case[group] = {key: np.load(os.path.join(folder, spec["file"]))
                       for key, spec in case.get(group, {}).items()}
    case.setdefault("params", {})
    return case


def rng(seed):
    return np.random.default_rng(seed)


class ServerProcess:
    """A running posenc-server; stop() (or the context manager) ends it."""

    def __init__(self, *args, timeout=60.0, metrics=False, listen="127.0.0.1:0"):
        argv = [server_path(), f"--listen={listen}", "--drain_grace=0s",
                "--drain_timeout=2s", *args]
        if metrics:
            argv.append("--metrics_address=127.0.0.1:0")
        self._output = []
        self._lock = threading.Lock()
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if listen.startswith("unix:"):  # a Unix socket: the line names it as given
            self.port = None
            self.address = self._wait_for(r"listening on (unix:\S+)\s", timeout, str)
        else:
            self.port = self._wait_for(r"listening on \S*:(\d+)\s", timeout)
            self.address = f"127.0.0.1:{self.port}"
        self.metrics_port = self._wait_for(r"metrics on http://\S*:(\d+)/", timeout) if (
            metrics) else None

    def _read(self):
        for line in iter(self.process.stdout.readline, b""):
            with self._lock:
                self._output.append(line.decode("utf-8", "replace"))
                if len(self._output) > 2000:  # keep the start-up lines and the latest
                    del self._output[20:1000]
        self.process.stdout.close()

    def output(self):
        with self._lock:
            return "".join(self._output)

    def _wait_for(self, pattern, timeout, convert=int):
        """What the first log line matching `pattern` gives (a port; `convert` of its group)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            m = re.search(pattern, self.output())
            if m:
                return convert(m.group(1))
            if self.process.poll() is not None:
                break
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"posenc-server did not start:\n{self.output()}")

    def requests_total(self, method):
        """posenc_requests_total of `method` ("ApplyRope"), every status code together."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode("utf-8")
        total = 0
        for m in re.finditer(r'^posenc_requests_total\{([^}]*)\} (\S+)$', text, re.MULTILINE):
            if f'method="{method}"' in m.group(1):
                total += int(float(m.group(2)))
        return total

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._reader.join(timeout=5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


class ModuleServer:
    """A server and a client shared by a test module: start() from setUpModule, stop() from
    tearDownModule; ``server`` and ``client`` in between."""

    def __init__(self, *args):
        self.args = args
        self.server = None
        self.client = None

    def start(self):
        """Starts both; returns (server, client)."""
        import posenc  # the package under test (PYTHONPATH), not needed by the other helpers

        self.server = ServerProcess(*self.args)
        self.client = posenc.Client(self.server.address, timeout=60)
        return self.server, self.client

    def stop(self):
        if self.client is not None:
            self.client.close()
        if self.server is not None:
            self.server.stop()


def serve_module(module_name, *args):
    """setUpModule and tearDownModule of the test module `module_name` (its __name__): one server
    started with `args` and a client of it, shared by the module's tests as its SERVER and
    CLIENT."""
    shared = ModuleServer(*args)

    def set_up():
        server, client = shared.start()
        setattr(sys.modules[module_name], "SERVER", server)
        setattr(sys.modules[module_name], "CLIENT", client)

    return set_up, shared.stop


class BackendServers:
    """A server per backend, each started with `args` too, and a client of each, shared by a test
    module: start() from setUpModule, stop() from tearDownModule; ``clients`` by backend name in
    between."""

    def __init__(self, *args, timeout=120):
        self.args = args
        self.timeout = timeout
        self.servers = {}
        self.clients = {}

    def start(self, backends, extra=None):
        """A server for each of `backends`, with the flags `extra` maps its name to."""
        import posenc  # the package under test (PYTHONPATH), as in ModuleServer.start

        for backend in backends:
            flags = (extra or {}).get(backend, [])
            server = ServerProcess(f"--backend={backend}", *self.args, *flags)
            self.servers[backend] = server
            self.clients[backend] = posenc.Client(server.address, timeout=self.timeout)

    def stop(self):
        for client in self.clients.values():
            client.close()
        for server in self.servers.values():
            server.stop()
