"""Tool calls through slake-server and the official openai client, on stories260K with real chat
templates of three tool-call families (Qwen2.5's and Hermes 3's <tool_call>, Llama 3.1's JSON,
Mistral Nemo's [TOOL_CALLS]): with tool_choice "required" or a named function, every call names an
offered function and its arguments validate against that function's parameters with the
`jsonschema` package (a model this small writes no call unprompted); streamed calls arrive as
OpenAI streams them, as they are generated, and add up to the call the same request gives
unstreamed; a two-step loop with tool_choice "required", streamed and not (the call, a `tool`
message with the answer, rendered through the template, and a text reply); tool_choice "none" and
"auto" and parallel calls; bad tool requests are 400s."""
import json
import os
import unittest

import jsonschema
import openai

from harness import SHARED, STORIES, Server

TEMPLATES = {
    "hermes (Qwen2.5)": "Qwen-Qwen2.5-7B-Instruct.jinja",
    "hermes (Hermes 3)": "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
    "llama3": "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "mistral": "mistralai-Mistral-Nemo-Instruct-2407.jinja",
}
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                                        "unit": {"enum": ["celsius", "fahrenheit"]}},
                       "required": ["city", "unit"]}}},
    {"type": "function", "function": {
        "name": "add", "description": "Adds two integers",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer", "minimum": -100, "maximum": 100},
                                                        "b": {"type": "integer"}},
                       "required": ["a", "b"], "additionalProperties": False}}},
]
PARAMS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
MODEL = "stories260K.gguf"
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]


def template(name):
    return os.path.join(SHARED, "chat-templates", TEMPLATES[name])


