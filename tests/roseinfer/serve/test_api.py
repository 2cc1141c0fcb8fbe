"""The OpenAI API through real clients: the openai package, curl, and urllib for exact status codes."""

from __future__ import annotations

import json
import subprocess
import time

import openai
import pytest

from roseinfer import LLM, SamplingParams
from tests.roseinfer.serve.conftest import sse_events

PROMPTS = ["The quick brown fox", [464, 2068, 7586, 21831, 18045], "x"]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def reference():
    """LLM.generate's greedy tokens for PROMPTS: the server must give the same, token for token."""
    with LLM("gpt2-tiny", max_batch_size=8) as llm:
        return [
            o.token_ids for o in llm.generate(PROMPTS, SamplingParams(max_new_tokens=24, ignore_eos=True))
        ]


def test_greedy_completion_equals_llm_generate(client, reference):
    for prompt, expected in zip(PROMPTS, reference):
        r = client.completions.create(
            model="gpt2-tiny", prompt=prompt, max_tokens=24, temperature=0, extra_body={"ignore_eos": True}
        )
        choice = r.choices[0]
        assert choice.model_extra["token_ids"] == expected
        assert choice.finish_reason == "length"
        assert r.usage.completion_tokens == 24
        assert r.usage.total_tokens == r.usage.prompt_tokens + 24


