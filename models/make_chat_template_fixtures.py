#!/usr/bin/env python3
"""Expected renders of chat templates and Jinja snippets, from Python's jinja2 with the
environment transformers uses for apply_chat_template, for tests/jinja/test_jinja.cpp.

    python3 models/make_chat_template_fixtures.py ../shared/chat-templates \
        > tests/fixtures/chat_templates/expected.json

The templates are named by file name, not copied. strftime_now and date_string use a fixed date.
"""
import datetime
import json
import os
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

NOW = datetime.datetime(2024, 7, 26, 12, 0, 0)  # read as UTC by the C++ side
NOW_UNIX = int(NOW.replace(tzinfo=datetime.timezone.utc).timestamp())


def make_env():
    # transformers' _compile_jinja_template (utils/chat_template_utils.py).
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return NOW.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, source, context):
    try:
        return {"expected": env.from_string(source).render(**context)}
    except jinja2.exceptions.TemplateSyntaxError as e:
        return {"error": str(e), "error_kind": "syntax"}
    except jinja2.exceptions.SecurityError as e:
        return {"error": str(e), "error_kind": "other"}
    except jinja2.exceptions.UndefinedError as e:
        return {"error": str(e), "error_kind": "other"}
    except jinja2.exceptions.TemplateError as e:
        return {"error": str(e), "error_kind": "raise_exception"}
    except Exception as e:  # TypeError and the like, from Python itself
        return {"error": f"{type(e).__name__}: {e}", "error_kind": "other"}


TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "description": "Forecast days"},
            },
            "required": ["city"],
        },
    },
}]

TOOL_CALL = {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}

CONVERSATIONS = {
    "user": [{"role": "user", "content": "Hello!"}],
    "system_user": [{"role": "system", "content": "You are a helpful assistant."},
                    {"role": "user", "content": "Hello!"}],
    "multi_turn": [{"role": "system", "content": "Be brief."},
                   {"role": "user", "content": "Hi there"},
                   {"role": "assistant", "content": "Hello! How can I help?"},
                   {"role": "user", "content": "Tell me a joke."}],
    "no_system_two_turns": [{"role": "user", "content": "What is 2+2?"},
                            {"role": "assistant", "content": "4"},
                            {"role": "user", "content": "And 3+3?"},
                            {"role": "assistant", "content": "6"}],
    "unicode": [{"role": "user", "content": "Ça va? 日本語で答えて 🙂 \"quotes\" and 'apostrophes' \\ back"}],
    "whitespace": [{"role": "system", "content": "  padded system \n"},
                   {"role": "user", "content": "\n  spaced question  \n"},
                   {"role": "assistant", "content": "  spaced answer\n\n"},
                   {"role": "user", "content": "next"}],
    "tools": [{"role": "user", "content": "What is the weather in Paris?"}],
    "tool_call": [{"role": "user", "content": "What is the weather in Paris?"},
                  {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]},
                  {"role": "tool", "tool_call_id": "call_1", "name": "get_weather",
                   "content": "{\"temperature\": 21.5, \"sky\": \"clear\"}"},
                  {"role": "assistant", "content": "It is 21.5 °C and clear in Paris."}],
    "bad_roles": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
}


def chat_cases(template_dir):
    env = make_env()
    cases = []
    for name in sorted(os.listdir(template_dir)):
        if not name.endswith(".jinja"):
            continue
        source = open(os.path.join(template_dir, name), encoding="utf-8").read()
        for conv_name, messages in CONVERSATIONS.items():
            for agp in (True, False):
                if conv_name in ("bad_roles", "tool_call") and not agp:
                    continue
                ctx = {"messages": messages, "add_generation_prompt": agp, "bos_token": "<s>", "eos_token": "</s>",
                       "date_string": NOW.strftime("%d %b %Y")}
                if conv_name in ("tools", "tool_call"):
                    ctx["tools"] = TOOLS
                case = {"file": name, "conversation": conv_name, "context": ctx}
                case.update(render(env, source, ctx))
                cases.append(case)
    return cases


