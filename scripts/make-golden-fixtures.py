#!/usr/bin/python3
"""Golden fixtures from an independent implementation (tests/fixtures/golden/).

Tiny Llama and GPT-2 models written here from the public Hugging Face math
(LlamaForCausalLM, GPT2LMHeadModel) in PyTorch, float64, at fixed weights and
fixed token rows. For each model the script writes into
tests/fixtures/golden/<model>/:

  config.json         the HF config (what `meshtrain` reads beside a safetensors file)
  model.safetensors   the weights, HF names and layouts, F32 (every value
                      exactly representable in f32, so both sides start from
                      the same numbers)
  expected.safetensors
                      tokens, targets (I32 [rows, seq]; -1: not supervised),
                      loss (F64 [1]: the sum of the supervised targets' cross
                      entropies over their count), count (I64 [1]), logits
                      (F64 [rows, seq, vocab]) and grad.<HF name> (F64: the
                      gradient of that loss, for every weight)

tests/checkpoint/hf_golden_test.cc loads the weights through meshtrain's
safetensors import, runs forward and backward under the fp64 policy and
compares (docs/reproducibility.md, "Golden fixtures"). The tests need no
Python; only regenerating the fixtures does:

  apt-get install python3-torch
  /usr/bin/python3 scripts/make-golden-fixtures.py

Weights come from Python's own `random` (Mersenne Twister, stable across
versions), so the same files come out on any machine up to the last bits of
the float64 sums.
"""

import json
import math
import os
import random
import struct
import sys

import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "golden")

LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 67,
    "hidden_size": 16,
    "intermediate_size": 40,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,  # grouped-query attention: two query heads per KV head
    "head_dim": 4,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "rope_scaling": None,
    "max_position_embeddings": 16,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "mlp_bias": False,
    "torch_dtype": "float32",
}

GPT2 = {
    "architectures": ["GPT2LMHeadModel"],
    "model_type": "gpt2",
    "vocab_size": 67,
    "n_embd": 16,
    "n_layer": 2,
    "n_head": 4,
    "n_positions": 16,
    "n_ctx": 16,
    "n_inner": 40,
    "layer_norm_epsilon": 1e-5,
    "activation_function": "gelu_new",  # the tanh approximation
    "tie_word_embeddings": True,
    "torch_dtype": "float32",
}

ROWS, SEQ = 2, 9


class Values:
    """Uniform values in [-scale, scale] (+ offset), rounded to f32."""

    def __init__(self, seed):
        self.rng = random.Random(seed)

    def tensor(self, shape, scale, offset=0.0):
        n = math.prod(shape)
        v = [offset + scale * (2.0 * self.rng.random() - 1.0) for _ in range(n)]
        t = torch.tensor(v, dtype=torch.float64).reshape(shape)
        return t.float().double().requires_grad_(True)  # exactly what the F32 file holds


def tokens_and_targets(seed, vocab):
    rng = random.Random(seed)
    tokens = [[rng.randrange(vocab) for _ in range(SEQ)] for _ in range(ROWS)]
    # Next-token targets; the last position of each row and a few others are
    # not supervised (-1), so the count differs from rows x seq.
    targets = []
    for r in range(ROWS):
        row = tokens[r][1:] + [-1]
        for c in rng.sample(range(SEQ - 1), 2):
            row[c] = -1
        targets.append(row)
    return torch.tensor(tokens), torch.tensor(targets)


# ---- the HF math ----


def rms_norm(x, w, eps):  # LlamaRMSNorm
    variance = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(variance + eps))


