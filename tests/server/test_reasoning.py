"""Thinking models' reasoning on slake-server, as llama-server's --reasoning-format deepseek splits
it: with a DeepSeek-R1 distill's template (its generation prompt opens <think>), the reply's text up
to </think> is reasoning_content and the rest content, streamed and not, equal to the raw reply
(reasoning_format none) split by Python at </think>; a template without <think> leaves the reply
alone unless deepseek is asked for; chat_template_kwargs and --reasoning-budget 0 reach the
template. A grammar makes stories260K write a closing tag, which it never would unprompted."""
import json
import os
import tempfile
import unittest
import urllib.request

import openai

from harness import R1, SHARED, STORIES, THINK_THEN_ANSWER, Server

CHATML = os.path.join(SHARED, "chat-templates", "HuggingFaceTB-SmolLM2-135M-Instruct.jinja")
TAGGED = 'root ::= "<think>" [a-z ]{3,30} "</think>" [a-z ]{3,30}'
QUESTION = [{"role": "user", "content": "Why is the sky blue?"}]


def post(server, path, body):
    req = urllib.request.Request(server.url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


@unittest.skipUnless(os.path.exists(STORIES), f"shared material missing: {STORIES}")
class Reasoning(unittest.TestCase):
    def test_r1_template_splits_at_think(self):
        server = Server(STORIES, "-c", "1024", "-t", "1", "--chat-template-file", R1)
        try:
            client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=60)
            for seed in range(5):
                args = dict(model="stories260K.gguf", messages=QUESTION, max_tokens=200, temperature=1.0, seed=seed)
                raw = client.chat.completions.create(**args, extra_body={"grammar": THINK_THEN_ANSWER, "reasoning_format": "none"})
                text = raw.choices[0].message.content
                think, answer = text.split("</think>")
                r = client.chat.completions.create(**args, extra_body={"grammar": THINK_THEN_ANSWER})
                msg = r.choices[0].message
                self.assertEqual(msg.reasoning_content, think)
                self.assertEqual(msg.content, answer.lstrip("\n"))
                reasoning, content = "", ""
                for chunk in client.chat.completions.create(**args, stream=True, extra_body={"grammar": THINK_THEN_ANSWER}):
                    d = chunk.choices[0].delta if chunk.choices else None
                    if d is not None:
                        reasoning += getattr(d, "reasoning_content", None) or ""
                        content += d.content or ""
                self.assertEqual((reasoning, content), (think, answer.lstrip("\n")))
        finally:
            server.stop()

    def test_responses_api_gives_a_reasoning_item(self):
        server = Server(STORIES, "-c", "1024", "-t", "1", "--chat-template-file", R1)
        try:
            client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=60)
            chat = client.chat.completions.create(model="m", messages=QUESTION, max_tokens=200, temperature=1.0, seed=4,
                                                  extra_body={"grammar": THINK_THEN_ANSWER})
            want = chat.choices[0].message
            for stream in (False, True):
                kwargs = dict(model="m", input=QUESTION[0]["content"], max_output_tokens=200, temperature=1.0,
                              extra_body={"grammar": THINK_THEN_ANSWER, "seed": 4})
                if stream:
                    events = list(client.responses.create(stream=True, **kwargs))
                    r = events[-1].response
                    types = [e.type for e in events]
                    # Streamed as generated: the reasoning item's deltas, closed, then the message's.
                    runs = [t for i, t in enumerate(types) if i == 0 or types[i - 1] != t]
                    self.assertEqual(runs[:8], ["response.created", "response.in_progress", "response.output_item.added",
                                                "response.reasoning_text.delta", "response.reasoning_text.done",
                                                "response.output_item.done", "response.output_item.added",
                                                "response.content_part.added"])
                    self.assertGreater(types.count("response.reasoning_text.delta"), 1)
                    self.assertEqual([e.sequence_number for e in events], list(range(len(events))))
                    deltas = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
                    self.assertEqual(deltas, want.reasoning_content)
                else:
                    r = client.responses.create(**kwargs)
                self.assertEqual(r.output[0].type, "reasoning")
                self.assertEqual(r.output[0].content[0].text, want.reasoning_content)
                self.assertEqual(r.output_text, want.content)
        finally:
            server.stop()

    def test_template_without_think_is_left_alone_unless_asked(self):
        server = Server(STORIES, "-c", "1024", "-t", "1", "--chat-template-file", CHATML)
        try:
            body = {"messages": QUESTION, "max_tokens": 200, "temperature": 1.0, "seed": 3, "grammar": TAGGED}
            plain = post(server, "/v1/chat/completions", body)["choices"][0]["message"]
            self.assertNotIn("reasoning_content", plain)
            self.assertTrue(plain["content"].startswith("<think>"))
            split = post(server, "/v1/chat/completions", {**body, "reasoning_format": "deepseek"})["choices"][0]["message"]
            think, answer = plain["content"][len("<think>"):].split("</think>")
            self.assertEqual((split["reasoning_content"], split["content"]), (think, answer))
        finally:
            server.stop()

    def test_template_kwargs_reach_the_template(self):
        with tempfile.NamedTemporaryFile("w", suffix=".jinja", delete=False) as f:
            f.write("{% if enable_thinking is defined and not enable_thinking %}NOTHINK {% endif %}"
                    "{% for m in messages %}{{ m.content }}{% endfor %}")
        try:
            server = Server(STORIES, "-c", "512", "-t", "1", "--chat-template-file", f.name)
            budget0 = Server(STORIES, "-c", "512", "-t", "1", "--chat-template-file", f.name, "--reasoning-budget", "0")
            try:
                self.assertEqual(post(server, "/apply-template", {"messages": QUESTION})["prompt"], "Why is the sky blue?")
                self.assertEqual(post(server, "/apply-template", {"messages": QUESTION,
                                                                  "chat_template_kwargs": {"enable_thinking": False}})["prompt"],
                                 "NOTHINK Why is the sky blue?")
                self.assertEqual(post(budget0, "/apply-template", {"messages": QUESTION})["prompt"], "NOTHINK Why is the sky blue?")
                # The request's own kwargs go over the server's.
                self.assertEqual(post(budget0, "/apply-template", {"messages": QUESTION,
                                                                   "chat_template_kwargs": {"enable_thinking": True}})["prompt"],
                                 "Why is the sky blue?")
            finally:
                server.stop()
                budget0.stop()
        finally:
            os.unlink(f.name)


if __name__ == "__main__":
    unittest.main()
