"""The prefix cache shared by the slots (tools/server/prompt_cache.h) through the openai client:
a regenerated reply, an edited last message and eight users after the same long system text take
their prefix from a slot's cache or the prompt cache (usage's cached_tokens says how much), and
every reply equals slake-cli --temp 0's for the same prompt, with stories260K and, where
scripts/fetch-models.sh fetched it, SmolLM2 (quantised: bit for bit); under SLAKE a regenerated
reply takes the saved compressed prompt whole. Under memory pressure (a
prompt cache of 1 MiB that keeps dropping entries; slots and prompt cache under a tight
--kv-memory) every reply is still the fresh one and the caches stay within their bounds."""
import os
import random
import unittest

import openai

from harness import BACKEND, SMOLLM2, STORIES, Server, cli_greedy

N = 16
SYSTEM = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her "
          "friends and her dog, who was big and brown and liked to run after the ball. Every morning Lily and her "
          "mother walked to the market to buy bread, apples and milk, and on the way home they sang songs. ")
USERS = ["One day, Lily found a red ball under the big old tree next to the river, and she ran all the way home to "
         "show it to her mother and her little brother Tom, who were baking bread in the kitchen.", "Tom had a cat.", "The sun was hot.", "A bird sang in the tree.",
         "Mom baked a cake.", "The dog ran away.", "It started to rain.", "Ben wanted to fly a kite."]


class PrefixCache:
    """Mixed into a TestCase with MODEL and CTX (each slot's)."""

    @classmethod
    def setUpClass(cls):
        cls.model = os.path.basename(cls.MODEL)
        cls.want = {}

    def fresh(self, prompt, *flags):
        if (prompt, flags) not in self.want:
            self.want[prompt, flags] = cli_greedy(self.MODEL, prompt, N, self.CTX, *flags)
        return self.want[prompt, flags]

    def ask(self, server, prompt, usage=False):
        c = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=120)
        r = c.completions.create(model=self.model, prompt=prompt, max_tokens=N, temperature=0)
        if usage:
            return r.choices[0].text, r.usage
        return r.choices[0].text, r.usage.prompt_tokens_details.cached_tokens

    def test_an_evicting_policy_regenerates_from_the_saved_prompt(self):
        """SLAKE's compressed prompt cannot be cut, but an identical prompt takes it whole with its
        logits: nothing prefilled, the reply slake-cli gives under the same policy."""
        flags = ("--kv-policy", "slake", "--kv-budget", "64")
        server = Server(self.MODEL, "-c", str(2 * self.CTX), "-np", "2", "-t", "2", *flags)
        try:
            for u in USERS[:3]:
                text, usage = self.ask(server, SYSTEM + u, usage=True)
                self.assertEqual(text, self.fresh(SYSTEM + u, *flags), u)
            for u in USERS[:3]:  # regenerated: each from the prompt cache, whole
                text, usage = self.ask(server, SYSTEM + u, usage=True)
                self.assertEqual(text, self.fresh(SYSTEM + u, *flags), u)
                if BACKEND == "cpu":
                    self.assertEqual(usage.prompt_tokens_details.cached_tokens, usage.prompt_tokens, u)
        finally:
            server.stop()

    def test_regenerate_edit_and_eight_users(self):
        server = Server(self.MODEL, "-c", str(2 * self.CTX), "-np", "2", "-t", "2")
        try:
            first = SYSTEM + USERS[0]
            text, cached = self.ask(server, first)
            self.assertEqual((text, cached), (self.fresh(first), 0))
            text, cached = self.ask(server, first)  # regenerate
            self.assertEqual(text, self.fresh(first))
            self.assertGreater(cached, 0, "the regenerated prompt was prefilled again")
            edited = SYSTEM + USERS[0].replace("red", "blue")  # an edited last message
            text, cached = self.ask(server, edited)
            self.assertEqual(text, self.fresh(edited))
            self.assertGreater(cached, 0)
            for u in USERS[1:]:  # more users after the same system text
                text, user_cached = self.ask(server, SYSTEM + u)
                self.assertEqual(text, self.fresh(SYSTEM + u), u)
                self.assertGreater(user_cached, 0, u)
            # The first user's prompt left its slot long ago: it comes back from the prompt cache,
            # with more than the system text another user's request took (its own long message).
            text, cached = self.ask(server, first)
            self.assertEqual(text, self.fresh(first))
            self.assertGreater(cached, user_cached)
            if BACKEND == "cpu":
                self.assertGreater(server.metric("slake_prefix_hits_total"), 0)
                self.assertGreater(server.metric("slake_prompt_cache_entries"), 0)
        finally:
            server.stop()

    def test_memory_pressure_never_gives_wrong_tokens(self):
        server = Server(self.MODEL, "-c", str(3 * self.CTX), "-np", "3", "-t", "2", "--cache-ram", "1")
        try:
            rng = random.Random(4)
            prompts = [SYSTEM[:rng.randrange(40, len(SYSTEM))] + u for u in USERS] + [SYSTEM + u for u in USERS[:4]]
            for p in rng.sample(prompts * 2, 16):
                text, _ = self.ask(server, p)
                self.assertEqual(text, self.fresh(p), p)
                self.assertLessEqual(server.metric("slake_prompt_cache_bytes"), 1 << 20)
        finally:
            server.stop()


@unittest.skipUnless(os.path.exists(STORIES), f"shared material missing: {STORIES}")
class Stories(PrefixCache, unittest.TestCase):
    MODEL, CTX = STORIES, 512

    def test_prompt_cache_counts_in_kv_memory(self):
        """--kv-memory bounds the slots' caches and the prompt cache together: with room for little
        more than the three slots' caches, the prompt cache is trimmed (oldest first) so that, with
        every slot idle, the two never pass the limit; replies are still the fresh ones, and the
        cache still serves prefixes."""
        limit = 1 << 20
        server = Server(self.MODEL, "-c", str(3 * self.CTX), "-np", "3", "-t", "2", "--kv-memory", "1")
        try:
            self.assertEqual(server.metric("slake_kv_memory_limit_bytes"), limit)
            rng = random.Random(7)
            prompts = [SYSTEM[:rng.randrange(40, len(SYSTEM))] + u for u in USERS] + [SYSTEM + u for u in USERS]
            most = 0
            for p in rng.sample(prompts * 2, 20):
                text, _ = self.ask(server, p)
                self.assertEqual(text, self.fresh(p), p)
                slots = sum(float(line.split()[-1]) for line in server.get("/metrics").splitlines()
                            if line.startswith("slake_kv_bytes{"))
                cache = server.metric("slake_prompt_cache_bytes")
                self.assertLessEqual(slots + cache, limit, (slots, cache))
                most = max(most, cache)
            if BACKEND == "cpu":
                self.assertGreater(most, 0, "the prompt cache was never used")
                self.assertGreater(server.metric("slake_prefix_hits_total"), 0)
        finally:
            server.stop()


@unittest.skipUnless(os.path.exists(SMOLLM2), f"model missing: {SMOLLM2} (scripts/fetch-models.sh fetches it)")
class SmolLM2(PrefixCache, unittest.TestCase):
    MODEL, CTX = SMOLLM2, 1024


if __name__ == "__main__":
    unittest.main()
