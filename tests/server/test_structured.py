"""Structured output through slake-server, against independent references: replies under 240
generated JSON schemas (stories260K, a model that never writes JSON unprompted), 200 on a model
with random weights (the qwen2-bias fixture), and under a
Pydantic model and 200 generated schemas through the official openai client (SmolLM2) each
validate with the `jsonschema` package; `response_format: json_object` gives a JSON object; a GBNF grammar's replies match the
equivalent Python regex; `logit_bias` changes the greedy reply as it should (-100 on SmolLM2's " Paris" through the
openai client); n = 8 choices share one prefill; bad grammars, schemas
and fields are 400s that name what is wrong, and the server keeps serving. slake-cli's --json-schema
and --grammar-file follow the same checks."""
import json
import os
import random
import re
import subprocess
import tempfile
import unittest
import uuid

import jsonschema
import openai
import pydantic

from harness import BACKEND_ARGS, BIN, EMU, SMOLLM2, STORIES, Server


def post(server, path, body, timeout=120):
    import urllib.error
    import urllib.request
    req = urllib.request.Request(server.url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def random_schema(rng, depth=0):
    """A schema of the converted subset, bounded so that every reply fits in max_tokens."""
    kinds = ["string", "integer", "number", "boolean", "null", "enum", "const", "date", "uuid", "anyOf", "pattern"]
    if depth < 2:
        kinds += ["object", "array"] * 2
    k = rng.choice(kinds)
    if k == "string":
        lo = rng.randint(0, 3)
        return {"type": "string", "minLength": lo, "maxLength": lo + rng.randint(0, 8)}
    if k == "integer":
        s = {"type": "integer"}
        if rng.random() < 0.7:
            lo = rng.randint(-500, 500)
            s["minimum"] = lo
            if rng.random() < 0.7:
                s["maximum"] = lo + rng.randint(0, 2000)
        return s
    if k == "number":
        s = {"type": "number"}
        if rng.random() < 0.7:  # a range, its bounds inclusive or not, with up to 3 decimals
            lo = round(rng.uniform(-50, 50), rng.randint(0, 3))
            s[rng.choice(["minimum", "exclusiveMinimum"])] = lo
            if rng.random() < 0.7:
                s[rng.choice(["maximum", "exclusiveMaximum"])] = round(lo + rng.uniform(0.01, 20), rng.randint(2, 3))
        return s
    if k in ("boolean", "null"):
        return {"type": k}
    if k == "enum":
        return {"enum": rng.sample(["red", "green", 3, None, True, "a b"], rng.randint(1, 4))}
    if k == "const":
        return {"const": rng.choice(["yes", 42, False])}
    if k == "date":
        return {"type": "string", "format": "date"}
    if k == "pattern":  # anchored and bounded, so that every reply ends; jsonschema checks them with Python's re
        return {"type": "string", "pattern": rng.choice([
            r"^[a-z]{2,6}-\d{1,3}$", r"^(yes|no|maybe)!?$", r"^[A-Z][a-z]{0,5}( [A-Z][a-z]{0,5}){0,2}$",
            r"^\d{3}-\d{4}$", r"^[^a-z\s]{1,6}$", r"^(?:ab|c){1,4}?$", r"^\w{1,4}\.\w{1,3}$"])}
    if k == "uuid":
        return {"type": "string", "format": "uuid"}
    if k == "anyOf":
        return {"anyOf": [random_schema(rng, depth + 1), random_schema(rng, depth + 1)]}
    if k == "array":
        lo = rng.randint(0, 2)
        return {"type": "array", "items": random_schema(rng, depth + 1), "minItems": lo, "maxItems": lo + rng.randint(0, 2)}
    names = rng.sample(["id", "name", "age", "tags", "when", "ok", "score", "note"], rng.randint(1, 4))
    props = {n: random_schema(rng, depth + 1) for n in names}
    return {"type": "object", "properties": props, "required": [n for n in names if rng.random() < 0.6],
            "additionalProperties": False}


def format_ok(value, schema):
    """The formats the grammar writes, checked by Python's own parsers (jsonschema does not check
    formats unless asked)."""
    if isinstance(schema, dict):
        if schema.get("format") == "uuid":
            uuid.UUID(value)
        if schema.get("format") == "date":
            assert re.fullmatch(r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])", value), value
        if schema.get("type") == "object" and isinstance(value, dict):
            for k, v in value.items():
                format_ok(v, schema["properties"][k])
        if schema.get("type") == "array" and isinstance(value, list):
            for v in value:
                format_ok(v, schema["items"])


