"""Bad input gets a 4xx with OpenAI's error body ({"error": {message, type, param, code}}) and the
server stays healthy. Also the API key: with --api-key only /health is public."""
import json

import openai
import pytest

from _server_util import API_KEY, MODEL_ID, SERVER_ARGS, ServerProc, get, post, request

MSG = [{"role": "user", "content": "hi"}]


def chat(**kw):
    body = {"messages": MSG, "max_tokens": 2}
    body.update(kw)
    return body


CASES = [
    # (name, path, json body or raw bytes, status, param)
    ("malformed json", "/v1/chat/completions", b'{"messages": [', 400, None),
    ("trailing garbage", "/v1/chat/completions", b'{"messages": []} x', 400, None),
    ("not an object", "/v1/chat/completions", b'[1, 2]', 400, None),
    ("empty body", "/v1/completions", b'', 400, None),
    ("messages missing", "/v1/chat/completions", {"max_tokens": 2}, 400, "messages"),
    ("messages a string", "/v1/chat/completions", {"messages": "hi"}, 400, "messages"),
    ("messages empty", "/v1/chat/completions", {"messages": []}, 400, "messages"),
    ("message not object", "/v1/chat/completions", {"messages": [3]}, 400, "messages[0]"),
    ("bad role", "/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}, 400, "messages[0]"),
    ("content number", "/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]}, 400,
     "messages[0].content"),
    ("image part", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, 400,
     "messages[0].content"),
    ("max_tokens string", "/v1/chat/completions", chat(max_tokens="10"), 400, "max_tokens"),
    ("max_tokens negative", "/v1/chat/completions", chat(max_tokens=-5), 400, "max_tokens"),
    ("max_tokens zero", "/v1/chat/completions", chat(max_tokens=0), 400, "max_tokens"),
    ("max_tokens huge", "/v1/chat/completions", chat(max_tokens=10**12), 400, "max_tokens"),
    ("max_tokens over int64", "/v1/chat/completions", chat(max_tokens=2**70), 400, "max_tokens"),
    ("max_tokens fractional", "/v1/chat/completions", chat(max_tokens=2.5), 400, "max_tokens"),
    ("max_completion_tokens negative", "/v1/chat/completions", chat(max_completion_tokens=-1), 400,
     "max_completion_tokens"),
    ("temperature string", "/v1/chat/completions", chat(temperature="hot"), 400, "temperature"),
    ("temperature too high", "/v1/chat/completions", chat(temperature=7), 400, "temperature"),
    ("top_p zero", "/v1/chat/completions", chat(top_p=0), 400, "top_p"),
    ("top_k string", "/v1/chat/completions", chat(top_k="5"), 400, "top_k"),
    ("min_p over 1", "/v1/chat/completions", chat(min_p=1.5), 400, "min_p"),
    ("presence_penalty", "/v1/chat/completions", chat(presence_penalty=9), 400, "presence_penalty"),
    ("seed string", "/v1/chat/completions", chat(seed="x"), 400, "seed"),
    ("stream string", "/v1/chat/completions", chat(stream="yes"), 400, "stream"),
    ("stream_options not object", "/v1/chat/completions", chat(stream=True, stream_options=1), 400,
     "stream_options"),
    ("stop number", "/v1/chat/completions", chat(stop=5), 400, "stop"),
    ("stop empty string", "/v1/chat/completions", chat(stop=[""]), 400, "stop"),
    ("n=2", "/v1/chat/completions", chat(n=2), 400, "n"),
    ("top_logprobs without logprobs", "/v1/chat/completions", chat(top_logprobs=3), 400, "top_logprobs"),
    ("top_logprobs 50", "/v1/chat/completions", chat(logprobs=True, top_logprobs=50), 400, "top_logprobs"),
    ("response_format bad type", "/v1/chat/completions", chat(response_format={"type": "yaml"}), 400,
     "response_format"),
    ("chat_template_kwargs list", "/v1/chat/completions", chat(chat_template_kwargs=[1]), 400,
     "chat_template_kwargs"),
    ("logit_bias bad key", "/v1/chat/completions", chat(logit_bias={"abc": 1}), 400, "logit_bias"),
    ("logit_bias id outside vocab", "/v1/chat/completions", chat(logit_bias={"999999999": 1}), 400, None),
    ("unknown model", "/v1/chat/completions", chat(model="gpt-9"), 404, "model"),
    ("prompt over the context", "/v1/completions", {"prompt": "hello " * 3000, "max_tokens": 2}, 400, "prompt"),
    ("chat over the context", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": "hello " * 3000}], "max_tokens": 2}, 400, "messages"),
    ("prompt missing", "/v1/completions", {"max_tokens": 2}, 400, "prompt"),
    ("prompt number", "/v1/completions", {"prompt": 5}, 400, "prompt"),
    ("prompt ids outside vocab", "/v1/completions", {"prompt": [1, 2, 99999999]}, 400, None),
    ("prompt ids negative", "/v1/completions", {"prompt": [1, -2]}, 400, "prompt"),
    ("prompt empty", "/v1/completions", {"prompt": ""}, 400, "prompt"),
    ("invalid utf-8 in json", "/v1/chat/completions",
     b'{"messages": [{"role": "user", "content": "bad \xff\xfe bytes"}]}', 400, None),
    ("invalid utf-8 prompt", "/v1/completions", b'{"prompt": "\xc0\xaf overlong"}', 400, None),
    ("tokenize no content", "/tokenize", {"text": "x"}, 400, "content"),
    ("tokenize invalid utf-8", "/tokenize", b'{"content": "\xed\xa0\x80"}', 400, None),
    ("detokenize bad ids", "/detokenize", {"tokens": [1, "two"]}, 400, "tokens"),
    ("detokenize outside vocab", "/detokenize", {"tokens": [10**9]}, 400, "tokens"),
    ("unknown route", "/v1/engines", {}, 404, None),
]


def check_error(st, body, status, param):
    assert st == status, body
    assert isinstance(body, dict) and set(body) == {"error"}, body
    e = body["error"]
    assert isinstance(e["message"], str) and e["message"]
    assert isinstance(e["type"], str) and e["type"]
    assert "param" in e and "code" in e
    if param is not None:
        assert e["param"] == param, e


@pytest.mark.parametrize("name,path,body,status,param", CASES, ids=[c[0] for c in CASES])
def test_bad_request(server, name, path, body, status, param):
    if isinstance(body, bytes):
        st, b = post(server, path, raw=body)
    else:
        st, b = post(server, path, body)
    check_error(st, b, status, param)
    st, h = get(server, "/health")
    assert st == 200 and h["status"] == "ok"


def test_wrong_method_and_oversized_body(server):
    st, b, _ = request(server, "GET", "/v1/chat/completions")
    assert 400 <= st < 500
    check_error(st, b, st, None)
    big = json.dumps({"messages": [{"role": "user", "content": "x" * (9 << 20)}]}).encode()
    try:
        st, b = post(server, "/v1/chat/completions", raw=big)
        check_error(st, b, 413, None)
    except (ConnectionResetError, BrokenPipeError):
        pass  # the server may close the connection after refusing the body early
    st, h = get(server, "/health")
    assert st == 200 and h["status"] == "ok"


def test_openai_client_sees_typed_errors(server):
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.NotFoundError):
        c.chat.completions.create(model="nope", messages=MSG)
    with pytest.raises(openai.BadRequestError) as ei:
        c.chat.completions.create(model=MODEL_ID, messages=MSG, max_tokens=-1)
    assert ei.value.body["param"] == "max_tokens"
    with pytest.raises(openai.BadRequestError):
        c.completions.create(model=MODEL_ID, prompt="hello " * 3000, max_tokens=2)


@pytest.fixture(scope="module")
def keyed_server(server_model_dir, tmp_path_factory):
    d = tmp_path_factory.mktemp("keyed")
    keyfile = d / "key.txt"
    keyfile.write_text(API_KEY + "\n")
    srv = ServerProc(server_model_dir, ["--parallel", "2", "--ctx-size", "256", "--api-key-file", str(keyfile)],
                     d / "server.log")
    yield srv
    srv.stop()


def test_api_key(keyed_server):
    srv = keyed_server
    st, h = get(srv, "/health")
    assert st == 200 and h["status"] == "ok"
    good = {"Authorization": "Bearer " + API_KEY}
    for hdr in [{}, {"Authorization": "Bearer wrong"}, {"Authorization": API_KEY}, {"Authorization": "Basic " + API_KEY}]:
        for method, path in [("GET", "/v1/models"), ("GET", "/metrics"), ("POST", "/tokenize"),
                             ("POST", "/v1/chat/completions"), ("POST", "/v1/completions")]:
            st, b, _ = request(srv, method, path, body={"content": "x"} if method == "POST" else None, headers=hdr)
            check_error(st, b, 401, None)
    st, b, _ = request(srv, "GET", "/v1/models", headers=good)
    assert st == 200 and b["data"][0]["id"] == MODEL_ID
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=srv.url + "/v1", api_key="wrong", max_retries=0).models.list()
    c = openai.OpenAI(base_url=srv.url + "/v1", api_key=API_KEY, max_retries=0)
    r = c.chat.completions.create(model=MODEL_ID, messages=MSG, max_tokens=2, temperature=0)
    assert r.usage.completion_tokens == 2
    st, h = get(srv, "/health")
    assert st == 200 and h["status"] == "ok"
