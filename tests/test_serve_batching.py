"""Dynamic batching in the server (issue 17): concurrent requests share forward passes and get exactly the
answers they get one at a time; a request is never split; a bad or failing request fails alone; no batching
(window 0, cap 1) still works. Batches are closed by the cap, not the clock, so nothing here depends on timing."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from test_export import deploy_artifacts, sst2  # noqa: E402

from albertlm.deploy.inference import Predictor  # noqa: E402
from albertlm.deploy.serve import Batcher, BatchSettings, create_app  # noqa: E402
from albertlm.errors import UserError  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

T = TypeVar("T")
NEVER = 60_000.0  # ms: a window that never ends within a test, so only the cap closes a batch


def run(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run``, failing rather than hanging when a request is never answered."""
    return asyncio.run(asyncio.wait_for(coro, 120))


@pytest.fixture(scope="module")
def classifier() -> Predictor:
    # torch fp32: answers independent of batch company to float rounding (an int8 graph's are not, see
    # serve.py; nor are bf16 autocast's, whose kernels round differently by batch shape)
    return Predictor.load(deploy_artifacts()["AlbertForSequenceClassification"], engine="torch", threads=1,
                          overrides={"max_seq_length": 48}, precision="fp32")  # fmt: skip


def concurrently(app, calls: list[tuple[str, object]]) -> list[httpx.Response]:
    """POST every (path, body) at once on one event loop, as many clients would; bytes bodies go as they are."""

    async def main() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await asyncio.gather(*(client.post(path, **_body(body)) for path, body in calls))

    return run(main())


def one_at_a_time(app, calls: list[tuple[str, object]]) -> list[httpx.Response]:
    async def main() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return [await client.post(path, **_body(body)) for path, body in calls]

    return run(main())


def _body(body: object) -> dict:
    return {"content": body, "headers": {"content-type": "application/json"}} if isinstance(body, bytes) else {
        "json": body}  # fmt: skip


