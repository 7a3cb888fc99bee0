"""Claude compression cost: requests and tokens per 1,000 interactions (no network).

    .venv/bin/python bench/bench_compressor_claude.py

The real anthropic SDK talks to an httpx2.MockTransport. The mock counts the
requests and computes the usage each one would carry with the estimate
tokens = ceil(characters / 4): input = system prompt + tool schema (the fixed,
cached part) + the rendered batch; output = the JSON tool input of a realistic
answer (the offline scorer's result for the same batch, in the tool's
schema). The first request writes the prompt cache, later ones read it.
"""

from __future__ import annotations

import math
import re
import sys
import tempfile
from pathlib import Path

import anthropic
import httpx2
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_compressor_offline import seed
from tiermem.compressor.claude_scorer import ClaudeScorer
from tiermem.compressor.job import run_compress

from tiermem.settings import resolve_settings


def tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


class CountingModel:
    def __init__(self) -> None:
        self.requests = 0
        self.fixed = self.batch_in = self.out = 0

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        body = orjson.loads(request.content)
        self.requests += 1
        fixed = tokens(orjson.dumps(body["system"]).decode() + orjson.dumps(body["tools"]).decode())
        prompt = body["messages"][0]["content"]
        batch_in = tokens(prompt)
        labels = re.findall(r"^\[(t\d+)\]", prompt, re.M)
        texts = re.findall(r"^  [^:]+: (.*)$", prompt, re.M)
        answer = {
            "interactions": [{"id": label, "importance": 5} for label in labels],
            "episodes": [
                {
                    "name": "A remembered afternoon",
                    "summary": "What happened, with absolute dates and who was there, in two sentences.",
                    "interaction_ids": labels[i : i + 4],
                    "key_quotes": [{"id": labels[i], "text": texts[min(len(texts) - 1, 2 * i)][:160]}],
                    "emotional_context": "warm, relieved",
                    "importance": 6,
                }
                for i in range(0, len(labels), 4)
            ],
            "facts": [
                {
                    "category": "user",
                    "content": "The user prefers ramen.",
                    "evidence_ids": [labels[0]],
                    "topic": "food",
                    "confidence": 0.8,
                    "importance": 5,
                }
                for _ in range(3)
            ],
        }
        out = tokens(orjson.dumps(answer).decode())
        first = self.requests == 1
        self.fixed += fixed
        self.batch_in += batch_in
        self.out += out
        return httpx2.Response(
            200,
            json={
                "id": f"msg_{self.requests}",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "record_memories", "input": answer}
                ],
                "stop_reason": "tool_use",
                "stop_sequence": None,
                "usage": {
                    "input_tokens": batch_in,
                    "cache_creation_input_tokens": fixed if first else 0,
                    "cache_read_input_tokens": 0 if first else fixed,
                    "output_tokens": out,
                },
            },
        )


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "data"
        seed(root, 1, 1010)
        settings = resolve_settings(data_dir=root, env={})
        model = CountingModel()
        client = anthropic.Anthropic(
            api_key="bench", http_client=httpx2.Client(transport=httpx2.MockTransport(model)), max_retries=0
        )
        info = run_compress(settings, scorer=ClaudeScorer(settings, client=client), progress=False)
        n = info.interactions_scored
        per = 1000 / n
        print(f"interactions compressed: {n} in {info.requests} requests ({info.scorer} scorer)")
        print(f"per 1,000 interactions: {model.requests * per:.1f} requests")
        print(f"  input tokens, fixed prompt+tool (cached after the first): {model.fixed * per:,.0f}")
        print(f"  input tokens, the batches themselves (uncached): {model.batch_in * per:,.0f}")
        print(f"  output tokens: {model.out * per:,.0f}")
        print(
            f"  fixed part per request: {model.fixed // model.requests} tokens; "
            f"batch per request: {model.batch_in // model.requests}; output per request: {model.out // model.requests}"
        )


if __name__ == "__main__":
    main()
