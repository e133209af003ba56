#!/usr/bin/env python3
"""RULER-style synthetic long-context tasks, generated locally from a seed (no downloaded data), run
through one slake-cli --batch process for all the KV policies and budgets (--kv-sweep), and scored as RULER scores them: the share
of the expected values that appear in the reply (string match, case-insensitive).

Tasks, in RULER's templates (Hsieh et al., "RULER: What's the Real Context Size of Your
Long-Context Language Models?", 2024), each prompt filled to about -c tokens:
  niah_single_number   one needle "One of the special magic numbers for KEY is: NUMBER." (7 digits)
                       at a random depth of a haystack of repeated filler sentences
  niah_single_uuid     the same with a UUID, in a haystack of ../shared/text passages
  niah_multikey        four needles of different keys (three distractors), passage haystack
  niah_multivalue      four numbers for one key, all asked for, filler haystack
  variable_tracking    a chain "VAR A = 12345", "VAR B = VAR A", ... of four names hidden in filler;
                       every name that holds the value asked for
  common_words         a list of words, ten of which occur 30 times and the others 3 times; the
                       ten most common asked for
The reply is a raw completion after RULER's answer prefix (no chat template), greedy, 32 tokens at
most for a number, 64 for a UUID or a list.

  .venv/bin/python tools/ruler/ruler.py run -m models/downloads/SmolLM2-135M-Instruct.F16.gguf -c 2048 \\
      -n 8 --policies full,streaming,snapkv,cake,slake --budgets 128,256 -o ruler.jsonl
  .venv/bin/python tools/ruler/ruler.py table ruler.jsonl

A task on which the full cache scores below 50% is reported but not used to rank the policies
(the table's "mean (ranked)" column averages the other tasks)."""
import argparse
import json
import os
import random
import string
import subprocess
import sys
import tempfile
import threading
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.environ.get("SLAKE_SHARED_DIR", os.path.join(os.path.dirname(ROOT), "shared"))
FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
WORDS = ("apple river stone cloud garden window silver horse candle forest market bridge lantern meadow "
         "harbor mirror pepper violin desert castle ribbon tunnel marble falcon orchard compass velvet "
         "glacier canyon thunder blossom whistle harvest saddle beacon pillow crystal feather anchor").split()
TASKS = ["niah_single_number", "niah_single_uuid", "niah_multikey", "niah_multivalue", "variable_tracking", "common_words"]


def number(rng):
    return str(rng.randint(1000000, 9999999))


def key(rng):
    return "-".join(rng.choice(WORDS) for _ in range(2))


