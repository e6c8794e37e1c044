"""Embed sentences with the `bert_base` model on Triton; print embeddings and their similarities.

    python examples/bert_base/client.py
    python examples/bert_base/client.py "first sentence" "a question ||| its answer"

A toy tokenizer stands in for BERT's WordPiece (no vocabulary download): lower-cased words and
punctuation hashed into BERT's id range, with BERT's special ids [CLS]=101, [SEP]=102, [PAD]=0.
"A ||| B" encodes a sentence pair (token_type_ids 0 for A, 1 for B). Each sentence is padded to
the smallest sequence gear that holds it (32, 64 or 128; longer ones are cut to 128), since the
model only runs at its gear lengths, with attention_mask 0 on the padding. The sentences go as
concurrent requests of INT64 [1, gear]. The weights are random: similar numbers are plumbing,
not meaning.
"""

from __future__ import annotations

import argparse
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import tritonclient.http as httpclient

VOCAB_SIZE = 30522
PAD_ID, CLS_ID, SEP_ID = 0, 101, 102
FIRST_WORD_ID = 1000  # ids below are BERT's special and unused tokens
GEARS = (32, 64, 128)
PAIR_SEPARATOR = "|||"
SENTENCES = (
    "The NPU runs the model.",
    "The model runs on the NPU.",
    "Triton batches requests. ||| Gears fix the shapes the device accepts.",
    "A longer sentence goes to a longer gear: the client counts its tokens, picks the smallest "
    "sequence length the compiled model accepts that holds all of them, and pads the rest with "
    "zeros that the attention mask hides.",
)


@dataclass(frozen=True)
class Encoded:
    """One request's three INT64 [1, gear] inputs and how many tokens are real."""

    input_ids: np.ndarray
    attention_mask: np.ndarray
    token_type_ids: np.ndarray
    tokens: int
    truncated: bool

    @property
    def gear(self) -> int:
        return int(self.input_ids.shape[1])

    def feeds(self) -> dict[str, np.ndarray]:
        return {
            "input_ids": self.input_ids,
            "attention_mask": self.attention_mask,
            "token_type_ids": self.token_type_ids,
        }


def word_ids(text: str) -> list[int]:
    """Toy tokenizer: each lower-cased word or punctuation mark hashed to a vocabulary id."""
    words = re.findall(r"\w+|[^\w\s]", text.lower())
    span = VOCAB_SIZE - FIRST_WORD_ID
    return [FIRST_WORD_ID + zlib.crc32(word.encode()) % span for word in words]


def encode(text: str, gears: Sequence[int] = GEARS) -> Encoded:
    """[CLS] A [SEP] (B [SEP]), padded to the smallest gear that holds it (cut to the largest)."""
    first, _, second = text.partition(PAIR_SEPARATOR)
    ids = [CLS_ID, *word_ids(first), SEP_ID]
    types = [0] * len(ids)
    if second.strip():
        tail = [*word_ids(second), SEP_ID]
        ids += tail
        types += [1] * len(tail)
    longest = max(gears)
    truncated = len(ids) > longest
    if truncated:
        ids, types = ids[: longest - 1] + [SEP_ID], types[:longest]
    gear = min(g for g in gears if g >= len(ids))
    padding = gear - len(ids)
    return Encoded(
        input_ids=np.array([ids + [PAD_ID] * padding], np.int64),
        attention_mask=np.array([[1] * len(ids) + [0] * padding], np.int64),
        token_type_ids=np.array([types + [0] * padding], np.int64),
        tokens=len(ids),
        truncated=truncated,
    )


def embed(url: str, model: str, encoded: Sequence[Encoded]) -> list[dict[str, np.ndarray]]:
    """All requests in flight at once; each answer's `last_hidden_state` and `pooler_output`."""
    with httpclient.InferenceServerClient(url, concurrency=max(len(encoded), 1)) as client:
        pending = []
        for item in encoded:
            inputs = []
            for name, array in item.feeds().items():
                tensor = httpclient.InferInput(name, list(array.shape), "INT64")
                tensor.set_data_from_numpy(array)
                inputs.append(tensor)
            pending.append(client.async_infer(model, inputs))
        results = [request.get_result() for request in pending]
    return [
        {name: r.as_numpy(name) for name in ("last_hidden_state", "pooler_output")} for r in results
    ]


def sentence_embedding(last_hidden_state: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    """Mean of the real tokens' hidden states (padding left out): FP32 [hidden]."""
    mask = attention_mask[0].astype(np.float32)[:, None]
    return (last_hidden_state[0] * mask).sum(axis=0) / mask.sum()


def cosine_matrix(vectors: np.ndarray) -> np.ndarray:
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return unit @ unit.T


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sentences", nargs="*", help=f'sentences; "A {PAIR_SEPARATOR} B" = pair')
    parser.add_argument("--url", default="127.0.0.1:8000", help="Triton HTTP address")
    parser.add_argument("--model", default="bert_base")
    parser.add_argument(
        "--gears", default=",".join(map(str, GEARS)), help="the model's sequence gears"
    )
    args = parser.parse_args(argv)

    sentences = list(args.sentences or SENTENCES)
    gears = sorted(int(g) for g in args.gears.split(","))
    encoded = [encode(text, gears) for text in sentences]
    answers = embed(args.url, args.model, encoded)
    hidden = answers[0]["pooler_output"].shape[-1]
    print(f"{args.model}: {len(sentences)} concurrent requests, hidden size {hidden}")
    embeddings = []
    for number, (text, item, answer) in enumerate(zip(sentences, encoded, answers)):
        vector = sentence_embedding(answer["last_hidden_state"], item.attention_mask)
        embeddings.append(vector)
        cut = " (truncated)" if item.truncated else ""
        shown = text if len(text) <= 60 else text[:57] + "..."
        print(f"  [{number}] {shown!r}")
        print(
            f"      {item.tokens} tokens -> gear {item.gear}{cut}; last_hidden_state "
            f"{list(answer['last_hidden_state'].shape)}"
        )
        head = ", ".join(f"{v:+.3f}" for v in vector[:6])
        norm = np.linalg.norm(vector)
        print(f"      sentence embedding (mean of tokens) [{head}, ...] norm {norm:.2f}")
        pooled = ", ".join(f"{v:+.3f}" for v in answer["pooler_output"][0, :6])
        print(f"      pooler_output [{pooled}, ...]")
    similarity = cosine_matrix(np.stack(embeddings))
    print("  cosine similarity of the sentence embeddings:")
    print("        " + "".join(f"[{j}]".rjust(7) for j in range(len(sentences))))
    for i, row in enumerate(similarity):
        print(f"    [{i}] " + "".join(f"{v:7.3f}" for v in row))


if __name__ == "__main__":
    main()
