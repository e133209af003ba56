"""Anthropic's Messages API on slake-server through the official `anthropic` client: replies equal
slake-cli's greedy text for the same conversation (rendered by the same template), streamed events
come in the order the API specifies and add up to the same text, stop_sequences and max_tokens give
their stop reasons, count_tokens counts the prompt, tool use round-trips (a tool_use block whose
input validates against the tool's input_schema, then a tool_result), extended thinking gives a
thinking block with the reasoning the OpenAI route splits out (streamed as thinking_delta), the key
is taken from x-api-key, and errors come in Anthropic's shape."""
import json
import os
import unittest

import anthropic
import jsonschema

from harness import R1, SHARED, STORIES, THINK_THEN_ANSWER, Server, cli_greedy

CHATML = os.path.join(SHARED, "chat-templates", "HuggingFaceTB-SmolLM2-135M-Instruct.jinja")
QWEN = os.path.join(SHARED, "chat-templates", "Qwen-Qwen2.5-7B-Instruct.jinja")
MODEL = "stories260K.gguf"
# The client has no sampling parameters of its own; the server takes them as llama-server does.
GREEDY = {"temperature": 0}
WEATHER = {"name": "get_weather", "description": "The weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                            "required": ["city"]}}


@unittest.skipUnless(os.path.exists(STORIES), f"shared material missing: {STORIES}")
class Messages(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server(STORIES, "-c", "2048", "-np", "2", "-t", "1", "--chat-template-file", CHATML, "--api-key", "sk-a")
        cls.client = anthropic.Anthropic(base_url=cls.server.url, api_key="sk-a", max_retries=0, timeout=60)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_reply_equals_cli_greedy_and_stream_adds_up(self):
        # slake-cli renders the same system + user turn through the same template.
        want = cli_greedy(STORIES, "Tell me a story", 24, 1024, "--single-turn", "--system-prompt", "Be kind.",
                          "--chat-template-file", CHATML)
        r = self.client.messages.create(model=MODEL, max_tokens=24, extra_body=GREEDY, system="Be kind.",
                                        messages=[{"role": "user", "content": "Tell me a story"}])
        self.assertEqual(r.type, "message")
        self.assertEqual(r.role, "assistant")
        self.assertEqual(r.content[0].type, "text")
        self.assertEqual(r.content[0].text, want)
        self.assertEqual(r.stop_reason, "max_tokens")
        self.assertEqual(r.usage.output_tokens, 24)
        events = []
        text = ""
        with self.client.messages.stream(model=MODEL, max_tokens=24, extra_body=GREEDY, system="Be kind.",
                                         messages=[{"role": "user", "content": "Tell me a story"}]) as s:
            for e in s:
                events.append(e.type)
                if e.type == "content_block_delta":
                    text += e.delta.text
            final = s.get_final_message()
        self.assertEqual(text, want)
        self.assertEqual(final.content[0].text, want)
        raw = [e for e in events if e in ("message_start", "content_block_start", "content_block_delta",
                                          "content_block_stop", "message_delta", "message_stop")]
        self.assertEqual(raw[0], "message_start")
        self.assertEqual(raw[1], "content_block_start")
        self.assertEqual(raw[-3:], ["content_block_stop", "message_delta", "message_stop"])
        self.assertTrue(set(raw[2:-3]) <= {"content_block_delta"})

    def test_stop_sequence_and_count_tokens(self):
        full = self.client.messages.create(model=MODEL, max_tokens=40, extra_body=GREEDY,
                                           messages=[{"role": "user", "content": "Once"}]).content[0].text
        word = full.split()[3]
        r = self.client.messages.create(model=MODEL, max_tokens=40, extra_body=GREEDY, stop_sequences=[word],
                                        messages=[{"role": "user", "content": "Once"}])
        self.assertEqual(r.stop_reason, "stop_sequence")
        self.assertEqual(r.stop_sequence, word)
        self.assertEqual(r.content[0].text, full[:full.index(word)])
        n = self.client.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": "Once"}])
        self.assertEqual(n.input_tokens, r.usage.input_tokens)

    def test_errors_are_anthropic_shaped(self):
        with self.assertRaises(anthropic.AuthenticationError):
            anthropic.Anthropic(base_url=self.server.url, api_key="wrong", max_retries=0).messages.create(
                model=MODEL, max_tokens=4, messages=[{"role": "user", "content": "Once"}])
        with self.assertRaises(anthropic.BadRequestError) as cm:
            self.client.messages.create(model=MODEL, max_tokens=4, messages=[{"role": "robot", "content": "Once"}])
        self.assertEqual(cm.exception.body["type"], "error")
        self.assertEqual(cm.exception.body["error"]["type"], "invalid_request_error")
        self.assertIn("user or assistant", cm.exception.body["error"]["message"])
        with self.assertRaises(anthropic.BadRequestError) as cm:
            self.client.messages.create(model=MODEL, max_tokens=4, messages=[{"role": "user", "content": "x"}],
                                        extra_body={"mystery": 1})
        self.assertIn("'mystery'", cm.exception.body["error"]["message"])


@unittest.skipUnless(os.path.exists(STORIES), f"shared material missing: {STORIES}")
class ToolUse(unittest.TestCase):
    def test_tool_use_round_trip(self):
        server = Server(STORIES, "-c", "2048", "-t", "1", "--chat-template-file", QWEN)
        try:
            client = anthropic.Anthropic(base_url=server.url, api_key="none", max_retries=0, timeout=60)
            question = [{"role": "user", "content": "Weather in Paris?"}]
            for stream in (False, True):
                with self.subTest(stream=stream):
                    kwargs = dict(model=MODEL, max_tokens=200, extra_body={"temperature": 0.7}, tools=[WEATHER],
                                  tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
                                  messages=question)
                    if stream:
                        with client.messages.stream(**kwargs) as s:
                            r = s.get_final_message()
                    else:
                        r = client.messages.create(**kwargs)
                    self.assertEqual(r.stop_reason, "tool_use")
                    use = [b for b in r.content if b.type == "tool_use"]
                    self.assertEqual(len(use), 1)
                    self.assertEqual(use[0].name, "get_weather")
                    jsonschema.validate(use[0].input, WEATHER["input_schema"])
            # Streamed as it is generated: the tool_use block's input in several input_json_delta
            # parts, adding up to the greedy unstreamed call's input.
            kw = dict(model=MODEL, max_tokens=200, extra_body=GREEDY, tools=[WEATHER], messages=question,
                      tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True})
            whole = client.messages.create(**kw)
            with client.messages.stream(**kw) as s:
                parts = sum(1 for e in s if e.type == "content_block_delta" and e.delta.type == "input_json_delta")
                streamed = s.get_final_message()
            self.assertGreater(parts, 2, "the input came whole, not as it was generated")
            self.assertEqual(streamed.stop_reason, "tool_use")
            self.assertEqual([b.input for b in streamed.content if b.type == "tool_use"],
                             [b.input for b in whole.content if b.type == "tool_use"])
            follow = question + [{"role": "assistant", "content": [{"type": "tool_use", "id": use[0].id, "name": use[0].name,
                                                                    "input": use[0].input}]},
                                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use[0].id,
                                                               "content": "18 degrees"}]}]
            r2 = client.messages.create(model=MODEL, max_tokens=8, extra_body=GREEDY, tools=[WEATHER], messages=follow)
            self.assertIn(r2.stop_reason, ("end_turn", "max_tokens", "tool_use"))
            self.assertGreater(r2.usage.input_tokens, r.usage.input_tokens)
        finally:
            server.stop()