def test_streamed_greedy_equals_llm_generate(client, reference):
    for prompt, expected in zip(PROMPTS, reference):
        stream = client.completions.create(
            model="gpt2-tiny",
            prompt=prompt,
            max_tokens=24,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
        ids, steps, reasons, usage = [], [], [], None
        for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for c in chunk.choices:
                ids += c.model_extra["token_ids"]
                steps += c.model_extra["token_steps"]
                reasons.append(c.finish_reason)
        assert ids == expected
        assert steps[0] == -1  # the first token comes from the prefill
        assert steps[1:] == sorted(steps[1:]) and len(set(steps[1:])) == len(steps) - 1  # one per decode step
        assert reasons[-1] == "length" and all(r is None for r in reasons[:-1])
        assert usage.completion_tokens == 24


def test_batch_of_prompts_gives_one_choice_each(server, reference):
    status, _, body = server.post(
        "/v1/completions", {"prompt": PROMPTS[:2], "max_tokens": 24, "temperature": 0, "ignore_eos": True}
    )
    assert status == 200
    assert [c["index"] for c in body["choices"]] == [0, 1]
    assert [c["token_ids"] for c in body["choices"]] == reference[:2]
    assert body["usage"]["completion_tokens"] == 48


@pytest.mark.parametrize("route", ["/v1/completions", "/v1/chat/completions"])
def test_response_id_is_the_request_id_in_the_step_log(server, steplog_path, route):
    ask = {"max_tokens": 5, "temperature": 0, "ignore_eos": True}
    if route.endswith("chat/completions"):
        ask["messages"] = [{"role": "user", "content": "join me"}]
    else:
        ask["prompt"] = "join me"
    status, _, body = server.post(route, ask)
    assert status == 200
    # The id is final before the engine sees the request (a chat id once changed after, racing the step log).
    assert body["id"].startswith("chatcmpl-" if "chat" in route else "cmpl-")
    mine, records = [], []
    deadline = time.monotonic() + 30
    while not mine and time.monotonic() < deadline:  # the engine flushes its step log when it goes idle
        # the lines written so far: the engine may be writing the last one (it has no newline yet)
        lines = steplog_path.read_text().split("\n")[:-1]
        records = [json.loads(line) for line in lines if line.strip()]
        mine = [r for r in records if r.get("type") == "request" and r.get("request_id") == body["id"]]
        time.sleep(0.1)
    assert len(mine) == 1, "the request's record did not reach the step log"
    # The client's token steps are the engine's, and each decode step's record lists the request.
    assert mine[0]["token_step"] == body["choices"][0]["token_steps"]
    steps = {r["index"]: r for r in records if r.get("type") == "step"}
    for s in body["choices"][0]["token_steps"][1:]:
        assert mine[0]["id"] in steps[s]["requests"]


def test_stop_string_ends_the_choice_without_the_stop_text(server):
    # gpt2-tiny's bytes tokenizer: ask for the exact text it generates greedily, then stop inside it.
    status, _, full = server.post("/v1/completions", {"prompt": "hi", "max_tokens": 8, "temperature": 0})
    text = full["choices"][0]["text"]
    assert status == 200 and len(text) >= 3
    stop = text[1:3]
    for stream in (False, True):
        body = {"prompt": "hi", "max_tokens": 8, "temperature": 0, "stop": [stop], "stream": stream}
        status, _, out = server.post("/v1/completions", body)
        assert status == 200
        if stream:
            events = sse_events(out.splitlines())
            got = "".join(c["text"] for e in events if isinstance(e, dict) for c in e["choices"])
            reason = [c["finish_reason"] for e in events if isinstance(e, dict) for c in e["choices"]][-1]
        else:
            got, reason = out["choices"][0]["text"], out["choices"][0]["finish_reason"]
        assert got == text[: text.index(stop)]
        assert reason == "stop"


def test_curl_streams_sse_ending_with_done(server):
    body = json.dumps({"prompt": "curl", "max_tokens": 6, "temperature": 0, "stream": True})
    out = subprocess.run(
        [
            "curl",
            "-sS",
            "-N",
            "-H",
            "Content-Type: application/json",
            "-d",
            body,
            server.url + "/v1/completions",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    events = sse_events(out.splitlines())
    assert events[-1] == "[DONE]"
    assert sum(len(c["token_ids"]) for e in events[:-1] for c in e["choices"]) == 6


def test_models_health_version(server, client):
    assert [m.id for m in client.models.list()] == ["gpt2-tiny"]
    assert server.get("/health")[:1] == (200,)
    status, _, body = server.get("/version")
    assert status == 200 and body["version"]


def test_chat_completions_render_the_template(client, server):
    messages = [{"role": "user", "content": "hi"}]
    with LLM("gpt2-tiny", max_batch_size=8) as llm:
        expected = llm.generate("user: hi\nassistant:", SamplingParams(max_new_tokens=6, ignore_eos=True))[0]
    r = client.chat.completions.create(
        model="gpt2-tiny", messages=messages, max_tokens=6, temperature=0, extra_body={"ignore_eos": True}
    )
    assert r.object == "chat.completion" and r.choices[0].message.role == "assistant"
    assert r.choices[0].model_extra["token_ids"] == expected.token_ids
    assert r.usage.prompt_tokens == len(expected.prompt_token_ids)
    chunks = list(
        client.chat.completions.create(
            model="gpt2-tiny",
            messages=messages,
            max_tokens=6,
            temperature=0,
            stream=True,
            extra_body={"ignore_eos": True},
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [t for c in chunks for t in c.choices[0].model_extra["token_ids"]] == expected.token_ids
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == r.choices[0].message.content


def _error(server, body, status: int, param=None) -> dict:
    got, _, out = server.post("/v1/completions", body)
    assert got == status, out
    err = out["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert "Traceback" not in err["message"]
    if param is not None:
        assert err["param"] == param
    return err


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": ""}, "prompt"),
        ({"prompt": []}, "prompt"),
        ({"prompt": 5}, "prompt"),
        ({"prompt": ["a", 1]}, "prompt"),
        ({"prompt": [1, "2"]}, "prompt"),
        ({"prompt": [70000]}, "prompt"),
        ({"prompt": "x" * 1024}, "prompt"),
        (
            {"prompt": "x" * 500_000},
            "prompt",
        ),  # tokenized off the event loop (long), then refused the same way
        ({"prompt": [1] * 5000}, "prompt"),
        ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
        ({"prompt": "x", "max_tokens": "5"}, "max_tokens"),
        ({"prompt": "x", "max_tokens": 1024}, "max_tokens"),
        ({"prompt": "x", "temperature": "hot"}, "temperature"),
        ({"prompt": "x", "stream": "yes"}, "stream"),
        ({"prompt": "x", "n": 2}, "n"),
        ({"prompt": "x", "logprobs": 1}, "logprobs"),
        ({"prompt": "x", "echo": True}, "echo"),
        ({"prompt": "x", "best_of": 2}, "best_of"),
        ({"prompt": "x", "suffix": "y"}, "suffix"),
        ({"prompt": "x", "no_such_field": 1}, "no_such_field"),
        ({"max_tokens": 3}, "prompt"),
        # beyond a 64-bit seed, torch's generator raised on the engine thread and the whole server failed
        ({"prompt": "x", "seed": 2**64}, "seed"),
        ({"prompt": "x", "seed": -(2**63) - 1}, "seed"),
    ],
)
def test_client_mistakes_are_openai_shaped_400s(server, body, param):
    _error(server, body, 400, param)


def test_unknown_model_and_route_are_404(server):
    assert _error(server, {"prompt": "x", "model": "gpt5"}, 404, "model")["code"] == "model_not_found"
    status, _, out = server.get("/v1/nothing")
    assert status == 404 and set(out["error"]) == {"message", "type", "param", "code"}


def test_malformed_json_is_a_400(server):
    for raw in (b"{", b"[1, 2]", b"null", b'{"prompt": "x",}', b"\xff\xfe"):
        status, _, out = server.post("/v1/completions", raw)
        assert status == 400, (raw, out)
        assert set(out["error"]) == {"message", "type", "param", "code"}


def test_seed_repeats_a_sampled_answer_and_a_tiny_top_p_is_greedy(server):
    def tokens(**sampling) -> list[int]:
        body = {"prompt": "sample", "max_tokens": 12, "ignore_eos": True, **sampling}
        status, _, out = server.post("/v1/completions", body)
        assert status == 200, out
        return out["choices"][0]["token_ids"]

    seeded = tokens(temperature=1.0, seed=7)
    assert tokens(temperature=1.0, seed=7) == seeded
    assert tokens(temperature=1.0, seed=8) != seeded
    # The nucleus of 1e-6 holds only the most likely token: sampling it is greedy decoding.
    assert tokens(temperature=1.0, top_p=1e-6, seed=3) == tokens(temperature=0)
