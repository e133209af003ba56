"""Shared helpers of the LongBench tests: where things are (SLAKE_BIN_DIR, SLAKE_SHARED_DIR, set
by tests/longbench/run.sh), the batch engine, and a small LongBench-format sample built here."""
import json
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tools", "longbench"))
sys.path.insert(0, HERE)

BIN = os.environ.get("SLAKE_BIN_DIR", os.path.join(REPO, "build", "bin"))
SHARED = os.environ.get("SLAKE_SHARED_DIR", os.path.join(REPO, "..", "shared"))
MODEL = os.path.join(SHARED, "models", "stories260K.gguf")
TOKENIZER_BIN = os.path.join(SHARED, "models", "tok512.bin")
CONFIG = os.path.join(SHARED, "longbench")
SLAKE_CLI = os.path.join(BIN, "slake-cli")
LONGBENCH = os.path.join(REPO, "tools", "longbench", "longbench.py")


def require_shared(*paths):
    """Skips the test class when the shared material or slake-cli is missing."""
    missing = [p for p in (MODEL, TOKENIZER_BIN, CONFIG, SLAKE_CLI) + paths if not os.path.exists(p)]
    return unittest.skipIf(bool(missing), f"missing: {', '.join(missing)}")


def batch(requests, *flags):
    """slake-cli --batch on stories260K: the list of responses."""
    text = "".join(r if isinstance(r, str) else json.dumps(r) + "\n" for r in requests)
    proc = subprocess.run([SLAKE_CLI, "-m", MODEL, "-c", "1024", "-t", "1", "--batch", "-", *flags],
                          input=text.encode(), capture_output=True, check=True)
    return [json.loads(line) for line in proc.stdout.decode().splitlines()]


def longbench(*args):
    """tools/longbench/longbench.py with this Python: (exit status, stdout, stderr)."""
    proc = subprocess.run([sys.executable, LONGBENCH, *args], capture_output=True, text=True)
    return proc.returncode, proc.stdout, proc.stderr


STORY = ("Lily went to the park. She saw a big dog. The dog was happy and wagged its tail. "
         "Tom had a red ball. He threw the ball and the dog ran after it. ")


def sample_records(dataset, n, long_every=3):
    """n records shaped like LongBench's, every long_every-th with a long context (truncated at the
    tests' --max-length), with answers and classes that the dataset's metric can use."""
    out = []
    for i in range(n):
        context = STORY * (12 if i % long_every == 0 else 1)
        rec = {"_id": f"{dataset}-{i:03d}", "input": f"Question {i}: who went to the park?", "context": context,
               "answers": ["Lily"], "all_classes": None, "length": 1000 + 3000 * i, "language": "en"}
        if dataset == "trec":
            rec["all_classes"] = ["Animal", "Location", "Human being"]
            rec["answers"] = ["Human being"]
        if dataset == "passage_retrieval_en":
            rec["answers"] = ["Paragraph 2"]
        if dataset == "passage_count":
            rec["answers"] = ["3"]
        out.append(rec)
    return out


def write_jsonl(path, records):
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