def check_schema_replies(test, server, cases, max_tokens):
    """Each (schema, prompt, temperature, seed) as a completion held to the schema, 4 at a time:
    every reply ends by itself and its value validates against the schema (formats too)."""
    import concurrent.futures

    def run(case):
        schema, prompt, temp, seed = case
        body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": temp, "seed": seed,
                "response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": schema}}}
        return case, post(server, "/v1/completions", body)

    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        for (schema, prompt, temp, _), (status, body) in ex.map(run, cases):
            with test.subTest(schema=schema, prompt=prompt, temp=temp):
                test.assertEqual(status, 200, body)
                choice = body["choices"][0]
                test.assertEqual(choice["finish_reason"], "stop", choice)
                value = json.loads(choice["text"])
                jsonschema.validate(value, schema)
                format_ok(value, schema)


@unittest.skipUnless(os.path.exists(STORIES), f"shared material missing: {STORIES}")
class StoriesSchemas(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server(STORIES, "-c", "4096", "-np", "4", "-t", "2")

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_240_generated_schemas_validate(self):
        rng = random.Random(1)
        words = ["Once", "The cat", "Lily said", "A big", "Tom and", "One day", "In the park", "She"]
        cases = [(random_schema(rng), rng.choice(words), rng.choice([0, 0.8, 1.5]), i) for i in range(240)]
        check_schema_replies(self, self.server, cases, 800)

    def test_unconstrained_reply_is_not_json(self):
        # The reference point: the same model without a schema writes a story, not JSON.
        status, body = post(self.server, "/v1/completions", {"prompt": "Once", "max_tokens": 40, "temperature": 0})
        self.assertEqual(status, 200)
        with self.assertRaises(ValueError):
            json.loads(body["choices"][0]["text"])

    def test_json_object(self):
        for seed in range(10):
            status, body = post(self.server, "/v1/completions", {"prompt": "The cat", "max_tokens": 800, "temperature": 1.0,
                                                                 "seed": seed, "response_format": {"type": "json_object"}})
            self.assertEqual(status, 200, body)
            if body["choices"][0]["finish_reason"] == "stop":
                self.assertIsInstance(json.loads(body["choices"][0]["text"]), dict)
            else:  # cut by max_tokens: still a prefix of an object
                self.assertTrue(body["choices"][0]["text"].startswith("{"))

    def test_gbnf_grammar_matches_its_regex(self):
        grammar = r'''root ::= answer " because " reason "."
answer ::= "yes" | "no" | "maybe"
reason ::= [a-z]{1,12} (" " [a-z]{1,12}){0,3}'''
        pattern = re.compile(r"(yes|no|maybe) because [a-z]{1,12}( [a-z]{1,12}){0,3}\.")
        for seed in range(20):
            status, body = post(self.server, "/v1/completions", {"prompt": "Lily said", "max_tokens": 200, "temperature": 1.0,
                                                                 "seed": seed, "grammar": grammar})
            self.assertEqual(status, 200, body)
            self.assertEqual(body["choices"][0]["finish_reason"], "stop")
            self.assertRegex(body["choices"][0]["text"], pattern)
            self.assertTrue(pattern.fullmatch(body["choices"][0]["text"]), body["choices"][0]["text"])

    def test_llama_cpp_example_grammars_are_followed(self):
        # llama.cpp's own list and chess grammars (tests/fixtures/grammars), sampled freely: every
        # whole line of a reply matches the grammar's line as a Python regex. They repeat without
        # end, so a reply stops at max_tokens, its last line cut short. (JSON replies are checked
        # under json_object and the schemas above; this model's free JSON strings run past any
        # max_tokens.)
        folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "grammars")
        move = r"(([a-h]x)?[a-h][1-8](=[NBKQR])?|[NBKQR][a-h]?[1-8]?x?[a-h][1-8]|O-O(-O)?)[+#]?"
        lines = {"list.gbnf": r"- [^\r\n\x0b\x0c\x85\u2028\u2029]+",
                 "chess.gbnf": r"[1-9][0-9]?\. " + move + " " + move}
        for name, line_re in lines.items():
            with open(os.path.join(folder, name)) as f:
                grammar = f.read()
            for seed in range(6):
                status, body = post(self.server, "/v1/completions", {"prompt": "Once", "max_tokens": 120, "temperature": 1.0,
                                                                     "seed": seed, "grammar": grammar})
                self.assertEqual(status, 200, body)
                text = body["choices"][0]["text"]
                with self.subTest(grammar=name, seed=seed, text=text):
                    whole = text.split("\n")[:-1]  # the last piece: a line cut short, or "" after the last newline
                    self.assertGreater(len(whole), 0)
                    if name == "chess.gbnf":
                        self.assertTrue(whole[0].startswith("1. "), whole[0])
                    for line in whole:
                        self.assertTrue(re.fullmatch(line_re, line), line)

    def test_logit_bias(self):
        def greedy(extra):
            status, body = post(self.server, "/v1/completions",
                                {"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0, "return_tokens": True, **extra})
            self.assertEqual(status, 200, body)
            return body["choices"][0]["tokens"]

        base = greedy({})
        banned = greedy({"logit_bias": {str(base[0]): -100}})
        self.assertNotEqual(banned[0], base[0])
        forced = greedy({"logit_bias": {"100": 100}})
        self.assertEqual(forced, [100] * 4)

    def test_bad_grammars_schemas_and_fields_are_400(self):
        cases = [
            ({"grammar": "root ::= x"}, "grammar", "'x' is used but not defined"),
            ({"grammar": "root ::= root \"a\" | \"b\""}, "grammar", "left-recursive"),
            ({"grammar": "root ::= \"a\" root"}, "grammar", "cannot match anything"),
            ({"grammar": "root ::= \"a\"" + " \"a\"" * 300000}, "grammar", "limit"),
            ({"grammar": 5}, "grammar", "must be a string"),
            ({"grammar": 'root ::= x{40} "z"\nx ::= "" | ""'}, "grammar", "too ambiguous"),
            ({"grammar": "root ::= a{3000}\na ::= \"\" | \"x\""}, "grammar", "nested more than"),
            ({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "string", "pattern": "(a)\\1"}}}},
             "response_format", "backreference"),
            ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format", "schema' is required"),
            ({"response_format": {"type": "xml"}}, "response_format", "text, json_object or json_schema"),
            ({"response_format": {"type": "json_object"}, "grammar": "root ::= \"a\""}, "response_format", "give one of"),
            ({"logit_bias": {"abc": 1}}, "logit_bias", "token ids"),
            ({"logit_bias": {"1": 101}}, "logit_bias", "[-100, 100]"),
            ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools", "for chat completions"),
            ({"top_n_sigma": 1.0}, "top_n_sigma", "not a field"),
            ({"dry_sequence_breakers": [""]}, "dry_sequence_breakers", "non-empty"),
            ({"mirostat": 1}, "mirostat", "v1"),
            ({"typical_p": 0}, "typical_p", "(0, 1]"),
            ({"presence_penalty": 3}, "presence_penalty", "must be in [-2.0, 2.0], got 3"),
        ]
        for extra, param, needle in cases:
            with self.subTest(extra=str(extra)[:80]):
                status, body = post(self.server, "/v1/completions", {"prompt": "Once", "max_tokens": 4, **extra})
                self.assertEqual(status, 400, body)
                self.assertEqual(body["error"]["param"], param, body)
                self.assertIn(needle, body["error"]["message"])
        # llama.cpp's other samplers and the penalties are taken and reach the sampler (their
        # arithmetic is checked in tests/test_sampler.cpp): each changes the reply of the same seed,
        # and its "off" value leaves it as it is. The penalties act on the greedy reply.
        def text(temp, extra):
            status, body = post(self.server, "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 64,
                                                                 "temperature": temp, "seed": 5, **extra})
            self.assertEqual(status, 200, (extra, body))
            return body["choices"][0]["text"]

        for temp, on, off in [(0.8, {"typical_p": 0.2}, {"typical_p": 1}),
                              (0.8, {"xtc_probability": 1, "xtc_threshold": 0.05}, {"xtc_probability": 0}),
                              (0.8, {"mirostat": 2, "mirostat_tau": 1.0}, {"mirostat": 0}),
                              (0, {"dry_multiplier": 2, "dry_allowed_length": 1, "dry_sequence_breakers": ["\n", "."]},
                               {"dry_multiplier": 0}),
                              (0, {"presence_penalty": 1.5}, {"presence_penalty": 0}),
                              (0, {"frequency_penalty": 1.5}, {"frequency_penalty": 0})]:
            with self.subTest(sampler=on):
                plain = text(temp, {})
                self.assertNotEqual(text(temp, on), plain)
                self.assertEqual(text(temp, off), plain)
        # Fields that change nothing by design are taken.
        status, body = post(self.server, "/v1/completions", {"prompt": "Once", "max_tokens": 2, "user": "u",
                                                             "metadata": {"a": "b"}, "store": False})
        self.assertEqual(status, 200, body)


