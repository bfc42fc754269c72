"""mlxcel-server driven over HTTP by the official `openai` client (chat and completions, streaming
and not) and by raw HTTP for the other routes. Expected tokens come from mlx-lm's forward pass on
the same checkpoint and prompts from transformers' chat template and tokenizer, never from our own
output."""
import json
import math

import openai
import pytest

from _server_util import MODEL_ID, get, metric, post, sse_events

MSGS = [{"role": "user", "content": "Write a haiku about the sea."}]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def test_health_and_models(server, client):
    st, body = get(server, "/health")
    assert st == 200 and body["status"] == "ok" and body["slots_total"] == 8
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL_ID]


def test_chat_greedy_matches_mlx_lm(client, reference):
    n = 12
    r = client.chat.completions.create(model=MODEL_ID, messages=MSGS, max_tokens=n, temperature=0)
    ids = reference.chat_ids(MSGS)
    want, _ = reference.greedy(ids, n)
    c = r.choices[0]
    assert c.message.role == "assistant"
    assert c.message.content == reference.decode(want)
    assert c.finish_reason == "length"
    assert r.usage.prompt_tokens == len(ids)
    assert r.usage.completion_tokens == n
    assert r.usage.total_tokens == len(ids) + n
    assert r.model == MODEL_ID and r.object == "chat.completion" and r.id.startswith("chatcmpl-")


def test_chat_content_parts_and_max_completion_tokens(client, reference):
    parts = [{"role": "user", "content": [{"type": "text", "text": "Write a haiku "},
                                          {"type": "text", "text": "about the sea."}]}]
    r = client.chat.completions.create(model=MODEL_ID, messages=parts, max_completion_tokens=5, temperature=0)
    want, _ = reference.greedy(reference.chat_ids(MSGS), 5)
    assert r.choices[0].message.content == reference.decode(want)
    assert r.usage.completion_tokens == 5


def test_chat_stream_equals_non_stream(client):
    kw = dict(model=MODEL_ID, messages=MSGS, max_tokens=10, temperature=0)
    full = client.chat.completions.create(**kw)
    chunks = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["length"]
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert last.usage.completion_tokens == 10
    assert last.usage.prompt_tokens == full.usage.prompt_tokens
    assert all(c.usage is None for c in chunks[:-1])


def test_stream_without_usage_and_done_marker(server):
    evs = sse_events(server, "/v1/chat/completions",
                     {"messages": MSGS, "max_tokens": 4, "temperature": 0, "stream": True})
    assert evs[-1] == "[DONE]"
    assert all("usage" not in e for e in evs[:-1])
    assert evs[-2]["choices"][0]["finish_reason"] == "length"


def test_stop_string(client, reference):
    ids = reference.chat_ids(MSGS)
    want, _ = reference.greedy(ids, 16)
    text = reference.decode(want)
    # A stop string taken from the middle of the greedy text, first occurring there.
    k = next(k for k in range(3, len(text) - 3) if text.find(text[k:k + 2]) == k and text[k:k + 2].strip())
    stop = text[k:k + 2]
    for stream in (False, True):
        kw = dict(model=MODEL_ID, messages=MSGS, max_tokens=16, temperature=0, stop=[stop, "\x00never"])
        if stream:
            chunks = list(client.chat.completions.create(stream=True, **kw))
            got = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            fin = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        else:
            r = client.chat.completions.create(**kw)
            got, fin = r.choices[0].message.content, [r.choices[0].finish_reason]
        assert got == text[:k], (stream, stop)
        assert fin == ["stop"]


def test_eos_gives_stop_and_zero_tokens(client):
    # logit_bias forces <|im_end|> (an EOS id) as the first token.
    r = client.chat.completions.create(model=MODEL_ID, messages=MSGS, max_tokens=8, temperature=0,
                                       logit_bias={"151645": 100})
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].message.content == ""
    assert r.usage.completion_tokens == 0