def assert_same_rows(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert set(g) == set(w)
        for key, value in w.items():
            if isinstance(value, float):
                assert g[key] == pytest.approx(value, abs=1e-5), key
            elif isinstance(value, dict):  # probabilities by label
                assert g[key] == pytest.approx(value, abs=1e-5), key
            else:
                assert g[key] == value, key


def stats(app) -> dict:
    return app.state.service.stats()


def test_concurrent_requests_share_one_batch_and_get_their_own_answers(classifier):
    texts = sst2("dev.tsv", 20)[0]
    calls: list[tuple[str, object]] = [("/v1/classify", {"texts": [t]}) for t in texts[:12]]  # single sentences
    calls += [("/v1/classify", {"texts": texts[12:15]}),
              ("/v1/classify", {"texts": [[t, p] for t, p in zip(texts[15:18], "abc", strict=True)]})]
    calls += [("/v1/predict", {"inputs": [{"text": texts[18]}, texts[19]]}), ("/v1/predict", {"text": texts[0]})]
    inputs = 12 + 3 + 3 + 2 + 1
    app = create_app(classifier, batching=BatchSettings(batch_window_ms=NEVER, max_batch=inputs))
    together = concurrently(app, calls)
    assert all(r.status_code == 200 for r in together), [r.text for r in together]
    # the batch closed when the cap was reached: every request in one forward pass
    assert stats(app) == {"batches": 1, "requests": 16, "examples": inputs, "most_requests_in_a_batch": 16,
                               "most_examples_in_a_batch": inputs, "batch_window_ms": NEVER, "max_batch": inputs}

    alone_app = create_app(classifier, batching=BatchSettings(batch_window_ms=0, max_batch=1))
    alone = one_at_a_time(alone_app, calls)
    assert stats(alone_app)["batches"] == 16 and stats(alone_app)["most_requests_in_a_batch"] == 1
    for r, a in zip(together, alone, strict=True):
        assert_same_rows(r.json()["results"], a.json()["results"])
    # and over HTTP /stats says the same
    assert _get(app, "/stats")["most_requests_in_a_batch"] == 16


def _get(app, path: str) -> dict:
    async def main() -> dict:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
            return (await client.get(path)).json()

    return run(main())


def test_batched_questions_sharing_an_id_keep_their_own_answers():
    """Each /v1/answer request without an id is "input 0": batched together, each still gets its own span."""
    qa = Predictor.load(deploy_artifacts()["AlbertForQuestionAnswering"], engine="torch", threads=1, precision="fp32")
    contexts = ["the film is good and the actors are young", "a cat sat on the mat in the sun",
                "paris is the capital of france , a large country", "nothing happens for two long hours"]
    calls = [("/v1/answer", {"question": "what is it?", "context": c}) for c in contexts]
    app = create_app(qa, batching=BatchSettings(batch_window_ms=NEVER, max_batch=len(calls)))
    together = concurrently(app, calls)
    assert stats(app)["batches"] == 1 and stats(app)["most_requests_in_a_batch"] == len(calls)
    alone = one_at_a_time(create_app(qa, batching=BatchSettings(0, 1)), calls)
    for r, a, context in zip(together, alone, contexts, strict=True):
        assert r.status_code == 200 and a.status_code == 200
        assert_same_rows([r.json()], [a.json()])
        assert r.json()["answer"] in context


def test_bad_requests_get_their_4xx_while_the_others_are_answered(classifier):
    texts = sst2("dev.tsv", 8)[0]
    good = [("/v1/classify", {"texts": [t]}) for t in texts]
    bad = [("/v1/classify", {"texts": [1]}), ("/v1/classify", b'{"texts": ['), ("/v1/predict", {"nope": "x"}),
           ("/v1/classify", {"texts": ["x"] * 40})]  # over max_items
    calls = good[:4] + bad + good[4:]
    app = create_app(classifier, batching=BatchSettings(batch_window_ms=NEVER, max_batch=len(good)))
    responses = concurrently(app, calls)
    got = dict(zip(range(len(calls)), responses, strict=True))
    assert [got[i].status_code for i in range(4, 8)] == [422, 400, 422, 422]
    for i in range(4, 8):
        assert set(got[i].json()) == {"error"} and got[i].json()["error"]["code"]
    answered = [got[i] for i in [0, 1, 2, 3, 8, 9, 10, 11]]
    assert all(r.status_code == 200 for r in answered)
    assert stats(app)["batches"] == 1 and stats(app)["requests"] == len(good)  # the bad ones never queued
    alone = one_at_a_time(create_app(classifier, batching=BatchSettings(0, 1)), good)
    for r, a in zip(answered, alone, strict=True):
        assert_same_rows(r.json()["results"], a.json()["results"])


def test_a_failure_in_the_model_fails_only_its_request(classifier, monkeypatch):
    """The batch with the failing request fails; rerun request by request, only that one gets the JSON 500."""
    predictor = Predictor.load(deploy_artifacts()["AlbertForSequenceClassification"], engine="torch", threads=1,
                               precision="fp32")
    predict = predictor.predict

    def fragile(examples):
        if any(ex.text_a == "boom" for ex in examples):
            raise RuntimeError("the model broke")
        return predict(examples)

    monkeypatch.setattr(predictor, "predict", fragile)
    texts = ["a gripping film", "dull", "boom", "funny and warm", "two long hours"]
    calls = [("/v1/classify", {"texts": [t]}) for t in texts]
    app = create_app(predictor, batching=BatchSettings(batch_window_ms=NEVER, max_batch=len(calls)))
    responses = concurrently(app, calls)
    assert [r.status_code for r in responses] == [200, 200, 500, 200, 200]
    assert responses[2].json() == {"error": {"code": "internal_error",
                                             "message": "RuntimeError: the server failed on this request"}}
    alone = one_at_a_time(create_app(classifier, batching=BatchSettings(0, 1)), calls[:2] + calls[3:])
    for r, a in zip(responses[:2] + responses[3:], alone, strict=True):
        assert_same_rows(r.json()["results"], a.json()["results"])
    assert stats(app)["requests"] == 4  # the four that succeeded, each alone after the failed batch


@pytest.mark.parametrize("settings", [BatchSettings(batch_window_ms=0), BatchSettings(batch_window_ms=0, max_batch=1)])
def test_no_window_and_no_batching_answer_concurrent_requests(classifier, settings):
    texts = sst2("dev.tsv", 10)[0]
    calls = [("/v1/classify", {"texts": [t]}) for t in texts]
    app = create_app(classifier, batching=settings)
    responses = concurrently(app, calls)
    alone = one_at_a_time(create_app(classifier, batching=BatchSettings(0, 1)), calls)
    for r, a in zip(responses, alone, strict=True):
        assert r.status_code == 200
        assert_same_rows(r.json()["results"], a.json()["results"])
    assert stats(app)["requests"] == len(calls)
    if settings.max_batch == 1:
        assert stats(app)["batches"] == len(calls) and stats(app)["most_requests_in_a_batch"] == 1


# ------------------------------------------------------------------------- the batcher alone, with a fake model
def echo_batcher(settings: BatchSettings) -> tuple[Batcher, list[list]]:
    """A batcher whose model answers each input with itself, recording every batch it is given."""
    seen: list[list] = []

    def predict(examples: list) -> list[dict]:
        seen.append(list(examples))
        return [{"input": ex} for ex in examples]

    return Batcher(predict, settings), seen


def test_requests_are_never_split_and_keep_their_order():
    batcher, seen = echo_batcher(BatchSettings(batch_window_ms=NEVER, max_batch=4))
    requests = [[f"r{i}-{j}" for j in range(n)] for i, n in enumerate([3, 3, 2, 1, 6])]

    async def main() -> list:
        return await asyncio.gather(*(batcher.submit(r) for r in requests))

    answers = run(main())
    assert answers == [[{"input": x} for x in r] for r in requests]
    assert [x for batch in seen for x in batch] == [x for r in requests for x in r]  # first come, first served
    for batch in seen:  # whole requests only; over the cap only a request that alone is larger
        owners = [x.split("-")[0] for x in batch]
        whole = [r for r in requests if r[0].split("-")[0] in owners]
        assert sum(len(r) for r in whole) == len(batch)
        assert len(batch) <= 4 or len(whole) == 1
    assert [len(b) for b in seen] == [3, 3, 3, 6]
    assert batcher.stats["batches"] == 4 and batcher.stats["most_examples_in_a_batch"] == 6


def test_a_request_arriving_within_the_window_joins_the_batch():
    batcher, seen = echo_batcher(BatchSettings(batch_window_ms=1000, max_batch=10))

    async def main() -> list:
        first = asyncio.ensure_future(batcher.submit(["a"]))
        await asyncio.sleep(0.01)  # well inside the first request's window
        return [await batcher.submit(["b"]), await first]

    assert run(main()) == [[{"input": "b"}], [{"input": "a"}]]
    assert seen == [["a", "b"]]


def test_a_client_that_went_away_is_not_computed():
    batcher, seen = echo_batcher(BatchSettings(batch_window_ms=NEVER, max_batch=3))

    async def main() -> list:
        a = asyncio.ensure_future(batcher.submit(["a"]))
        gone = asyncio.ensure_future(batcher.submit(["gone"]))
        await asyncio.sleep(0)
        gone.cancel()
        return [await batcher.submit(["c"]), await a]

    assert run(main()) == [[{"input": "c"}], [{"input": "a"}]]
    assert seen == [["a", "c"]]


def test_settings_are_checked_with_the_flag_to_change():
    with pytest.raises(UserError, match="--max-batch"):
        BatchSettings(max_batch=0)
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(UserError, match="--batch-window-ms"):
            BatchSettings(batch_window_ms=bad)


def test_requests_on_two_event_loops_at_once_are_both_answered():
    """A TestClient without ``with`` runs each request on its own loop, in its own thread: each loop gets its
    own queue (asyncio objects cannot cross loops), and a closed loop's queue is dropped."""
    batcher, seen = echo_batcher(BatchSettings(batch_window_ms=200, max_batch=10))
    answers: dict[str, list] = {}

    def client(name: str) -> None:
        answers[name] = run(batcher.submit([name]))

    threads = [threading.Thread(target=client, args=(name,)) for name in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert answers == {"a": [{"input": "a"}], "b": [{"input": "b"}]}
    assert sorted(seen) == [["a"], ["b"]]
    assert run(batcher.submit(["c"])) == [{"input": "c"}] and len(batcher._lanes) == 1