@unittest.skipUnless(os.path.exists(STORIES), f"shared material missing: {STORIES}")
class CliGrammar(unittest.TestCase):
    def cli(self, *args):
        return subprocess.run([os.path.join(BIN, "slake-cli" + EMU), "-m", STORIES, "-p", "Once", "-c", "512",
                               "--no-display-prompt", *BACKEND_ARGS, *args], capture_output=True, timeout=120)

    def test_json_schema_and_grammar_flags(self):
        rng = random.Random(5)
        for i in range(20):
            schema = random_schema(rng)
            out = self.cli("-n", "800", "--temp", "1.0", "-s", str(i), "--json-schema", json.dumps(schema))
            self.assertEqual(out.returncode, 0, out.stderr)
            value = json.loads(out.stdout.decode())
            jsonschema.validate(value, schema)
        with tempfile.NamedTemporaryFile("w", suffix=".gbnf") as f:
            f.write('root ::= ("yes" | "no") "!"\n')
            f.flush()
            out = self.cli("-n", "50", "--temp", "1.0", "--grammar-file", f.name)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertIn(out.stdout.decode().strip(), ("yes!", "no!"))
        for bad, needle in ((("--grammar", "root ::= x"), b"'x' is used but not defined"),
                            (("--json-schema", '{"type": "string", "pattern": "a(?=b)"}'), b"lookaround"),
                            (("--grammar", "root ::= \"a\"", "-j", "{}"), b"give one of")):
            out = self.cli("-n", "5", *bad)
            self.assertNotEqual(out.returncode, 0)
            self.assertIn(needle, out.stderr)