def test_completion_both_ways(client, reference):
    prompt = "The capital of France is"
    ids = reference.encode(prompt)
    want, _ = reference.greedy(ids, 9)
    r = client.completions.create(model=MODEL_ID, prompt=prompt, max_tokens=9, temperature=0)
    assert r.choices[0].text == reference.decode(want)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens == len(ids) and r.usage.completion_tokens == 9
    chunks = list(client.completions.create(model=MODEL_ID, prompt=prompt, max_tokens=9, temperature=0,
                                            stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == r.choices[0].text
    assert chunks[-1].usage.completion_tokens == 9
    # Token-id prompts give the same continuation.
    r2 = client.completions.create(model=MODEL_ID, prompt=ids, max_tokens=9, temperature=0)
    assert r2.choices[0].text == r.choices[0].text


def test_chat_logprobs_match_mlx_lm(client, reference):
    n = 6
    r = client.chat.completions.create(model=MODEL_ID, messages=MSGS, max_tokens=n, temperature=0,
                                       logprobs=True, top_logprobs=3)
    want, rows = reference.greedy(reference.chat_ids(MSGS), n)
    content = r.choices[0].logprobs.content
    assert len(content) == n
    for i, t in enumerate(content):
        assert t.token == reference.decode([want[i]]) or t.bytes == list(reference.decode([want[i]]).encode())
        assert math.isclose(t.logprob, float(rows[i][want[i]].item()), abs_tol=2e-3)
        assert len(t.top_logprobs) == 3
        lps = [x.logprob for x in t.top_logprobs]
        assert lps == sorted(lps, reverse=True)
        assert math.isclose(lps[0], t.logprob, abs_tol=1e-6)


def test_completion_logprobs(client, reference):
    r = client.completions.create(model=MODEL_ID, prompt="Once upon a time", max_tokens=4, temperature=0, logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == 4 and len(lp.token_logprobs) == 4 and len(lp.top_logprobs) == 4
    want, rows = reference.greedy(reference.encode("Once upon a time"), 4)
    for i in range(4):
        assert math.isclose(lp.token_logprobs[i], float(rows[i][want[i]].item()), abs_tol=2e-3)
        assert len(lp.top_logprobs[i]) <= 2


def test_seed_reproducible(client):
    kw = dict(model=MODEL_ID, messages=MSGS, max_tokens=12, temperature=1.0, top_p=0.95)
    a = client.chat.completions.create(seed=42, **kw).choices[0].message.content
    b = client.chat.completions.create(seed=42, **kw).choices[0].message.content
    c = client.chat.completions.create(seed=43, **kw).choices[0].message.content
    assert a == b
    assert a != c


def test_sampling_fields_accepted(client):
    r = client.chat.completions.create(model=MODEL_ID, messages=MSGS, max_tokens=3, temperature=0.7,
                                       top_p=0.9, presence_penalty=0.5, frequency_penalty=0.5, seed=1,
                                       extra_body={"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1})
    assert r.usage.completion_tokens == 3


def test_reasoning_content_split(client, server, reference):
    # The fixture's template opens <think> when enable_thinking is true: all generated text until
    # </think> is reasoning, so it equals the raw continuation of the same prompt.
    kw = dict(model=MODEL_ID, messages=MSGS, max_tokens=8, temperature=0)
    ids = reference.chat_ids(MSGS, enable_thinking=True)
    assert reference.decode(ids).endswith("<think>\n")
    want, _ = reference.greedy(ids, 8)
    r = client.chat.completions.create(extra_body={"chat_template_kwargs": {"enable_thinking": True}}, **kw)
    msg = r.choices[0].message
    assert msg.model_extra["reasoning_content"] == reference.decode(want)
    assert msg.content == ""
    assert r.usage.prompt_tokens == len(ids)
    chunks = list(client.chat.completions.create(
        stream=True, extra_body={"chat_template_kwargs": {"enable_thinking": True}}, **kw))
    reasoning = "".join((c.choices[0].delta.model_extra or {}).get("reasoning_content") or ""
                        for c in chunks if c.choices)
    assert reasoning == reference.decode(want)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ""
    # enable_thinking false: the template closes the block, everything is the answer.
    ids_off = reference.chat_ids(MSGS, enable_thinking=False)
    want_off, _ = reference.greedy(ids_off, 8)
    r = client.chat.completions.create(extra_body={"chat_template_kwargs": {"enable_thinking": False}}, **kw)
    assert r.choices[0].message.content == reference.decode(want_off)
    assert not r.choices[0].message.model_extra.get("reasoning_content")


def test_tokenize_detokenize_round_trip(server, reference):
    for text in ["Hello, world!", "  spaces and\ttabs\n", "naïve café 東京 🚀", "<|im_start|>user\nhi<|im_end|>"]:
        st, body = post(server, "/tokenize", {"content": text})
        assert st == 200
        assert body["tokens"] == reference.encode(text), text
        st, back = post(server, "/detokenize", {"tokens": body["tokens"]})
        assert st == 200 and back["content"] == text


def test_metrics_counters(server, client):
    st, before = get(server, "/metrics")
    assert st == 200
    r = client.chat.completions.create(model=MODEL_ID, messages=MSGS, max_tokens=5, temperature=0)
    st, after = get(server, "/metrics")
    assert metric(after, "mlxcel_requests_total") == metric(before, "mlxcel_requests_total") + 1
    assert metric(after, "mlxcel_generated_tokens_total") == metric(before, "mlxcel_generated_tokens_total") + 5
    assert metric(after, "mlxcel_time_to_first_token_seconds_count") == metric(before, "mlxcel_time_to_first_token_seconds_count") + 1
    assert metric(after, "mlxcel_inter_token_latency_seconds_count") >= metric(before, "mlxcel_inter_token_latency_seconds_count") + 4
    assert metric(after, "mlxcel_kv_blocks_total") > 0
    assert metric(after, "mlxcel_queue_depth") == 0
    for name in ["mlxcel_prompt_tokens_total", "mlxcel_active_slots", "mlxcel_kv_blocks_used",
                 "mlxcel_requests_rejected_total", "mlxcel_requests_cancelled_total"]:
        metric(after, name)
    assert r.usage.completion_tokens == 5


def test_prefix_reuse_reports_cached_tokens(client):
    long_sys = {"role": "system", "content": "You are a helpful assistant. " * 20}
    msgs = [long_sys, {"role": "user", "content": "First question?"}]
    a = client.chat.completions.create(model=MODEL_ID, messages=msgs, max_tokens=3, temperature=0)
    msgs2 = [long_sys, {"role": "user", "content": "Second question?"}]
    b = client.chat.completions.create(model=MODEL_ID, messages=msgs2, max_tokens=3, temperature=0)
    assert b.usage.prompt_tokens_details.cached_tokens >= 64
    assert b.usage.prompt_tokens_details.cached_tokens < b.usage.prompt_tokens
    assert a.usage.prompt_tokens > 100


@pytest.mark.parametrize("max_tokens,temperature,seed", [(2, 0, None), (9, 0, None), (40, 0, None),
                                                         (25, 1.0, 5), (60, 1.2, 11)])
def test_json_object_mode_parses(client, max_tokens, temperature, seed):
    kw = dict(model=MODEL_ID, messages=[{"role": "user", "content": "Reply with a JSON object."}],
              max_tokens=max_tokens, temperature=temperature, seed=seed, response_format={"type": "json_object"})
    r = client.chat.completions.create(**kw)
    text = r.choices[0].message.content
    assert isinstance(json.loads(text), dict), text
    assert r.choices[0].finish_reason == "stop"
    assert 1 <= r.usage.completion_tokens <= max_tokens  # "{}" is one Qwen token
    streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(stream=True, **kw)
                       if c.choices)
    if seed is not None or temperature == 0:
        assert streamed == text
    # Without the constraint the tiny model's output is not JSON (so the mask is what makes it so).
    del kw["response_format"]
    free = client.chat.completions.create(**kw).choices[0].message.content
    with pytest.raises(ValueError):
        json.loads(free)


def test_cache_salt_isolates_prefix_reuse(client):
    # A tenant's cached prompt blocks are invisible to requests with another salt (or none): the
    # cached-token count cannot reveal another tenant's prompt.
    sys_msg = {"role": "system", "content": "Salted system prompt for isolation. " * 20}
    msgs = [sys_msg, {"role": "user", "content": "Question one?"}]
    client.chat.completions.create(model=MODEL_ID, messages=msgs, max_tokens=2, temperature=0,
                                   extra_body={"cache_salt": "tenant-a"})
    msgs2 = [sys_msg, {"role": "user", "content": "Question two?"}]
    other = client.chat.completions.create(model=MODEL_ID, messages=msgs2, max_tokens=2, temperature=0,
                                           extra_body={"cache_salt": "tenant-b"})
    assert other.usage.prompt_tokens_details.cached_tokens == 0
    unsalted = client.chat.completions.create(model=MODEL_ID, messages=msgs2, max_tokens=2, temperature=0)
    assert unsalted.usage.prompt_tokens_details.cached_tokens == 0
    same = client.chat.completions.create(model=MODEL_ID, messages=msgs2, max_tokens=2, temperature=0,
                                          extra_body={"cache_salt": "tenant-a"})
    assert same.usage.prompt_tokens_details.cached_tokens >= 64
