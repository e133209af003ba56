"""One slake-cli process in batch mode (slake-cli --batch -): the model is loaded once, requests go
in on standard input one JSON line each, and each answer comes back as one JSON line."""
import json
import os
import subprocess


class EngineDied(Exception):
    """The process exited or wrote something that is not a response."""


def engine_command(slake_cli, model, policy, budget, ctx_size, threads, extra_args):
    cmd = [slake_cli, "-m", model, "-c", str(ctx_size), "--batch", "-", "--kv-policy", policy]
    if policy != "full":
        cmd += ["--kv-budget", str(budget)]
    if threads:
        cmd += ["-t", str(threads)]
    return cmd + list(extra_args)


class Engine:
    def __init__(self, cmd, log_path):
        if not os.path.isfile(cmd[0]) or not os.access(cmd[0], os.X_OK):
            raise EngineDied(f"{cmd[0]}: no such executable (build slake-cli, or give --slake-cli)")
        self.cmd = cmd
        self.log_path = log_path
        self._log = open(log_path, "ab")
        self._log.write(("$ " + " ".join(cmd) + "\n").encode())
        self._log.flush()
        self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log)

    def _log_tail(self, n=5):
        try:
            with open(self.log_path, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def request(self, req):
        """The engine's response to one request (a dict with "text" or "error")."""
        line = json.dumps(req, ensure_ascii=False) + "\n"
        try:
            self._proc.stdin.write(line.encode("utf-8"))
            self._proc.stdin.flush()
            answer = self._proc.stdout.readline()
        except (BrokenPipeError, OSError):
            answer = b""
        if not answer:
            code = self._proc.wait()
            raise EngineDied(f"slake-cli exited (status {code}); the end of {self.log_path}:\n{self._log_tail()}")
        try:
            resp = json.loads(answer)
        except json.JSONDecodeError:
            raise EngineDied(f"slake-cli answered with something that is not JSON: {answer[:200]!r}") from None
        if not isinstance(resp, dict) or resp.get("id") != req.get("id"):
            raise EngineDied(f"slake-cli answered request {req.get('id')!r} with {answer[:200]!r}")
        return resp

    def close(self):
        if self._proc.stdin and not self._proc.stdin.closed:
            try:
                self._proc.stdin.close()
            except OSError:
                pass
        try:
            self._proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout:
            self._proc.stdout.close()
        self._log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