class Answer(pydantic.BaseModel):
    city: str = pydantic.Field(max_length=20)
    country: str = pydantic.Field(max_length=20)
    population_millions: int
    landmarks: list[str] = pydantic.Field(max_length=3)


RANDOM_MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "models", "qwen2-bias", "model.gguf")


class RandomTinySchemas(unittest.TestCase):
    """A model with random weights (the qwen2-bias fixture: transformers' Qwen2 from a config, 272
    byte-level tokens), which writes bytes at random unconstrained: its replies under 200 generated
    schemas each validate."""

    def test_200_generated_schemas_validate(self):
        server = Server(RANDOM_MODEL, "-c", "4096", "-np", "4", "-t", "2")
        try:
            status, free = post(server, "/v1/completions", {"prompt": "Hello", "max_tokens": 40, "temperature": 1.0, "seed": 1})
            self.assertRaises(ValueError, json.loads, free["choices"][0]["text"])
            rng = random.Random(3)
            cases = [(random_schema(rng), "Hello", rng.choice([0, 0.8, 1.5]), i) for i in range(200)]
            check_schema_replies(self, server, cases, 1000)
        finally:
            server.stop()


@unittest.skipUnless(os.path.exists(SMOLLM2), f"test model missing: {SMOLLM2} (scripts/fetch-models.sh)")
class SmolLM2(unittest.TestCase):
    MODEL = os.path.basename(SMOLLM2)

    @classmethod
    def setUpClass(cls):
        cls.server = Server(SMOLLM2, "-c", "8192", "-np", "8", "-t", "2")
        cls.client = openai.OpenAI(base_url=cls.server.url + "/v1", api_key="none", max_retries=0, timeout=300)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_openai_parse_returns_the_pydantic_object(self):
        r = self.client.beta.chat.completions.parse(
            model=self.MODEL, temperature=0, max_tokens=300, response_format=Answer,
            messages=[{"role": "user", "content": "Describe Paris as JSON: city, country, population, landmarks."}])
        parsed = r.choices[0].message.parsed
        self.assertIsInstance(parsed, Answer)
        jsonschema.validate(json.loads(r.choices[0].message.content), Answer.model_json_schema())
        self.assertEqual(r.choices[0].finish_reason, "stop")

    def test_200_generated_schemas_validate(self):
        # A chat model asked for JSON, held to each schema through the openai client: every reply
        # validates, whatever the model would have written.
        rng = random.Random(2)
        asks = ["Describe a city.", "Give me a user record.", "List some colours.", "Make up a product.",
                "What is the weather like?", "Summarise a book.", "Invent a game character.", "Plan a trip."]
        cases = [(random_schema(rng), rng.choice(asks), rng.choice([0, 0.8]), i) for i in range(200)]

        def run(case):
            schema, ask, temp, seed = case
            try:
                r = self.client.chat.completions.create(
                    model=self.MODEL, messages=[{"role": "user", "content": ask + " Answer in JSON."}], max_tokens=800,
                    temperature=temp, seed=seed,
                    response_format={"type": "json_schema", "json_schema": {"name": "t", "schema": schema, "strict": True}})
                return case, r.choices[0], None
            except openai.APIError as e:
                return case, None, e

        import concurrent.futures
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            for (schema, ask, temp, _), choice, error in ex.map(run, cases):
                with self.subTest(schema=schema, ask=ask, temp=temp):
                    self.assertIsNone(error)
                    self.assertEqual(choice.finish_reason, "stop", choice)
                    value = json.loads(choice.message.content)
                    jsonschema.validate(value, schema)
                    format_ok(value, schema)

    def test_logit_bias_through_the_openai_client(self):
        kw = dict(model=self.MODEL, prompt="The capital of France is", max_tokens=3, temperature=0)
        base = self.client.completions.create(**kw).choices[0].text
        self.assertTrue(base.startswith(" Paris"), base)
        _, tok = post(self.server, "/tokenize", {"content": " Paris"})
        self.assertEqual(len(tok["tokens"]), 1, tok)
        banned = self.client.completions.create(logit_bias={str(tok["tokens"][0]): -100}, **kw).choices[0].text
        self.assertFalse(banned.startswith(" Paris"), banned)
        self.assertEqual(self.client.completions.create(logit_bias={str(tok["tokens"][0]): 0}, **kw).choices[0].text, base)

    def test_eight_choices_share_one_prefill(self):
        # n = 8 on 8 free slots: one prefill of the prompt, seven copies of its cache; choice i is
        # what seed + i gives alone.
        kw = dict(model=self.MODEL, messages=[{"role": "user", "content": "Name a fruit and say why you like it."}],
                  max_tokens=12, temperature=1.0)
        metrics = ("slake_prefill_chunks_total", "slake_prompt_tokens_cached_total")
        before = [self.server.metric(m) for m in metrics]
        r = self.client.chat.completions.create(n=8, seed=11, **kw)
        after = [self.server.metric(m) for m in metrics]
        self.assertEqual([c.index for c in r.choices], list(range(8)))
        self.assertEqual(after[0] - before[0], 1, "a follower prefilled the prompt again")
        # Each follower takes the whole prompt from the leader (which may itself have found the
        # chat template's opening in the prefix cache).
        cached = after[1] - before[1] - 7 * r.usage.prompt_tokens
        self.assertTrue(0 <= cached < r.usage.prompt_tokens, f"a follower did not take the leader's cache ({cached})")
        for i in (0, 5):
            alone = self.client.chat.completions.create(seed=11 + i, **kw).choices[0].message.content
            self.assertEqual(r.choices[i].message.content, alone)
        self.assertGreater(len({c.message.content for c in r.choices}), 1)


if __name__ == "__main__":
    unittest.main()
