"""The cost of structured output: a greedy chat reply under a 10-field JSON schema against the
unconstrained reply of the same length (ignore_eos), from a running slake-server, rounds
interleaved. Prints each round's tokens per second and the ratio, then the constrained reply.

    python3 tools/server/bench_structured.py http://127.0.0.1:8080 [ROUNDS]
"""
import json
import sys
import time
import urllib.request

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 30},
        "city": {"type": "string", "maxLength": 30},
        "country": {"type": "string", "maxLength": 30},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "height_cm": {"type": "number"},
        "married": {"type": "boolean"},
        "email": {"type": "string", "maxLength": 40},
        "born": {"type": "string", "format": "date"},
        "languages": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 4},
        "job": {"enum": ["engineer", "teacher", "doctor", "artist", "other"]},
    },
    "required": ["name", "city", "country", "age", "height_cm", "married", "email", "born", "languages", "job"],
    "additionalProperties": False,
}
MESSAGES = [{"role": "user", "content": "Invent a person and describe them as JSON."}]


def chat(url, body):
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.loads(r.read())
    return time.perf_counter() - t, out


def main():
    url = sys.argv[1].rstrip("/")
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    for i in range(rounds):
        dt, out = chat(url, {"messages": MESSAGES, "temperature": 0, "max_tokens": 400,
                             "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}})
        n = out["usage"]["completion_tokens"]
        dt_free, free = chat(url, {"messages": MESSAGES, "temperature": 0, "max_tokens": n, "ignore_eos": True})
        assert free["usage"]["completion_tokens"] == n
        print(f"round {i}: {n} tokens, constrained {n / dt:.1f} t/s, unconstrained {n / dt_free:.1f} t/s, "
              f"ratio {dt_free / dt:.3f}")
    print(out["choices"][0]["message"]["content"])


if __name__ == "__main__":
    main()