def rotate_half(x):  # HF Llama
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_cos_sin(positions, head_dim, theta):  # LlamaRotaryEmbedding (default rope type)
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    freqs = positions.double()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def causal_attention(q, k, v):
    """q [B, Hq, T, D], k/v [B, Hkv, T, D]; KV head j serves query heads j*g .. j*g+g-1 (repeat_kv)."""
    groups = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(groups, dim=1)
    v = v.repeat_interleave(groups, dim=1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    t = q.shape[2]
    mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
    scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def split_heads(x, heads):  # [B, T, H*D] -> [B, H, T, D]
    b, t, hd = x.shape
    return x.view(b, t, heads, hd // heads).transpose(1, 2)


def merge_heads(x):  # [B, H, T, D] -> [B, T, H*D]
    b, h, t, d = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d)


def llama_weights(cfg, seed):
    val = Values(seed)
    d, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd, hq, hkv = cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    w = {"model.embed_tokens.weight": val.tensor([v, d], 1.0)}
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        w[p + "input_layernorm.weight"] = val.tensor([d], 0.2, 1.0)
        w[p + "self_attn.q_proj.weight"] = val.tensor([hq * hd, d], 0.4)
        w[p + "self_attn.k_proj.weight"] = val.tensor([hkv * hd, d], 0.4)
        w[p + "self_attn.v_proj.weight"] = val.tensor([hkv * hd, d], 0.4)
        w[p + "self_attn.o_proj.weight"] = val.tensor([d, hq * hd], 0.4)
        w[p + "post_attention_layernorm.weight"] = val.tensor([d], 0.2, 1.0)
        w[p + "mlp.gate_proj.weight"] = val.tensor([f, d], 0.4)
        w[p + "mlp.up_proj.weight"] = val.tensor([f, d], 0.4)
        w[p + "mlp.down_proj.weight"] = val.tensor([d, f], 0.3)
    w["model.norm.weight"] = val.tensor([d], 0.2, 1.0)
    w["lm_head.weight"] = val.tensor([v, d], 0.5)
    return w


def llama_logits(cfg, w, tokens):
    hq, hkv, eps = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["rms_norm_eps"]
    cos, sin = rope_cos_sin(torch.arange(tokens.shape[1]), cfg["head_dim"], cfg["rope_theta"])
    h = w["model.embed_tokens.weight"][tokens]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        x = rms_norm(h, w[p + "input_layernorm.weight"], eps)
        q = split_heads(x @ w[p + "self_attn.q_proj.weight"].T, hq)
        k = split_heads(x @ w[p + "self_attn.k_proj.weight"].T, hkv)
        v = split_heads(x @ w[p + "self_attn.v_proj.weight"].T, hkv)
        q = q * cos + rotate_half(q) * sin  # apply_rotary_pos_emb
        k = k * cos + rotate_half(k) * sin
        h = h + merge_heads(causal_attention(q, k, v)) @ w[p + "self_attn.o_proj.weight"].T
        x = rms_norm(h, w[p + "post_attention_layernorm.weight"], eps)
        gate = torch.nn.functional.silu(x @ w[p + "mlp.gate_proj.weight"].T)
        h = h + (gate * (x @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
    h = rms_norm(h, w["model.norm.weight"], eps)
    return h @ w["lm_head.weight"].T


def gelu_new(x):  # GPT-2's tanh approximation
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def gpt2_weights(cfg, seed):
    val = Values(seed)
    d, f, v, t = cfg["n_embd"], cfg["n_inner"], cfg["vocab_size"], cfg["n_positions"]
    w = {"transformer.wte.weight": val.tensor([v, d], 0.5), "transformer.wpe.weight": val.tensor([t, d], 0.3)}
    for l in range(cfg["n_layer"]):
        p = f"transformer.h.{l}."
        # Conv1D weights are stored [in, out]: y = x @ W + b.
        w[p + "ln_1.weight"] = val.tensor([d], 0.2, 1.0)
        w[p + "ln_1.bias"] = val.tensor([d], 0.1)
        w[p + "attn.c_attn.weight"] = val.tensor([d, 3 * d], 0.4)
        w[p + "attn.c_attn.bias"] = val.tensor([3 * d], 0.1)
        w[p + "attn.c_proj.weight"] = val.tensor([d, d], 0.4)
        w[p + "attn.c_proj.bias"] = val.tensor([d], 0.1)
        w[p + "ln_2.weight"] = val.tensor([d], 0.2, 1.0)
        w[p + "ln_2.bias"] = val.tensor([d], 0.1)
        w[p + "mlp.c_fc.weight"] = val.tensor([d, f], 0.4)
        w[p + "mlp.c_fc.bias"] = val.tensor([f], 0.1)
        w[p + "mlp.c_proj.weight"] = val.tensor([f, d], 0.3)
        w[p + "mlp.c_proj.bias"] = val.tensor([d], 0.1)
    w["transformer.ln_f.weight"] = val.tensor([d], 0.2, 1.0)
    w["transformer.ln_f.bias"] = val.tensor([d], 0.1)
    return w


def gpt2_logits(cfg, w, tokens):
    d, heads, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]
    ln = torch.nn.functional.layer_norm
    positions = torch.arange(tokens.shape[1])
    h = w["transformer.wte.weight"][tokens] + w["transformer.wpe.weight"][positions]
    for l in range(cfg["n_layer"]):
        p = f"transformer.h.{l}."
        x = ln(h, (d,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        q, k, v = (x @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]).split(d, dim=2)
        a = merge_heads(causal_attention(split_heads(q, heads), split_heads(k, heads), split_heads(v, heads)))
        h = h + a @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        x = ln(h, (d,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        m = gelu_new(x @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        h = h + m @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    h = ln(h, (d,), w["transformer.ln_f.weight"], w["transformer.ln_f.bias"], eps)
    return h @ w["transformer.wte.weight"].T  # tied head


# ---- files ----

DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.int32: "I32", torch.int64: "I64"}


def write_safetensors(path, tensors, metadata=None):
    """The safetensors layout: u64 little-endian header size, JSON header, data."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous()
        data = t.numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def make(name, cfg, weights_fn, logits_fn, seed):
    out = os.path.join(ROOT, name)
    os.makedirs(out, exist_ok=True)
    w = weights_fn(cfg, seed)
    tokens, targets = tokens_and_targets(seed + 1, cfg["vocab_size"])
    logits = logits_fn(cfg, w, tokens)
    supervised = targets >= 0
    count = int(supervised.sum())
    # meshtrain's loss: the sum over supervised targets over their count.
    ce = torch.nn.functional.cross_entropy(logits[supervised], targets[supervised], reduction="sum")
    loss = ce / count
    loss.backward()
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    write_safetensors(os.path.join(out, "model.safetensors"), {n: t.float() for n, t in w.items()},
                      {"format": "pt", "source": "scripts/make-golden-fixtures.py"})
    expected = {
        "tokens": tokens.int(),
        "targets": targets.int(),
        "loss": loss.detach().reshape(1),
        "count": torch.tensor([count], dtype=torch.int64),
        "logits": logits.detach(),
    }
    for n, t in w.items():
        expected["grad." + n] = t.grad
    write_safetensors(os.path.join(out, "expected.safetensors"), expected,
                      {"format": "pt", "source": "scripts/make-golden-fixtures.py"})
    print(f"{out}: loss {loss.item():.12f} over {count} targets, {len(w)} weights")


def main():
    torch.set_grad_enabled(True)
    make("llama", LLAMA, llama_weights, llama_logits, 1234)
    make("gpt2", GPT2, gpt2_weights, gpt2_logits, 5678)
    return 0


if __name__ == "__main__":
    sys.exit(main())
