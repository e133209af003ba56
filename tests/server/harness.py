"""Starting and stopping slake-server for the tests and the load test, and slake-cli's greedy output
to compare with. The server listens on 127.0.0.1 with --port 0 (a free port, read back from its
log), and is stopped with SIGTERM at the end (killed if it does not stop within its time)."""
import ctypes
import json
import os
import re
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

BIN = os.environ.get("SLAKE_BIN_DIR", "")
# SLAKE_BACKEND=cuda: the server and slake-cli run --backend cuda, built on the host executor
# (slake-server-emu, slake-cli-emu), so CI runs these tests through the device forward pass.
BACKEND = os.environ.get("SLAKE_BACKEND", "cpu")
EMU = "-emu" if BACKEND == "cuda" else ""
BACKEND_ARGS = ("--backend", BACKEND) if BACKEND == "cuda" else ()
SHARED = os.environ.get("SLAKE_SHARED_DIR", "")
MODELS = os.environ.get("SLAKE_MODELS_DIR", "")
STORIES = os.path.join(SHARED, "models", "stories260K.gguf")
# A DeepSeek-R1 distill's template (its generation prompt opens <think>), and a grammar that makes
# stories260K close the block, which it never would unprompted: the thinking tests' model.
R1 = os.path.join(SHARED, "chat-templates", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja")
THINK_THEN_ANSWER = 'root ::= [a-z ]{3,30} "</think>" "\\n\\n" [a-z ]{3,30}'
# stories260K has no chat template: the chat tests give it SmolLM2's (ChatML).
CHATML = os.path.join(SHARED, "chat-templates", "HuggingFaceTB-SmolLM2-135M-Instruct.jinja")
SMOLLM2 = os.path.join(MODELS, "SmolLM2-135M-Instruct.Q4_1.gguf")


def _die_with_parent():
    """In the server's process: SIGTERM when the test process dies, however it dies (a timeout, a
    failed setUpClass), so no server outlives its test."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Server:
    def __init__(self, model, *args, timeout=30):
        """`model`: -m; None for router mode (--models-dir or --models-preset in `args`)."""
        self.log = tempfile.NamedTemporaryFile(prefix="slake-server-", suffix=".log", delete=False)
        self.proc = subprocess.Popen([os.path.join(BIN, "slake-server" + EMU), *(("-m", model) if model else ()), "--port", "0",
                                      *BACKEND_ARGS, *args],
                                     stdout=subprocess.DEVNULL, stderr=self.log, preexec_fn=_die_with_parent)
        self.log.close()  # the server writes it; it is read back by name
        deadline = time.time() + timeout
        self.port = None
        while time.time() < deadline and self.port is None:
            if self.proc.poll() is not None:
                raise RuntimeError(f"slake-server exited with {self.proc.returncode}: {self.log_text()}")
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.log_text())
            if m:
                self.port = int(m.group(1))
            else:
                time.sleep(0.05)
        if self.port is None:
            self.stop()
            raise RuntimeError("slake-server did not start: " + self.log_text())
        self.url = f"http://127.0.0.1:{self.port}"

    def log_text(self):
        with open(self.log.name, encoding="utf-8", errors="replace") as f:
            return f.read()

    def get(self, path):
        with urllib.request.urlopen(self.url + path, timeout=10) as r:
            return r.read().decode()

    def call(self, path, body=None, timeout=120, raw=None):
        """(status, parsed JSON reply) of a GET (no body) or a POST of `body` as JSON (or of the
        bytes `raw`); errors too."""
        data = raw if raw is not None else json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def metric(self, name):
        """The value of an unlabelled metric, or of `name{label}` given whole."""
        for line in self.get("/metrics").splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
        raise KeyError(name)

    def stop(self, timeout=10):
        """SIGTERM; returns the exit code (None if it had to be killed)."""
        rc = None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        else:
            rc = self.proc.returncode
        os.unlink(self.log.name)
        return rc


def cli_greedy(model, prompt, n, ctx, *extra):
    """slake-cli --temp 0: the generated text alone (the trailing newline it prints removed)."""
    out = subprocess.run([os.path.join(BIN, "slake-cli" + EMU), "-m", model, "-c", str(ctx), "-p", prompt, "-n", str(n),
                          "--temp", "0", "--no-display-prompt", *BACKEND_ARGS, *extra],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120, check=True)
    text = out.stdout.decode()
    assert text.endswith("\n"), text
    return text[:-1]
