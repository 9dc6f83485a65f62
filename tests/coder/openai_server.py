"""A small OpenAI-compatible HTTP server for the Coder's tests: canned or tiny-model answers, scripted failures; not a real API.

Serves POST /v1/completions, /v1/chat/completions and /v1/load_lora_adapter on 127.0.0.1 from a
background thread. Tests script it through attributes: `failures` (status codes answered first,
429s carry `retry_after`), `hangs` (requests that stall until the client gives up), `answer`
(the function producing choices), `on_load` (called with each adapter load request). It records
every request body and the most requests it had in flight at once.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

Answer = Callable[[dict[str, Any]], list[dict[str, Any]]]


def canned_answer(text: str) -> Answer:
    """Every choice is `text`, one fake token per character, with vLLM-style token-id strings."""

    def answer(body: dict[str, Any]) -> list[dict[str, Any]]:
        tokens = [f"token_id:{ord(c)}" for c in text]
        choice = {"text": text, "finish_reason": "stop", "logprobs": {"tokens": tokens, "token_logprobs": [-1.0] * len(tokens)}}
        if "messages" in body:
            content = [{"token": t, "logprob": -1.0} for t in tokens]
            choice = {"message": {"role": "assistant", "content": text}, "finish_reason": "stop", "logprobs": {"content": content}}
        return [dict(choice, index=i) for i in range(body.get("n", 1))]

    return answer


def model_answer(generator: Any) -> Answer:
    """Choices sampled by a real TransformersGenerator, with token ids and raw log-probabilities."""

    def answer(body: dict[str, Any]) -> list[dict[str, Any]]:
        [completions] = generator.generate_sync(
            [body["prompt"]], body.get("n", 1), temperature=body.get("temperature", 1.0),
            top_p=body.get("top_p", 1.0), max_tokens=body.get("max_tokens", 16), seeds=[body.get("seed")],
        )
        return [{
            "index": i, "text": c.text, "finish_reason": c.finish_reason, "token_ids": c.token_ids,
            "prompt_token_ids": c.prompt_token_ids,
            "logprobs": {"tokens": [f"token_id:{t}" for t in c.token_ids], "token_logprobs": c.logprobs},
        } for i, c in enumerate(completions)]

    return answer


def scripted_answer(generator: Any, write: Callable[[str, int], str]) -> Answer:
    """Choices whose text `write(prompt, index)` scripts, scored by `generator`'s model as if it had sampled them.

    Token ids are the tokenizer's encoding of the text plus the stop token; log-probabilities are
    log-softmax(logits / temperature) of one forward pass (the generation contract), so a trainer
    holding the same weights sees on-policy samples and learns from a chosen mix of answers.
    """
    import torch

    def score(prompt_ids: list[int], ids: list[int], temperature: float) -> list[float]:
        with generator._lock, torch.no_grad():
            logits = generator.model(torch.tensor([prompt_ids + ids], device=generator.model.device)).logits[0]
        logp = torch.log_softmax(logits.float() / temperature, dim=-1)
        start = len(prompt_ids) - 1
        return [logp[start + i, t].item() for i, t in enumerate(ids)]

    def answer(body: dict[str, Any]) -> list[dict[str, Any]]:
        tokenizer = generator.tokenizer
        prompt_ids = tokenizer(body["prompt"])["input_ids"]
        choices = []
        for index in range(body.get("n", 1)):
            text = write(body["prompt"], index)
            ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
            choices.append({
                "index": index, "text": text, "finish_reason": "stop", "token_ids": ids, "prompt_token_ids": prompt_ids,
                "logprobs": {"tokens": [f"token_id:{t}" for t in ids],
                             "token_logprobs": score(prompt_ids, ids, body.get("temperature", 1.0))},
            })
        return choices

    return answer


def follow_adapters(generator: Any) -> Callable[[dict[str, Any]], None]:
    """An `on_load` that puts each adapter the client loads onto `generator`, as vLLM's server would."""

    def load(body: dict[str, Any]) -> None:
        generator.load_weights_sync(body["lora_path"], int(body["lora_name"].removeprefix("policy-v")))

    return load


class OpenAITestServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, answer: Answer) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.answer = answer
        self.failures: list[int] = []
        self.retry_after = "0"
        self.hangs = 0
        self.requests: list[dict[str, Any]] = []
        self.adapters: list[dict[str, Any]] = []
        self.on_load: Callable[[dict[str, Any]], None] = lambda body: None
        self.in_flight = 0
        self.max_in_flight = 0
        self.hold_s = 0.0  # every answered request takes this long (to observe concurrency)
        self.release = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def __enter__(self) -> "OpenAITestServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release.set()
        self.shutdown()
        self.server_close()

    def next_action(self) -> tuple[str, int]:
        with self._lock:
            if self.hangs:
                self.hangs -= 1
                return "hang", 0
            if self.failures:
                return "fail", self.failures.pop(0)
            return "answer", 200


class _Handler(BaseHTTPRequestHandler):
    server: OpenAITestServer

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        server = self.server
        if self.path.endswith("/load_lora_adapter"):
            server.adapters.append(body)
            server.on_load(body)
            return self._send(200, {"status": "ok"})
        if not self.path.endswith(("/completions", "/chat/completions")):
            return self._send(404, {"error": f"no route {self.path}"})
        server.requests.append(body)
        action, status = server.next_action()
        if action == "hang":
            server.release.wait(30)
            return None
        if action == "fail":
            headers = {"Retry-After": server.retry_after} if status == 429 else {}
            return self._send(status, {"error": {"message": f"scripted {status}"}}, headers)
        with server._lock:
            server.in_flight += 1
            server.max_in_flight = max(server.max_in_flight, server.in_flight)
        try:
            time.sleep(server.hold_s)
            choices = server.answer(body)
        finally:
            with server._lock:
                server.in_flight -= 1
        self._send(200, {"id": "cmpl-test", "object": "text_completion", "model": body.get("model"), "choices": choices})

    def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client timed out and left
