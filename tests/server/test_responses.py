"""OpenAI's Responses API on slake-server through the official openai client: output_text equals
slake-cli's greedy text for the same conversation; the streamed events come in the order the API
specifies (response.created, output item and content part added, text deltas, their done events,
response.completed, sequence numbers in order) and add up to the same text; max_output_tokens gives
an incomplete response; a required function call comes back as a function_call item whose
arguments validate against its parameters with `jsonschema`, and a function_call_output continues
the conversation; text.format json_schema holds the reply to the schema; unsupported fields are 400s."""
import json
import os
import unittest

import jsonschema
import openai

from harness import SHARED, STORIES, Server, cli_greedy

CHATML = os.path.join(SHARED, "chat-templates", "HuggingFaceTB-SmolLM2-135M-Instruct.jinja")
QWEN = os.path.join(SHARED, "chat-templates", "Qwen-Qwen2.5-7B-Instruct.jinja")
MODEL = "stories260K.gguf"
WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"]}}


@unittest.skipUnless(os.path.exists(STORIES), f"shared material missing: {STORIES}")
class Responses(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server(STORIES, "-c", "2048", "-np", "2", "-t", "1", "--chat-template-file", QWEN)
        cls.client = openai.OpenAI(base_url=cls.server.url + "/v1", api_key="none", max_retries=0, timeout=60)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_text_equals_cli_greedy_and_stream_adds_up(self):
        want = cli_greedy(STORIES, "Tell me a story", 24, 1024, "--single-turn", "--system-prompt", "Be kind.",
                          "--chat-template-file", QWEN)
        r = self.client.responses.create(model=MODEL, instructions="Be kind.", input="Tell me a story",
                                         max_output_tokens=24, temperature=0)
        self.assertEqual(r.output_text, want)
        self.assertEqual(r.status, "incomplete")
        self.assertEqual(r.incomplete_details.reason, "max_output_tokens")
        self.assertEqual(r.usage.output_tokens, 24)
        events = list(self.client.responses.create(model=MODEL, instructions="Be kind.", input="Tell me a story",
                                                   max_output_tokens=24, temperature=0, stream=True))
        types = [e.type for e in events]
        self.assertEqual(types[:4], ["response.created", "response.in_progress", "response.output_item.added",
                                     "response.content_part.added"])
        self.assertEqual(types[-4:], ["response.output_text.done", "response.content_part.done",
                                      "response.output_item.done", "response.incomplete"])
        self.assertTrue(set(types[4:-4]) <= {"response.output_text.delta"})
        self.assertEqual([e.sequence_number for e in events], list(range(len(events))))
        self.assertEqual("".join(e.delta for e in events if e.type == "response.output_text.delta"), want)
        self.assertEqual(events[-1].response.output_text, want)

    def test_function_call_round_trip(self):
        for stream in (False, True):
            with self.subTest(stream=stream):
                kwargs = dict(model=MODEL, input="Weather in Paris?", tools=[WEATHER], tool_choice="required",
                              parallel_tool_calls=False, max_output_tokens=200, temperature=0.7)
                if stream:
                    events = list(self.client.responses.create(stream=True, **kwargs))
                    r = events[-1].response
                    args = [e.arguments for e in events if e.type == "response.function_call_arguments.done"]
                    self.assertEqual(len(args), 1)
                else:
                    r = self.client.responses.create(**kwargs)
                calls = [o for o in r.output if o.type == "function_call"]
                self.assertEqual(len(calls), 1)
                self.assertEqual(calls[0].name, "get_weather")
                jsonschema.validate(json.loads(calls[0].arguments), WEATHER["parameters"])
        # Streamed greedily: the call's item opens when its name is read, its arguments come in
        # several deltas that add up to the done event's and to the unstreamed call's.
        kwargs = dict(model=MODEL, input="Weather in Paris?", tools=[WEATHER], tool_choice="required",
                      parallel_tool_calls=False, max_output_tokens=200, temperature=0)
        whole = [o for o in self.client.responses.create(**kwargs).output if o.type == "function_call"]
        events = list(self.client.responses.create(stream=True, **kwargs))
        self.assertEqual([e.sequence_number for e in events], list(range(len(events))))
        deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
        done = [e.arguments for e in events if e.type == "response.function_call_arguments.done"]
        self.assertGreater(len(deltas), 2, "the arguments came whole, not as they were generated")
        self.assertEqual(done, ["".join(deltas)])
        added = [e for e in events if e.type == "response.output_item.added"]
        self.assertLess(events.index(added[0]), events.index(next(e for e in events if e.type.endswith("arguments.delta"))))
        streamed = [o for o in events[-1].response.output if o.type == "function_call"]
        self.assertEqual([o.name for o in streamed], [o.name for o in whole])
        self.assertEqual([json.loads(o.arguments) for o in streamed], [json.loads(o.arguments) for o in whole])
        self.assertEqual(streamed[0].id, added[0].item.id)
        c = calls[0]
        follow = self.client.responses.create(
            model=MODEL, tools=[WEATHER], max_output_tokens=8, temperature=0,
            input=[{"role": "user", "content": "Weather in Paris?"},
                   {"type": "function_call", "call_id": c.call_id, "name": c.name, "arguments": c.arguments},
                   {"type": "function_call_output", "call_id": c.call_id, "output": "18 degrees"}])
        self.assertGreater(follow.usage.input_tokens, r.usage.input_tokens)

    def test_json_schema_format(self):
        schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9},
                                                   "w": {"type": "string", "maxLength": 8}}, "required": ["n", "w"]}
        r = self.client.responses.create(model=MODEL, input="Once", max_output_tokens=200, temperature=1.0,
                                         text={"format": {"type": "json_schema", "name": "x", "schema": schema}})
        jsonschema.validate(json.loads(r.output_text), schema)

    def test_unsupported_fields_are_400(self):
        for kwargs, param in ((dict(previous_response_id="resp_1"), "previous_response_id"),
                              (dict(tools=[{"type": "web_search"}]), "tools[0]"),
                              (dict(extra_body={"reasoning_effort": "high"}), "reasoning_effort"),
                              (dict(tools=[{"type": 5, "name": "f"}]), "tools[0].type")):
            with self.subTest(param=param):
                with self.assertRaises(openai.BadRequestError) as cm:
                    self.client.responses.create(model=MODEL, input="Once", max_output_tokens=4, **kwargs)
                self.assertEqual(cm.exception.body["param"], param)


if __name__ == "__main__":
    unittest.main()