@unittest.skipUnless(os.path.exists(STORIES), f"shared material missing: {STORIES}")
class ToolCalls(unittest.TestCase):
    def check_call(self, call, only=None):
        self.assertEqual(call.type, "function")
        self.assertEqual(len(call.id), 9)
        self.assertIn(call.function.name, PARAMS)
        if only:
            self.assertEqual(call.function.name, only)
        jsonschema.validate(json.loads(call.function.arguments), PARAMS[call.function.name])

    @staticmethod
    def create(client, stream, **kw):
        """(message dict, finish_reason) of a chat completion, assembled from its chunks when streamed."""
        if not stream:
            c = client.chat.completions.create(**kw).choices[0]
            calls = [{"id": t.id, "name": t.function.name, "arguments": t.function.arguments} for t in c.message.tool_calls or []]
            return {"content": c.message.content, "tool_calls": calls}, c.finish_reason
        content, calls, finish = "", {}, None
        for chunk in client.chat.completions.create(stream=True, **kw):
            ch = chunk.choices[0]
            finish = ch.finish_reason or finish
            content += ch.delta.content or ""
            for d in ch.delta.tool_calls or []:
                acc = calls.setdefault(d.index, {"id": d.id, "name": d.function.name, "arguments": ""})
                acc["arguments"] += d.function.arguments or ""
        return {"content": content or None, "tool_calls": [calls[i] for i in sorted(calls)]}, finish

    def tool_loop(self, server, client, stream):
        """The two steps of a tool loop: tool_choice "required" gives a call, a `tool` message answers
        it, and the model replies in text (tool_choice "none") to a prompt its template rendered from
        the call and the answer."""
        first, finish = self.create(client, stream, model=MODEL, messages=QUESTION, tools=TOOLS, tool_choice="required",
                                    parallel_tool_calls=False, max_tokens=300, temperature=0.8, seed=1)
        self.assertEqual(finish, "tool_calls")
        self.assertEqual(len(first["tool_calls"]), 1)
        call = first["tool_calls"][0]
        self.assertIn(call["name"], PARAMS)
        jsonschema.validate(json.loads(call["arguments"]), PARAMS[call["name"]])
        messages = QUESTION + [
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": call["id"], "type": "function",
                             "function": {"name": call["name"], "arguments": call["arguments"]}}]},
            {"role": "tool", "tool_call_id": call["id"], "name": call["name"], "content": "18 degrees and sunny"}]
        status, rendered = server.call("/apply-template", {"messages": messages, "tools": TOOLS})
        self.assertEqual(status, 200, rendered)
        self.assertIn("18 degrees and sunny", rendered["prompt"])
        # What the call and its answer add to the question's prompt (the tools' definitions, which
        # name every function, are common to both) names the called function before the answer.
        status, base = server.call("/apply-template", {"messages": QUESTION, "tools": TOOLS})
        self.assertEqual(status, 200, base)
        added = rendered["prompt"][len(os.path.commonprefix([base["prompt"], rendered["prompt"]])):]
        self.assertIn(call["name"], added.split("18 degrees")[0], "the call is rendered before its answer")
        second, finish = self.create(client, stream, model=MODEL, messages=messages, tools=TOOLS, tool_choice="none",
                                     max_tokens=20, temperature=0)
        self.assertIn(finish, ("stop", "length"))
        self.assertEqual(second["tool_calls"], [])
        self.assertTrue(second["content"])
        # The same request unstreamed gives the same text: the rendered prompt, not the transport, decides.
        if stream:
            again, _ = self.create(client, False, model=MODEL, messages=messages, tools=TOOLS, tool_choice="none",
                                   max_tokens=20, temperature=0)
            self.assertEqual(again["content"], second["content"])

    def test_required_and_named_calls_are_well_formed(self):
        for family in TEMPLATES:
            server = Server(STORIES, "-c", "4096", "-np", "2", "-t", "1", "--chat-template-file", template(family))
            try:
                client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=120)
                for seed in range(6):
                    choice = "required" if seed % 2 else {"type": "function", "function": {"name": "add"}}
                    with self.subTest(family=family, seed=seed):
                        r = client.chat.completions.create(model=MODEL, messages=QUESTION, tools=TOOLS, tool_choice=choice,
                                                           parallel_tool_calls=False, max_tokens=300, temperature=1.0,
                                                           seed=seed)
                        c = r.choices[0]
                        self.assertEqual(c.finish_reason, "tool_calls", c)
                        self.assertEqual(len(c.message.tool_calls), 1)
                        self.check_call(c.message.tool_calls[0], None if seed % 2 else "add")
                with self.subTest(family=family, stream=True):
                    # Streamed as it is generated: the id and name first, the arguments in parts,
                    # adding up to the call the same request gives unstreamed.
                    kw = dict(model=MODEL, messages=QUESTION, tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
                              max_tokens=300, temperature=1.0, seed=7)
                    calls, finish, parts = {}, None, 0
                    for chunk in client.chat.completions.create(stream=True, **kw):
                        ch = chunk.choices[0]
                        finish = ch.finish_reason or finish
                        for d in ch.delta.tool_calls or []:
                            acc = calls.setdefault(d.index, {"id": d.id, "name": d.function.name, "arguments": ""})
                            self.assertTrue(acc["id"] and acc["name"], "a call's first delta names it")
                            acc["arguments"] += d.function.arguments or ""
                            parts += bool(d.function.arguments)
                    self.assertEqual(finish, "tool_calls")
                    self.assertEqual(len(calls), 1)
                    self.assertGreater(parts, 2, "the arguments came whole, not as they were generated")
                    whole = client.chat.completions.create(**kw).choices[0].message.tool_calls[0]
                    self.assertEqual(calls[0]["name"], whole.function.name)
                    self.assertEqual(json.loads(calls[0]["arguments"]), json.loads(whole.function.arguments))
                    jsonschema.validate(json.loads(calls[0]["arguments"]), PARAMS[calls[0]["name"]])
                for stream in (False, True):
                    with self.subTest(family=family, loop=True, stream=stream):
                        self.tool_loop(server, client, stream)
                with self.subTest(family=family, tool_choice="auto/none/parallel"):
                    # "none": the tools are rendered but never called; "auto": the model may call
                    # (any call still well-formed); parallel_tool_calls: one or more calls, each valid.
                    r = client.chat.completions.create(model=MODEL, messages=QUESTION, tools=TOOLS, tool_choice="none",
                                                       max_tokens=12, temperature=0)
                    self.assertIsNone(r.choices[0].message.tool_calls)
                    self.assertIn(r.choices[0].finish_reason, ("stop", "length"))
                    self.assertTrue(r.choices[0].message.content)
                    most = 0
                    for seed in range(3):
                        r = client.chat.completions.create(model=MODEL, messages=QUESTION, tools=TOOLS, tool_choice="auto",
                                                           max_tokens=60, temperature=1.0, seed=seed)
                        for call in r.choices[0].message.tool_calls or []:
                            self.check_call(call)
                        # This model, once free to go on calling, rarely stops: the reply may end at
                        # max_tokens inside a call, and the calls it finished are returned.
                        r = client.chat.completions.create(model=MODEL, messages=QUESTION, tools=TOOLS, tool_choice="required",
                                                           parallel_tool_calls=True, max_tokens=200, temperature=1.0, seed=seed)
                        calls = r.choices[0].message.tool_calls or []
                        self.assertIn(r.choices[0].finish_reason, ("tool_calls", "length"))
                        self.assertGreaterEqual(len(calls), 1)
                        self.assertEqual(len({c.id for c in calls}), len(calls), "call ids are distinct")
                        for call in calls:
                            self.check_call(call)
                        most = max(most, len(calls))
                    if family == "llama3":  # Llama 3.1's template renders one call a message
                        self.assertEqual(most, 1)
                    else:
                        self.assertGreater(most, 1, "parallel_tool_calls let no reply make a second call")
            finally:
                server.stop()

    def test_parameters_with_definitions(self):
        # Pydantic's nested models come as $defs inside a function's parameters.
        params = {"type": "object", "properties": {"place": {"$ref": "#/$defs/Place"}}, "required": ["place"],
                  "$defs": {"Place": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
                                      "required": ["city"]}}}
        tool = {"type": "function", "function": {"name": "visit", "parameters": params}}
        server = Server(STORIES, "-c", "2048", "-t", "1", "--chat-template-file", template("hermes (Qwen2.5)"))
        try:
            client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=60)
            for seed in range(3):
                r = client.chat.completions.create(model=MODEL, messages=QUESTION, tools=[tool], tool_choice="required",
                                                   parallel_tool_calls=False, max_tokens=300, temperature=1.0, seed=seed)
                call = r.choices[0].message.tool_calls[0]
                jsonschema.validate(json.loads(call.function.arguments), params)
        finally:
            server.stop()

    def test_bad_tool_requests_are_400(self):
        server = Server(STORIES, "-c", "1024", "-t", "1", "--chat-template-file", template("hermes (Qwen2.5)"))
        plain = Server(STORIES, "-c", "1024", "-t", "1", "--chat-template", "chatml")
        try:
            client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=60)
            cases = [
                (dict(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}}), "tool_choice", "not among"),
                (dict(tool_choice="required"), "tool_choice", "needs 'tools'"),
                (dict(tools=[{"type": "function", "function": {"name": "a b"}}]), "tools[0].function.name", "letters"),
                (dict(tools=TOOLS + TOOLS[:1]), "tools[2].function.name", "two tools"),
                (dict(tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "string", "pattern": "\\bx"}}}],
                      tool_choice="required"), "tools", "word boundary"),
                (dict(tools=TOOLS, tool_choice="required", response_format={"type": "json_object"}), "tool_choice", "combined"),
            ]
            for kwargs, param, needle in cases:
                with self.subTest(param=param, needle=needle):
                    with self.assertRaises(openai.BadRequestError) as cm:
                        client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=4, **kwargs)
                    self.assertEqual(cm.exception.body["param"], param, cm.exception.body)
                    self.assertIn(needle, cm.exception.body["message"])
            with self.assertRaises(openai.BadRequestError) as cm:
                openai.OpenAI(base_url=plain.url + "/v1", api_key="none", max_retries=0).chat.completions.create(
                    model=MODEL, messages=QUESTION, tools=TOOLS, max_tokens=4)
            self.assertIn("does not take tools", cm.exception.body["message"])
            # The server still serves.
            r = client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=4)
            self.assertEqual(r.choices[0].finish_reason, "length")
        finally:
            server.stop()
            plain.stop()


if __name__ == "__main__":
    unittest.main()
