"""Drives `plumb serve` with the official OpenAI Python client and prints what it got, as JSON.

Usage: python openai_client.py BASE_URL MODEL
The Rust test crates/server/tests/openai_client.rs runs this and compares every answer with the
engine's own answer to the same request, token for token. Each scenario's parameters live in the
Rust test too; keep the two in step.
"""

import json
import sys

from openai import OpenAI

base, model = sys.argv[1], sys.argv[2]
client = OpenAI(base_url=f"{base}/v1", api_key="test-key", max_retries=0, timeout=120)
out = {}

SYSTEM = "You are a concise assistant."
QUESTION = "What is the capital of France?"
messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]

# 1. Chat, greedy, whole.
r = client.chat.completions.create(model=model, messages=messages, max_tokens=24, temperature=0)
c = r.choices[0]
out["chat"] = {
    "text": c.message.content,
    "role": c.message.role,
    "finish": c.finish_reason,
    "usage": [r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens],
    "object": r.object,
    "fingerprint": r.system_fingerprint,
}

# 2. The same chat, streamed, with usage.
pieces, finish, usage, roles = [], None, None, []
for chunk in client.chat.completions.create(
    model=model, messages=messages, max_tokens=24, temperature=0, stream=True, stream_options={"include_usage": True}
):
    if chunk.usage is not None:
        usage = [chunk.usage.prompt_tokens, chunk.usage.completion_tokens, chunk.usage.total_tokens]
    for ch in chunk.choices:
        if ch.delta.role:
            roles.append(ch.delta.role)
        if ch.delta.content:
            pieces.append(ch.delta.content)
        if ch.finish_reason:
            finish = ch.finish_reason
out["chat_stream"] = {"text": "".join(pieces), "finish": finish, "usage": usage, "roles": roles, "num_pieces": len(pieces)}

# 3. Completions, seeded sampling.
r = client.completions.create(model=model, prompt="The capital of France is", max_tokens=16, temperature=0.8, seed=42)
out["completion_seeded"] = {"text": r.choices[0].text, "finish": r.choices[0].finish_reason, "object": r.object}
r2 = client.completions.create(model=model, prompt="The capital of France is", max_tokens=16, temperature=0.8, seed=42)
out["completion_seeded_again"] = {"text": r2.choices[0].text}

# 4. Completions with log-probabilities.
r = client.completions.create(model=model, prompt="Once upon a time", max_tokens=8, temperature=0, logprobs=3)
lp = r.choices[0].logprobs
out["completion_logprobs"] = {
    "text": r.choices[0].text,
    "tokens": lp.tokens,
    "token_logprobs": lp.token_logprobs,
    "num_top": [len(t) for t in lp.top_logprobs],
}

# 5. Chat with log-probabilities and alternatives.
r = client.chat.completions.create(model=model, messages=messages, max_tokens=8, temperature=0, logprobs=True, top_logprobs=2)
content = r.choices[0].logprobs.content
out["chat_logprobs"] = {
    "text": r.choices[0].message.content,
    "logprobs": [t.logprob for t in content],
    "bytes": [t.bytes for t in content],
    "top": [[a.logprob for a in t.top_logprobs] for t in content],
}

# 6. n > 1, seeded.
r = client.chat.completions.create(model=model, messages=messages, max_tokens=12, temperature=1.0, seed=7, n=3)
out["chat_n"] = {
    "texts": [c.message.content for c in sorted(r.choices, key=lambda c: c.index)],
    "usage": [r.usage.prompt_tokens, r.usage.completion_tokens],
}

# 7. Stop sequences, streamed (the stop text must never appear, even split across chunks).
pieces, finish = [], None
for chunk in client.completions.create(
    model=model, prompt="The capital of France is", max_tokens=40, temperature=0, stop=[" the", "\n\n"], stream=True
):
    for ch in chunk.choices:
        pieces.append(ch.text)
        if ch.finish_reason:
            finish = ch.finish_reason
out["completion_stop_stream"] = {"text": "".join(pieces), "finish": finish}
r = client.completions.create(model=model, prompt="The capital of France is", max_tokens=40, temperature=0, stop=" the")
out["completion_stop"] = {"text": r.choices[0].text, "finish": r.choices[0].finish_reason}

# 8. A list of prompts, token-id prompts.
r = client.completions.create(model=model, prompt=["One, two,", "Red, green,"], max_tokens=6, temperature=0)
out["completion_list"] = {"texts": [c.text for c in sorted(r.choices, key=lambda c: c.index)]}

# 9. The model list.
out["models"] = [m.id for m in client.models.list().data]

print(json.dumps(out))