@unittest.skipUnless(os.path.exists(STORIES), f"shared material missing: {STORIES}")
class Thinking(unittest.TestCase):
    def test_thinking_block_holds_the_reasoning(self):
        server = Server(STORIES, "-c", "1024", "-t", "1", "--chat-template-file", R1)
        try:
            import openai
            oa = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=60)
            client = anthropic.Anthropic(base_url=server.url, api_key="none", max_retries=0, timeout=60)
            question = [{"role": "user", "content": "Why is the sky blue?"}]
            for seed in range(3):
                chat = oa.chat.completions.create(model=MODEL, messages=question, max_tokens=200, temperature=1.0, seed=seed,
                                                  extra_body={"grammar": THINK_THEN_ANSWER}).choices[0].message
                self.assertTrue(chat.reasoning_content and chat.content)
                kw = dict(model=MODEL, max_tokens=200, messages=question, thinking={"type": "enabled", "budget_tokens": 100},
                          extra_body={"grammar": THINK_THEN_ANSWER, "temperature": 1.0, "seed": seed})
                m = client.messages.create(**kw)
                self.assertEqual([b.type for b in m.content], ["thinking", "text"])
                self.assertEqual((m.content[0].thinking, m.content[1].text), (chat.reasoning_content, chat.content))
                with client.messages.stream(**kw) as stream:
                    kinds = [e.delta.type for e in stream if e.type == "content_block_delta"]
                    final = stream.get_final_message()
                # Streamed as generated: several deltas of each block, the thinking block closed by its signature.
                runs = [k for i, k in enumerate(kinds) if i == 0 or kinds[i - 1] != k]
                self.assertEqual(runs, ["thinking_delta", "signature_delta", "text_delta"])
                self.assertGreater(kinds.count("thinking_delta"), 1)
                self.assertEqual((final.content[0].thinking, final.content[1].text), (chat.reasoning_content, chat.content))
            # The reply sent back with its thinking block, as the SDK's users do: the thinking is
            # dropped from the context, as the API drops earlier turns' thinking.
            again = client.messages.create(**{**kw, "messages": question + [{"role": "assistant", "content": m.content},
                                                                            {"role": "user", "content": "And the sea?"}]})
            self.assertEqual(again.content[0].type, "thinking")
            without = client.messages.create(**{**kw, "messages": question + [{"role": "assistant", "content": m.content[1].text},
                                                                              {"role": "user", "content": "And the sea?"}]})
            self.assertEqual(again.content, without.content)
            with self.assertRaises(anthropic.BadRequestError) as cm:
                client.messages.create(model=MODEL, max_tokens=50, messages=question, thinking={"type": "enabled", "budget_tokens": 50})
            self.assertIn("budget_tokens", cm.exception.body["error"]["message"])
        finally:
            server.stop()


if __name__ == "__main__":
    unittest.main()
