"""Every fixture chat template renders byte-identically to HF transformers' renderer.

Reference: transformers.utils.chat_template_utils.render_jinja_template (jinja2
ImmutableSandboxedEnvironment with trim_blocks / lstrip_blocks, loopcontrols, HF's tojson,
raise_exception, strftime_now, namespace, dict; reasoning field aliasing), called with the
same bos_token / eos_token and template kwargs our renderer gets.
"""
import copy
import json

import pytest

from tok_driver import FIXTURES, Driver

TEMPLATES = sorted((FIXTURES / "chat_templates").glob("*.jinja"))

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}
SEARCH_TOOL = {"type": "function", "function": {
    "name": "search", "description": "Search the web",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer"}}, "required": ["q"]}}}

CALL_ID = "call9abcd"  # Mistral templates require 9-character alphanumeric ids

CONVERSATIONS = {
    "single_user": [{"role": "user", "content": "Hello! How are you?"}],
    "system_user": [{"role": "system", "content": "You are a helpful assistant."},
                    {"role": "user", "content": "What is 2+2?"}],
    "multi_turn": [{"role": "system", "content": "Be brief."},
                   {"role": "user", "content": "Hi"},
                   {"role": "assistant", "content": "Hello! 👋 How can I help?"},
                   {"role": "user", "content": "Tell me a joke about \"quotes\" and 'apostrophes'.\nTwo lines."},
                   {"role": "assistant", "content": "  Why did the string break up?  "},
                   {"role": "user", "content": "Grüße, 世界 — ok"}],
    "tools": [{"role": "system", "content": "You can call tools."},
              {"role": "user", "content": "What's the weather in Paris?"},
              {"role": "assistant", "content": "", "tool_calls": [
                  {"id": CALL_ID, "type": "function",
                   "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]},
              {"role": "tool", "tool_call_id": CALL_ID, "name": "get_weather", "content": "{\"temp\": 18, \"sky\": \"cloudy\"}"},
              {"role": "assistant", "content": "It is 18°C and cloudy in Paris."},
              {"role": "user", "content": "And search for 'best croissant'"}],
    "tools_no_system": [{"role": "user", "content": "Search cats"},
                        {"role": "assistant", "content": None, "tool_calls": [
                            {"id": CALL_ID, "type": "function", "function": {"name": "search", "arguments": {"q": "cats", "n": 3}}}]},
                        {"role": "tool", "tool_call_id": CALL_ID, "content": "cats are great"}],
    "thinking": [{"role": "user", "content": "Solve 3*7"},
                 {"role": "assistant", "content": "21", "reasoning_content": "3 times 7 is 21."},
                 {"role": "user", "content": "Now 4*8?"}],
    "think_inline": [{"role": "user", "content": "Q1"},
                     {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nA1"},
                     {"role": "user", "content": "Q2"}],
    "multimodal": [{"role": "system", "content": [{"type": "text", "text": "You see images."}]},
                   {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe this."}]},
                   {"role": "assistant", "content": [{"type": "text", "text": "A cat on a mat."}]},
                   {"role": "user", "content": [{"type": "text", "text": "Colour?"}]}],
}

VARIANTS = [
    ("plain", False, None, {}),
    ("gen", True, None, {}),
    ("gen_tools", True, [WEATHER_TOOL, SEARCH_TOOL], {}),
    ("think_on", True, None, {"enable_thinking": True}),
    ("think_off", True, None, {"enable_thinking": False}),
]


@pytest.fixture(scope="module")
def driver():
    d = Driver()
    yield d
    d.close()


def hf_render(template, messages, tools, add_generation_prompt, kwargs):
    from transformers.utils.chat_template_utils import render_jinja_template
    try:
        out, _ = render_jinja_template(conversations=[copy.deepcopy(messages)], tools=tools, chat_template=template,
                                       add_generation_prompt=add_generation_prompt, **kwargs)
        return out[0], None
    except Exception as e:  # noqa: BLE001 - template-raised errors are part of the behaviour
        return None, f"{type(e).__name__}: {e}"


@pytest.mark.parametrize("path", TEMPLATES, ids=[p.stem for p in TEMPLATES])
def test_template_matches_hf(driver, path):
    template = path.read_text(encoding="utf-8")
    tokens = {"bos_token": "<s>", "eos_token": "</s>"}
    compared = rendered_ok = 0
    mismatches = []
    for conv_name, messages in CONVERSATIONS.items():
        for var_name, gen, tools, extra in VARIANTS:
            kwargs = dict(tokens, **extra)
            want, err = hf_render(template, messages, tools, gen, kwargs)
            got = driver.call(op="render", template=template, messages=messages, tools=tools,
                              add_generation_prompt=gen, extra=extra, **tokens)
            compared += 1
            if err is not None:
                if "error" not in got:
                    mismatches.append((conv_name, var_name, "HF raised", err, got.get("text")))
                continue
            if got.get("text") != want:
                mismatches.append((conv_name, var_name, want, got))
            else:
                rendered_ok += 1
    assert not mismatches, mismatches[:3]
    assert rendered_ok >= 5, f"only {rendered_ok} of {compared} renders succeeded in HF"


def test_raise_exception_message_and_line(driver):
    t = "line one\n{% if messages[0]['role'] != 'user' %}\n{{ raise_exception('Conversation must start with user') }}\n{% endif %}"
    r = driver.call(op="render", template=t, messages=[{"role": "system", "content": "x"}])
    assert "Conversation must start with user" in r["error"] and "line 3" in r["error"]


def test_reasoning_splitter(driver):
    text = "<think>\nLet me think.\n</think>\n\nThe answer is 42."
    chunks = [text[i:i + 3] for i in range(0, len(text), 3)]
    r = driver.call(op="reasoning", chunks=chunks)
    assert r == {"reasoning": "\nLet me think.\n", "content": "The answer is 42."}
    r = driver.call(op="reasoning", chunks=["thinking…</thi", "nk>done"], starts_in_reasoning=True)
    assert r == {"reasoning": "thinking…", "content": "done"}