# Small templates for the language itself: (template, context).
SNIPPETS = [
    ("{{ 1.0 }} {{ 1 }} {{ 1.5e20 }} {{ 0.1 + 0.2 }} {{ 1e-7 }} {{ -0.0 }} {{ 10 / 4 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }}", {}),
    ("{{ true }} {{ false }} {{ none }} {{ True }} {{ [1, 'a', none, true, 1.0] }} {{ {'a': 1, 'b': [2, 'x']} }}", {}),
    ("{{ \"it's\" }} {{ ['it\\'s', \"q\\\"uote\", 'back\\\\slash', 'new\\nline'] }}", {}),
    ("{{ d }} {{ d.a }} {{ d['b'] }} {{ d.missing }}|{{ d.get('a') }} {{ d.get('zz', 'dflt') }} {{ d.get('zz') }}", {"d": {"a": 1, "b": "two"}}),
    ("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}", {"xs": ["a", "b", "c"]}),
    ("{% for x in xs %}{{ x }}{% else %}empty{% endfor %}", {"xs": []}),
    ("{% for x in xs if x > 1 %}{{ x }}{{ loop.length }}{% endfor %}", {"xs": [1, 2, 3]}),
    ("{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}", {"d": {"z": 1, "a": 2}}),
    ("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("{% for x in xs %}{{ loop.previtem }}-{{ loop.nextitem }}|{{ loop.cycle('odd', 'even') }} {% endfor %}", {"xs": [1, 2, 3]}),
    ("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}", {}),
    ("{% set ns = namespace(x=1, found=false) %}{% for i in [1, 2] %}{% set ns.x = ns.x + i %}{% endfor %}{{ ns.x }} {{ ns.found }}", {}),
    ("{% if a %}A{% elif b %}B{% else %}C{% endif %}{% if not a and b %}!{% endif %}", {"a": False, "b": True}),
    ("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Bob') }} {{ greet('Al', punct='?') }} {{ greet(name='Zed') }}", {}),
    ("{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ 1 + 1 }}{% endcall %}", {}),
    ("{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n }}*{{ fact(n - 1) }}{% endif %}{% endmacro %}{{ fact(5) }}", {}),
    ("{% set block %}  inner {{ 42 }}  {% endset %}[{{ block }}]", {}),
    ("{% filter upper %}shout {{ 'this' }}{% endfilter %}", {}),
    ("{# comment #}a  {#- trimmed -#}  b\n  {# c #}\nc", {}),
    ("<{%- if true -%}  x  {%- endif -%}>\n{{- '  y  ' -}}\n<", {}),
    ("line1\n    {% if true %}\n    inside\n    {% endif %}\nline2\n", {}),
    ("a {% if true %}b{% endif %} c\n  {%+ if true %}d{% endif +%}\ne", {}),
    ("{{ 'x' ~ 1 ~ none ~ [1] }} {{ 'ab' * 3 }} {{ [1] + [2, 3] }} {{ 'a' in 'cat' }} {{ 3 not in [1, 2] }} {{ 'k' in {'k': 1} }}", {}),
    ("{{ 'yes' if x else 'no' }} {{ x if x }}|{{ (1, 2) | list }}", {"x": 0}),
    ("{{ s[::-1] }} {{ s[1:] }} {{ s[:2] }} {{ s[-2:] }} {{ xs[1:3] }} {{ xs[::2] }} {{ xs[-1] }} {{ xs[5] }}|{{ s[0] }}", {"s": "héllo", "xs": [1, 2, 3, 4, 5]}),
    ("{{ ' a b '.strip() }}|{{ 'xxaxx'.lstrip('x') }}|{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }}", {}),
    ("{{ 'Hello'.startswith('He') }} {{ 'Hello'.endswith(('x', 'lo')) }} {{ 'aaa'.replace('a', 'b', 2) }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ 'Ab'.upper() }}{{ 'Ab'.lower() }}", {}),
    ("{{ '  x  ' | trim }}|{{ xs | length }} {{ 'héllo' | length }} {{ xs | count }} {{ xs | first }} {{ xs | last }} {{ xs | join(', ') }} {{ xs | join }}", {"xs": [3, 1, 2]}),
    ("{{ d | tojson }} {{ d | tojson(indent=2) }} {{ [] | tojson }} {{ {} | tojson(indent=2) }} {{ 'é\"\\n' | tojson }} {{ d | tojson(separators=(',', ':')) }} {{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}", {"d": {"a": [1, 2.5, None, True], "b": {"c": "x"}}}),
    ("{{ x | default('d') }} {{ none | default('d') }} {{ '' | default('d', true) }} {{ y | d('yy') }}", {"y": 0}),
    ("{{ users | map(attribute='name') | join(',') }} {{ ['a', 'b'] | map('upper') | list }} {{ users | selectattr('admin') | map(attribute='name') | list }} {{ users | rejectattr('admin') | list | length }}", {"users": [{"name": "ann", "admin": True}, {"name": "bob", "admin": False}]}),
    ("{{ users | selectattr('role', 'equalto', 'user') | list | length }} {{ users | selectattr('x', 'defined') | list }} {{ [1, 2, 3, 4] | select('odd') | list }} {{ [1, 2, 3, 4] | reject('even') | list }}", {"users": [{"role": "user"}, {"role": "tool", "x": 1}]}),
    ("{{ '42' | int }} {{ '4.5' | float }} {{ 'x' | int }} {{ 3.9 | int }} {{ 3 | string }} {{ [1] | string }} {{ -3 | abs }} {{ 2.5 | round }} {{ 2.567 | round(2) }} {{ 3 | round }}", {}),
    ("{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(width=2, blank=true) }}", {}),
    ("{{ 'AbC' | upper }} {{ 'AbC' | lower }} {{ 'a-b' | replace('-', '+') }} {{ 'x' | safe }} {{ 'hello' | capitalize }} {{ {'a': 1} | items | list }} {{ ['a', 'A', 'b', 'a'] | unique | list }}", {}),
    ("{{ x is defined }} {{ y is undefined }} {{ none is none }} {{ 's' is string }} {{ 1 is number }} {{ 1.0 is integer }} {{ 1 is integer }} {{ {} is mapping }} {{ [] is iterable }} {{ 's' is sequence }} {{ true is boolean }} {{ true is true }} {{ 0 is false }} {{ 3 is odd }} {{ 4 is even }} {{ 2 is in [1, 2] }} {{ 'a' is equalto 'a' }} {{ x is not none }}", {"x": 1}),
    ("{{ raise_exception('custom failure') }}", {}),
    ("{{ strftime_now('%Y-%m-%d %d %B %Y') }}", {}),
    ("{{ messages[0]['content'] }}{{ messages[0].role }} {{ messages | length }}", {"messages": [{"role": "user", "content": "hi"}]}),
    ("{{ x.y }}", {}),
    ("{{ 1 + 'a' }}", {}),
    ("{{ xs.append(1) }}", {"xs": []}),
    ("{{ x | nosuchfilter }}", {}),
    ("{% if %}", {}),
    ("line one\n{% for x in xs %}\n{{ x }\n{% endfor %}", {"xs": [1]}),
    ("{% for i in [1, 2] %}{% if i == 1 %}{% set x = 5 %}{% endif %}[{{ x }}]{% endfor %}", {}),
    ("{{ [3, 1, 2] | sort }} {{ [3, 1, 2] | sort(reverse=true) }} {{ [1, 2] | sum }} {{ [1, 5, 2] | max }} {{ 'abc' | reverse }}", {}),
    ("{{ {'a': 1}.keys() | list }} {{ {'a': 1}.values() | list }} {{ {'a': {'b': 2}}.a.b }} {{ 'abc'[1] }} {{ [[1, 2]][0][1] }}", {}),
    ("{%- set sys = messages[0]['content'] if messages[0]['role'] == 'system' else '' -%}\n[{{ sys }}]", {"messages": [{"role": "system", "content": "S"}]}),
    ("{{ 5 > 3 and 2 <= 2 }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1, 2] == [1, 2] }} {{ 1 != 2 }} {{ 0 or 'x' }} {{ 1 and 'y' }} {{ -(3) }} {{ not none }}", {}),
]


def snippet_cases():
    env = make_env()
    cases = []
    for source, ctx in SNIPPETS:
        case = {"template": source, "context": ctx}
        case.update(render(env, source, ctx))
        cases.append(case)
    return cases


def main():
    template_dir = sys.argv[1]
    out = {"now": NOW_UNIX, "jinja2": jinja2.__version__, "snippets": snippet_cases(), "chat": chat_cases(template_dir)}
    json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