class Haystack:
    """Filler or passages of the shared text, cut to a number of characters (about 4 a token)."""

    def __init__(self, kind, rng):
        self.kind, self.rng = kind, rng
        if kind == "essay":
            with open(os.path.join(SHARED, "text", "wikitext2-test.txt"), encoding="utf-8") as f:
                self.text = " ".join(line.strip() for line in f if line.strip() and not line.startswith(" ="))

    def sentences(self, chars):
        if self.kind == "filler":
            out = (FILLER * (chars // len(FILLER) + 1))[:chars]
        else:
            start = self.rng.randrange(0, len(self.text) - chars - 1)
            out = self.text[start:start + chars]
        # whole sentences, so a needle never lands inside a word
        return [s.strip() + "." for s in out.split(". ") if s.strip()][:-1]


def insert(sentences, needles, rng):
    """The needles at random depths (sentence boundaries), in order of depth."""
    at = sorted(rng.randrange(0, len(sentences) + 1) for _ in needles)
    out = list(sentences)
    for i, (pos, needle) in enumerate(zip(at, needles)):
        out.insert(pos + i, needle)
    return " ".join(out)


def niah(rng, chars, hay, value_fn, n_keys=1, n_values=1):
    keys = []
    while len(keys) < n_keys:
        k = key(rng)
        if k not in keys:
            keys.append(k)
    values = [value_fn(rng) for _ in range(n_values)]
    needles = [f"One of the special magic {'uuids' if value_fn is uuid_value else 'numbers'} for {keys[0]} is: {v}." for v in values]
    for k in keys[1:]:
        needles.append(f"One of the special magic {'uuids' if value_fn is uuid_value else 'numbers'} for {k} is: {value_fn(rng)}.")
    rng.shuffle(needles)
    what = "uuids" if value_fn is uuid_value else "numbers"
    context = insert(Haystack(hay, rng).sentences(chars), needles, rng)
    if n_values == 1:
        question = f"What is the special magic {what[:-1]} for {keys[0]} mentioned in the provided text?"
        prefix = f"The special magic {what[:-1]} for {keys[0]} mentioned in the provided text is"
    else:
        question = f"What are all the special magic {what} for {keys[0]} mentioned in the provided text?"
        prefix = f"The special magic {what} for {keys[0]} mentioned in the provided text are"
    prompt = (f"Some special magic {what} are hidden within the following text. Make sure to memorize it. "
              f"I will quiz you about the {what} afterwards.\n{context}\n{question} {prefix}")
    return prompt, values


def uuid_value(rng):
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def variable_tracking(rng, chars):
    names = ["".join(rng.choice(string.ascii_uppercase) for _ in range(5)) for _ in range(4)]
    value = str(rng.randint(10000, 99999))
    chain = [f"VAR {names[0]} = {value}."] + [f"VAR {names[i]} = VAR {names[i - 1]}." for i in range(1, 4)]
    sentences = Haystack("filler", rng).sentences(chars)
    at = sorted(rng.sample(range(len(sentences) + 1), 4))  # the chain keeps its order
    out = list(sentences)
    for i, (pos, s) in enumerate(zip(at, chain)):
        out.insert(pos + i, s)
    prompt = ("Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n" + " ".join(out) +
              f"\nQuestion: Find all variables that are assigned the value {value} in the text above. "
              f"Answer: According to the chain(s) of variable assignment in the text above, 4 variables are assigned "
              f"the value {value}, they are:")
    return prompt, names


def common_words(rng, chars):
    common = rng.sample(WORDS, 10)
    rare = [w for w in WORDS if w not in common]
    entries = chars // 12  # "123. word " : about 12 characters and 6 tokens an entry
    freq = max(2, min(30, (entries - 3 * len(rare)) // 10))  # RULER: 30 where the context allows
    n_rare = min(len(rare), max(0, entries - 10 * freq) // 3) if freq > 3 else 0
    words = common * freq + rare[:n_rare] * 3
    rng.shuffle(words)
    listing = " ".join(f"{i + 1}. {w}" for i, w in enumerate(words))
    prompt = ("Below is a numbered list of words. In these words, some appear more often than others. Memorize the ones "
              f"that appear most often.\n{listing}\nQuestion: What are the 10 most common words in the above list? "
              "Answer: The top 10 words that appear most often in the list are:")
    return prompt, common


def make(task, rng, chars):
    if task == "niah_single_number":
        return niah(rng, chars, "filler", number)
    if task == "niah_single_uuid":
        return niah(rng, chars, "essay", uuid_value)
    if task == "niah_multikey":
        return niah(rng, chars, "essay", number, n_keys=4)
    if task == "niah_multivalue":
        return niah(rng, chars, "filler", number, n_values=4)
    if task == "variable_tracking":
        return variable_tracking(rng, chars)
    return common_words(rng, chars)


def score(reply, answers):
    r = reply.lower()
    return sum(a.lower() in r for a in answers) / len(answers)


def requests(args, count_tokens=None):
    """Every task's samples. The haystacks are sized in characters (per SmolLM2 token, measured:
    filler 3.8, passages 4.2, numbered words 2.1); with count_tokens (the model's tokenizer), a
    prompt that leaves less than its reply's room in the context is made again, shorter (the same
    seed: the same needles and values)."""
    out = []
    chosen = args.tasks.split(",") if getattr(args, "tasks", None) else TASKS
    unknown = [t for t in chosen if t not in TASKS]
    if unknown:
        sys.exit(f"ruler: unknown task {unknown[0]} ({', '.join(TASKS)})")
    for t, task in enumerate(TASKS):
        if task not in chosen:
            continue  # t still numbers the task among all of them: its samples are the same with or without --tasks
        for i in range(args.samples):
            # a UUID is about 25 tokens; the lists need room for all their items
            gen = 32 if task in ("niah_single_number", "niah_multikey") else 64
            per = {"niah_single_uuid": 4.0, "niah_multikey": 4.0, "common_words": 1.9}.get(task, 3.6) * args.chars_scale
            room = args.ctx - gen - 8
            chars = int((args.ctx - gen - 160) * per)
            for _ in range(8):
                prompt, answers = make(task, random.Random(args.seed * 1000003 + t * 1009 + i), chars)
                n = count_tokens(prompt) if count_tokens else 0
                if n <= room:
                    break
                chars = int(chars * room / n * 0.97)
            else:
                sys.exit(f"{task}/{i}: no haystack fits a context of {args.ctx}")
            out.append({"id": f"{task}/{i}", "prompt": prompt, "max_new_tokens": gen, "answers": answers})
    return out


def token_counter(args):
    def count(text):
        p = subprocess.run([os.path.join(args.bin_dir, "slake-tokenize"), "-m", args.model, "-p", text],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60, check=True)
        return len(json.loads(p.stdout))
    return count


# Flags of the recall store (with their values), which apply to the evicting settings only.
RECALL_FLAGS = ("--kv-recall-pages", "--kv-recall-page", "--kv-recall-score", "--kv-recall-every", "--kv-store-type")


def label(policy, comp, extra):
    """A row's name in the records and the table: the policy, then any compensator other than its
    own and the extra flags, as given on the command line (for the full cache, less the recall
    store's, which it does not take)."""
    name = policy + (f" --kv-compensate {comp}" if comp != "auto" and policy != "full" else "")
    words = extra.split() if extra else []
    if policy == "full":
        kept, skip = [], False
        for w in words:
            if skip:
                skip = False
            elif w in RECALL_FLAGS:
                skip = True
            else:
                kept.append(w)
        words = kept
    return name + (" " + " ".join(words) if words else "")


def run(args):
    """Every (policy, budget) in one slake-cli --batch process (--kv-sweep): each prompt's forward
    pass is shared by the settings and their replies are decoded together; each setting replies as
    its own run would. A record is appended as each request's replies arrive."""
    if args.extra and any(f in args.extra.split() for f in ("--kv-policy", "--kv-budget", "--kv-compensate", "--kv-sweep")):
        sys.exit("ruler: give policies, budgets and the compensator with --policies, --budgets and --compensate, not --extra")
    reqs = requests(args, token_counter(args))
    policies = args.policies.split(",")
    runs = [("full", 0)] * ("full" in policies) + [(p, b) for p in policies if p != "full" for b in map(int, args.budgets.split(","))]
    sweep = ",".join(f"{p}/{'none' if p == 'full' else args.compensate}/{b}" for p, b in runs)
    by_id = {r["id"]: r for r in reqs}
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl") as body:
        body.write("".join(json.dumps({k: r[k] for k in ("id", "prompt", "max_new_tokens")}) + "\n" for r in reqs))
        body.flush()
        cmd = [os.path.join(args.bin_dir, "slake-cli"), "-m", args.model, "-c", str(args.ctx), "-t", str(args.threads),
               "--temp", "0", "--batch", body.name, "--batch-out", "-", "--kv-sweep", sweep]
        cmd += args.extra.split() if args.extra else []
        print(" ".join(cmd), file=sys.stderr, flush=True)
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as p:
            timer = threading.Timer(args.timeout, p.kill)
            timer.start()
            try:
                for line in p.stdout:
                    j = json.loads(line)
                    if "error" in j:
                        p.kill()
                        sys.exit(f"request {j['id']}: {j['error']}")
                    r, kv = by_id[j["id"]], j["kv"]
                    rec = {"policy": label(kv["policy"], args.compensate, args.extra), "budget": kv["budget"], "ctx": args.ctx,
                           "task": r["id"].split("/")[0], "id": r["id"], "score": score(j["text"], r["answers"]), "reply": j["text"],
                           "answers": r["answers"], "n_prompt_tokens": j["n_prompt_tokens"], "max_new_tokens": r["max_new_tokens"],
                           "model": os.path.basename(args.model)}
                    with open(args.output, "a") as f:
                        f.write(json.dumps(rec) + "\n")
                err = p.stderr.read()
            finally:
                timer.cancel()
            if p.wait() != 0:
                sys.exit(f"slake-cli failed ({p.returncode}): {err[-2000:]}")
    print(f"{len(runs)} settings x {len(reqs)} requests: done", file=sys.stderr, flush=True)


def table(paths):
    recs = []
    for p in paths:
        with open(p) as f:
            recs += [json.loads(line) for line in f if line.strip()]
    by = {}
    for r in recs:
        by.setdefault((r["policy"], r["budget"]), {}).setdefault(r["task"], []).append(r["score"])
    full = by.get(("full", 0), {})
    ranked = [t for t in TASKS if t in full and sum(full[t]) / len(full[t]) >= 0.5]
    print("| policy | C | " + " | ".join(TASKS) + " | mean (ranked) |")
    print("|---|---:|" + "---:|" * len(TASKS) + "---:|")
    for (policy, budget), tasks in sorted(by.items(), key=lambda kv: (kv[0][0] != "full", kv[0][1], kv[0][0])):
        cells = []
        for t in TASKS:
            s = tasks.get(t)
            cells.append(f"{100 * sum(s) / len(s):.0f}" + ("" if t in ranked else "*") if s else "-")
        mean = [sum(tasks[t]) / len(tasks[t]) for t in ranked if t in tasks]
        mean_cell = f"{100 * sum(mean) / len(mean):.1f}" if mean else "-"
        print(f"| {policy} | {budget or 'all'} | " + " | ".join(cells) + f" | {mean_cell} |")
    n = {len(v) for t in by.values() for v in t.values()}
    print(f"\n% of expected values found; {'/'.join(map(str, sorted(n)))} samples a task; * : the full cache scores "
          "below 50%, so the task is not in the ranked mean.")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("-m", "--model", required=True)
    r.add_argument("-c", "--ctx", type=int, default=2048)
    r.add_argument("-n", "--samples", type=int, default=8, help="samples of each task")
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--tasks", help="comma-separated tasks to run (default: all); each keeps the prompts it has in a full run")
    r.add_argument("--policies", default="full,streaming,snapkv,cake,slake")
    r.add_argument("--budgets", default="128,256")
    r.add_argument("--compensate", default="auto", help="the compensator of every evicting policy (auto, none, taylor, centroids)")
    r.add_argument("--extra", help="more slake-cli flags for every setting (e.g. \"--kv-observe 32\")")
    r.add_argument("-t", "--threads", type=int, default=2)
    r.add_argument("--chars-scale", type=float, default=1.0, help="scales the characters per token the haystacks are sized with")
    r.add_argument("--bin-dir", default=os.environ.get("SLAKE_BIN_DIR", os.path.join(ROOT, "build", "bin")))
    r.add_argument("--timeout", type=float, default=7200)
    r.add_argument("-o", "--output", required=True, help="JSON lines appended to")
    r.add_argument("--print-requests", action="store_true", help="print the requests and stop")
    t = sub.add_parser("table")
    t.add_argument("files", nargs="+")
    args = ap.parse_args()
    if args.cmd == "table":
        table(args.files)
    elif args.print_requests:
        for q in requests(args):
            print(json.dumps(q))
    else:
        run(args)


if __name__ == "__main__":
    main()
