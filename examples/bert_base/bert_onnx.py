"""A BERT-style text encoder in ONNX, built locally with random weights (no downloads).

Inputs, as a BERT export from Hugging Face: `input_ids`, `attention_mask`, `token_type_ids`, INT64
[1, S]. Word (vocabulary 30522), position (512) and token-type embeddings, then `layers` post-norm
transformer encoder layers (multi-head self-attention with the attention mask, GELU feed-forward
of 4 x hidden). Outputs `last_hidden_state` FP32 [1, S, hidden] and `pooler_output` FP32
[1, hidden] (tanh of a dense layer on the [CLS] token).

BERT-base is hidden 768, 12 layers, 12 heads (110 M parameters, ~440 MB of ONNX); the examples
default to hidden 128, 2 layers, 4 heads so that everything stays quick on a CPU.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

VOCAB_SIZE = 30522
MAX_POSITIONS = 512
TYPE_VOCAB_SIZE = 2
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT_NAMES = ("last_hidden_state", "pooler_output")


class _Graph:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0

    def name(self, kind: str) -> str:
        self._count += 1
        return f"{kind}_{self._count}"

    def constant(self, values: np.ndarray, kind: str = "const") -> str:
        name = self.name(kind)
        self.initializers.append(numpy_helper.from_array(values, name))
        return name

    def node(self, op_type: str, inputs: list[str], **attrs: object) -> str:
        out = self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out

    def weight(self, *shape: int, std: float = 0.02) -> str:
        return self.constant(self.rng.normal(0.0, std, shape).astype(np.float32), "w")

    def dense(self, x: str, c_in: int, c_out: int) -> str:
        """x @ W + b on the last axis (any leading axes)."""
        product = self.node("MatMul", [x, self.weight(c_in, c_out, std=1.0 / np.sqrt(c_in))])
        return self.node("Add", [product, self.constant(np.zeros(c_out, np.float32), "b")])

    def layer_norm(self, x: str, hidden: int) -> str:
        scale = self.constant(np.ones(hidden, np.float32), "ln_scale")
        bias = self.constant(np.zeros(hidden, np.float32), "ln_bias")
        return self.node("LayerNormalization", [x, scale, bias], axis=-1, epsilon=1e-12)

    def gelu(self, x: str) -> str:
        """0.5 x (1 + erf(x / sqrt 2)), BERT's exact GELU."""
        erf = self.node("Erf", [self.node("Div", [x, self.constant(np.float32(np.sqrt(2.0)))])])
        one_plus = self.node("Add", [erf, self.constant(np.float32(1.0))])
        return self.node("Mul", [self.node("Mul", [x, one_plus]), self.constant(np.float32(0.5))])


def _attention(g: _Graph, x: str, mask_bias: str, hidden: int, heads: int) -> str:
    head_dim = hidden // heads
    split = g.constant(np.array([0, 0, heads, head_dim], np.int64), "shape")
    merge = g.constant(np.array([0, 0, hidden], np.int64), "shape")

    def project(perm: list[int]) -> str:
        return g.node(
            "Transpose", [g.node("Reshape", [g.dense(x, hidden, hidden), split])], perm=perm
        )

    query = project([0, 2, 1, 3])  # [B, heads, S, d]
    key = project([0, 2, 3, 1])  # [B, heads, d, S]
    value = project([0, 2, 1, 3])
    scores = g.node("MatMul", [query, key])
    scores = g.node("Mul", [scores, g.constant(np.float32(1.0 / np.sqrt(head_dim)))])
    weights = g.node("Softmax", [g.node("Add", [scores, mask_bias])], axis=-1)
    context = g.node("Transpose", [g.node("MatMul", [weights, value])], perm=[0, 2, 1, 3])
    return g.dense(g.node("Reshape", [context, merge]), hidden, hidden)


def build_bert(
    path: str | Path, hidden: int = 128, layers: int = 2, heads: int = 4, seed: int = 0
) -> Path:
    """Write the encoder to `path` (see the module docstring) and return the path."""
    if hidden % heads:
        raise ValueError(f"hidden ({hidden}) must be a multiple of heads ({heads})")
    g = _Graph(seed)
    ids, mask, types = INPUT_NAMES

    # Embeddings: word + position + token type, then LayerNorm.
    words = g.node("Gather", [g.weight(VOCAB_SIZE, hidden), ids])  # [B, S, H]
    length = g.node("Gather", [g.node("Shape", [ids]), g.constant(np.array(1, np.int64))], axis=0)
    positions = g.node(
        "Range", [g.constant(np.array(0, np.int64)), length, g.constant(np.array(1, np.int64))]
    )
    position_vectors = g.node("Gather", [g.weight(MAX_POSITIONS, hidden), positions])  # [S, H]
    type_vectors = g.node("Gather", [g.weight(TYPE_VOCAB_SIZE, hidden), types])
    x = g.node("Add", [g.node("Add", [words, position_vectors]), type_vectors])
    x = g.layer_norm(x, hidden)

    # Additive attention mask: 0 where attention_mask is 1, -10000 where it is 0 (padding).
    keep = g.node("Cast", [mask], to=TensorProto.FLOAT)
    masked = g.node("Sub", [g.constant(np.float32(1.0)), keep])
    mask_bias = g.node(
        "Unsqueeze",
        [
            g.node("Mul", [masked, g.constant(np.float32(-10000.0))]),
            g.constant(np.array([1, 2], np.int64)),
        ],
    )  # [B, 1, 1, S]

    for _ in range(layers):
        x = g.layer_norm(g.node("Add", [x, _attention(g, x, mask_bias, hidden, heads)]), hidden)
        inner = g.gelu(g.dense(x, hidden, 4 * hidden))
        x = g.layer_norm(g.node("Add", [x, g.dense(inner, 4 * hidden, hidden)]), hidden)
    g.nodes.append(helper.make_node("Identity", [x], [OUTPUT_NAMES[0]]))

    cls = g.node("Gather", [x, g.constant(np.array(0, np.int64))], axis=1)  # [B, H]
    g.nodes.append(helper.make_node("Tanh", [g.dense(cls, hidden, hidden)], [OUTPUT_NAMES[1]]))

    graph = helper.make_graph(
        g.nodes,
        f"bert_style_h{hidden}_l{layers}",
        [
            helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])
            for name in INPUT_NAMES
        ],
        [
            helper.make_tensor_value_info(
                OUTPUT_NAMES[0], TensorProto.FLOAT, ["batch", "sequence", hidden]
            ),
            helper.make_tensor_value_info(OUTPUT_NAMES[1], TensorProto.FLOAT, ["batch", hidden]),
        ],
        g.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what onnxruntime accepts for opset 17
    onnx.checker.check_model(model, full_check=True)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(target))
    return target
