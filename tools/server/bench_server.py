#!/usr/bin/env python3
"""Decode throughput of an OpenAI-compatible server against its number of slots, at a given context:
slake-server with any KV policies, and llama.cpp's llama-server beside it when given.

For each slot count N and each server configuration (the rounds interleaved: N, then every
configuration at that N), a fresh server with N slots is started on 127.0.0.1 and:
  1. fill: N distinct prompts of `ctx - gen - 8` tokens (passages of ../shared/text, as token ids)
     are sent with max_tokens 1, so each slot holds a prompt as deep as the context allows;
  2. decode: N requests, each its slot's prompt plus one token (so each server routes it to the
     slot that holds the prompt and prefills one token), are sent at once, streaming, greedy,
     ignore_eos, max_tokens `gen`. Every streamed token's arrival time is kept.
The decode window runs from the moment every stream has its first token to the moment the first
stream ends, so every slot decodes throughout. Reported: aggregate tokens/s in the window (tokens
that arrived in it, over all streams, divided by its length), the mean time between a stream's
tokens (per-stream latency, the median over streams, with the slowest stream's), the fill's
prompt tokens/s, and the server's peak RSS (VmHWM of its process).

  .venv/bin/python tools/server/bench_server.py -m models/downloads/SmolLM2-135M-Instruct.Q4_1.gguf \\
      --slots 1,2,4,8,16 -c 4096 --config full --config slake:256 \\
      --llama-server ../llamacpp/build/bin/llama-server -o docs/bench/server-smollm2.json
  .venv/bin/python tools/server/bench_server.py --plot docs/bench/server-smollm2.json -o docs/bench/server.png

--prefix times the prefix cache instead (prefix_ttft): time to first token for a regenerated reply,
an edited last message and other users after one system prompt, against a cold prompt.

A configuration is `POLICY[:BUDGET[:CACHE_TYPE]]` for slake-server (`full`, `slake:256`,
`cake:256:q8_0`, `full::q8_0`, ...) or `llama-server`; the cache type is each server's default
(f16) unless given. Every run is bounded: a server
that does not answer within --timeout seconds fails the run."""
import argparse
import concurrent.futures
import http.client
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.environ.get("SLAKE_SHARED_DIR", os.path.join(os.path.dirname(ROOT), "shared"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def peak_rss(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmHWM:\s+(\d+) kB", f.read()).group(1)) * 1024


class Server:
    """slake-server or llama-server on 127.0.0.1, stopped with SIGTERM (killed if it lingers)."""

    def __init__(self, argv, timeout):
        self.port = free_port()
        self.log = tempfile.NamedTemporaryFile(prefix="bench-server-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(argv + ["--host", "127.0.0.1", "--port", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.time() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{argv[0]} exited with {self.proc.returncode}: {self.log_text()[-2000:]}")
            try:
                if self.request("GET", "/health", timeout=5)[0] == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                self.stop()
                raise RuntimeError(f"{argv[0]} did not start within {timeout} s")
            time.sleep(0.2)

    def log_text(self):
        with open(self.log.name, encoding="utf-8", errors="replace") as f:
            return f.read()

    def request(self, method, path, body=None, timeout=600):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path, body=json.dumps(body) if body is not None else None,
                         headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            return r.status, r.read()
        finally:
            conn.close()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        os.unlink(self.log.name)


def stream_times(port, body, timeout):
    """Sends a streaming completion; returns the arrival time of each chunk that carries text."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            raise RuntimeError(f"status {r.status}: {r.read()[:300]}")
        times = []
        while True:
            line = r.readline()
            if not line or line.strip() == b"data: [DONE]":
                break
            if not line.startswith(b"data: "):
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RuntimeError(f"error event {chunk}")
            if chunk.get("choices") and chunk["choices"][0].get("text"):
                times.append(time.time())
        return times
    finally:
        conn.close()


def prompts(server, n, length):
    """n distinct passages of `length` token ids from the shared texts (tokenized by the server)."""
    text = open(os.path.join(SHARED, "text", "wikitext2-test.txt"), encoding="utf-8").read()
    status, body = server.request("POST", "/tokenize", {"content": text[: 6 * length * n + 100000]})
    if status != 200:
        raise RuntimeError(f"/tokenize: {status} {body[:200]}")
    ids = json.loads(body)["tokens"]
    ids = [t["id"] if isinstance(t, dict) else t for t in ids]
    if len(ids) < n * length:
        raise RuntimeError(f"the text gives {len(ids)} tokens, {n * length} needed")
    return [ids[i * length:(i + 1) * length] for i in range(n)]


def server_argv(config, args, n):
    if config == "llama-server":
        # llama-server's -c is the context of all slots together.
        return [args.llama_server, "-m", args.model, "-c", str(args.ctx * n), "-np", str(n), "-t", str(args.threads)]
    policy, _, rest = config.partition(":")
    budget, _, cache_type = rest.partition(":")
    argv = [os.path.join(args.bin_dir, "slake-server"), "-m", args.model, "-c", str(args.ctx * n), "-np", str(n),
            "-t", str(args.threads), "--queue", str(max(64, n)), "--kv-policy", policy]
    argv += ["--kv-budget", budget] if budget else []
    return argv + (["-ctk", cache_type, "-ctv", cache_type] if cache_type else [])


def run_one(config, n, args):
    server = Server(server_argv(config, args, n), args.timeout)
    try:
        length = args.ctx - args.gen - 8
        ps = prompts(server, n, length)
        t0 = time.time()
        with concurrent.futures.ThreadPoolExecutor(n) as ex:
            fills = list(ex.map(lambda p: server.request("POST", "/v1/completions",
                                                         {"prompt": p, "max_tokens": 1, "temperature": 0},
                                                         timeout=args.timeout), ps))
        fill_s = time.time() - t0
        for status, body in fills:
            if status != 200:
                raise RuntimeError(f"fill: {status} {body[:300]}")
        # Each slot's prompt plus one token: the extension routes every request to its own slot.
        bodies = [{"prompt": p + [p[-1]], "max_tokens": args.gen, "temperature": 0, "ignore_eos": True,
                   "stream": True} for p in ps]
        with concurrent.futures.ThreadPoolExecutor(n) as ex:
            streams = list(ex.map(lambda b: stream_times(server.port, b, args.timeout), bodies))
        rss = peak_rss(server.proc.pid)
    finally:
        server.stop()
    start = max(s[0] for s in streams)
    end = min(s[-1] for s in streams)
    in_window = sum(start < t <= end for s in streams for t in s)
    gaps = [(s[-1] - s[0]) / (len(s) - 1) for s in streams]
    return {"config": config, "slots": n, "ctx": args.ctx, "gen": args.gen, "prompt_tokens": length,
            "tokens": [len(s) for s in streams], "window_s": end - start,
            "aggregate_tps": in_window / (end - start) if end > start else None,
            "latency_ms_median": statistics.median(gaps) * 1000, "latency_ms_max": max(gaps) * 1000,
            "fill_tps": n * length / fill_s, "peak_rss_mib": rss / 2**20}


def metric(server, name):
    status, body = server.request("GET", "/metrics", timeout=30)
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise KeyError(name)


def conversation_bytes(config, args):
    """The KV memory one conversation of --ctx tokens takes: planned (what admission reserves while
    it runs) and held (what its slot keeps once it is idle). slake-server: one real conversation,
    the plan read from /metrics while it decodes; llama-server: the KV cache it allocates per slot."""
    server = Server(server_argv(config, args, 1), args.timeout)
    try:
        if config == "llama-server":
            mib = float(re.search(r"KV self size\s*=\s*([0-9.]+) MiB", server.log_text()).group(1))
            return {"config": config, "ctx": args.ctx, "planned_mib": mib, "held_mib": mib}
        (p,) = prompts(server, 1, args.ctx - args.gen - 8)
        body = {"prompt": p, "max_tokens": args.gen, "temperature": 0, "ignore_eos": True, "stream": True}
        planned = []
        with concurrent.futures.ThreadPoolExecutor(1) as ex:
            fut = ex.submit(stream_times, server.port, body, args.timeout)
            while not fut.done():
                planned.append(metric(server, 'slake_kv_planned_bytes{slot="0"}'))
                time.sleep(0.2)
            fut.result()
        held = metric(server, 'slake_kv_bytes{slot="0"}')
        if not max(planned, default=0):
            raise RuntimeError("the conversation ended before its plan was read from /metrics; raise --gen")
        return {"config": config, "ctx": args.ctx, "planned_mib": max(planned) / 2**20, "held_mib": held / 2**20}
    finally:
        server.stop()


def plot(records, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for model in sorted({r["model"] for r in records}):
        for config in sorted({r["config"] for r in records if r["model"] == model}):
            rs = sorted((r for r in records if r["model"] == model and r["config"] == config), key=lambda r: r["slots"])
            label = f"{model}: {config}"
            a.plot([r["slots"] for r in rs], [r["aggregate_tps"] for r in rs], marker="o", label=label)
            b.plot([r["slots"] for r in rs], [r["latency_ms_median"] for r in rs], marker="o", label=label)
    for ax, ylabel in ((a, "aggregate decode tokens/s"), (b, "per-stream ms per token (median)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("slots decoding together")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    a.legend(fontsize=7)
    fig.suptitle(f"Server decode at {records[0]['ctx']}-token context")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def prefix_ttft(config, args):
    """Time to first token with the prefix cache: a fresh 2-slot server; a system prompt of
    --system tokens and users' messages of 64 (token ids from ../shared/text). cold: the system
    prompt and user 1 (nothing cached: what every one of these requests cost before the prefix
    cache); regenerate: the same again; edit: user 1's message with its last 16 tokens changed;
    users: seven other users after the same system prompt, one after another (median)."""
    server = Server(server_argv(config, args, 2), args.timeout)
    try:
        ps = prompts(server, 10, args.system)
        system = ps[0]
        users = [p[:64] for p in ps[1:]]

        def ttft(prompt):
            body = {"prompt": prompt, "max_tokens": 4, "temperature": 0, "ignore_eos": True, "stream": True}
            t0 = time.time()
            return stream_times(server.port, body, args.timeout)[0] - t0

        r = {"config": config, "system_tokens": args.system, "cold_s": ttft(system + users[0])}
        r["regenerate_s"] = ttft(system + users[0])
        r["edit_s"] = ttft(system + users[0][:48] + users[8][:16])
        r["users_s"] = statistics.median(ttft(system + u) for u in users[1:8])
        r["prefix_hits"] = metric(server, "slake_prefix_hits_total") if config != "llama-server" else None
        return r
    finally:
        server.stop()


def table(records):
    print("| model | config | slots | aggregate tokens/s | ms/token per stream (median / max) | fill prompt tokens/s | peak RSS MiB |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in sorted(records, key=lambda r: (r["model"], r["slots"], r["config"])):
        print(f"| {r['model']} | {r['config']} | {r['slots']} | {r['aggregate_tps']:.1f} | "
              f"{r['latency_ms_median']:.1f} / {r['latency_ms_max']:.1f} | {r['fill_tps']:.0f} | {r['peak_rss_mib']:.0f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model")
    ap.add_argument("--slots", default="1,2,4,8,16")
    ap.add_argument("-c", "--ctx", type=int, default=4096, help="context of each slot")
    ap.add_argument("--gen", type=int, default=64, help="tokens each stream decodes")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--config", action="append", help="full, POLICY:BUDGET or llama-server (repeatable)")
    ap.add_argument("--llama-server", help="llama-server binary (for the llama-server configuration)")
    ap.add_argument("--bin-dir", default=os.environ.get("SLAKE_BIN_DIR", os.path.join(ROOT, "build", "bin")))
    ap.add_argument("--timeout", type=float, default=1800, help="seconds any one request or start may take")
    ap.add_argument("--conversations", type=float, metavar="MIB",
                    help="instead: how many conversations of -c tokens fit in MIB of KV memory, per configuration")
    ap.add_argument("--prefix", action="store_true",
                    help="instead: time to first token for a regenerated reply, an edited message and other users "
                         "after one system prompt, per configuration (prefix_ttft)")
    ap.add_argument("--system", type=int, default=2048, help="--prefix: tokens of the shared system prompt")
    ap.add_argument("--rounds", type=int, default=3, help="--prefix: rounds, configurations interleaved (median)")
    ap.add_argument("-o", "--output", help="JSON lines to append to (with --plot: the image)")
    ap.add_argument("--plot", nargs="+", help="JSON files to plot (-o) and tabulate instead of running")
    args = ap.parse_args()
    if args.plot:
        records = [json.loads(line) for f in args.plot for line in open(f) if line.strip()]
        table(records)
        if args.output:
            plot(records, args.output)
        return 0
    if not args.model:
        ap.error("-m is needed")
    configs = args.config or ["full", "slake:256"]
    if "llama-server" in configs and not args.llama_server:
        ap.error("the llama-server configuration needs --llama-server PATH")
    if args.prefix:
        print(f"| config | cold (before) | regenerate | edit the last message | another user, same {args.system}-token system prompt |")
        print("|---|---:|---:|---:|---:|")
        runs = {c: [] for c in configs}
        for _ in range(args.rounds):
            for config in configs:
                runs[config].append(prefix_ttft(config, args))
        for config in configs:
            med = {k: statistics.median(r[k] for r in runs[config]) for k in ("cold_s", "regenerate_s", "edit_s", "users_s")}
            print(f"| {config} | {med['cold_s']:.2f} s | {med['regenerate_s']:.2f} s | {med['edit_s']:.2f} s | "
                  f"{med['users_s']:.2f} s |", flush=True)
        return 0
    if args.conversations:
        print(f"| config | KV planned per {args.ctx}-token conversation (MiB) | held when idle (MiB) | "
              f"running at once in {args.conversations:.0f} MiB | held in {args.conversations:.0f} MiB |")
        print("|---|---:|---:|---:|---:|")
        for config in configs:
            r = conversation_bytes(config, args)
            print(f"| {config} | {r['planned_mib']:.2f} | {r['held_mib']:.2f} | "
                  f"{int(args.conversations // r['planned_mib'])} | {int(args.conversations // r['held_mib'])} |", flush=True)
        return 0
    for n in (int(s) for s in args.slots.split(",")):
        for config in configs:
            r = run_one(config, n, args)
            r["model"] = os.path.basename(args.model)
            print(json.dumps(r), flush=True)
            if args.output:
                with open(args.output, "a") as f:
                    f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
