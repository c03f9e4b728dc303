#!/usr/bin/python3
"""Write the golden fixtures for tests/test_model_golden.c.

A compact Qwen2 in plain PyTorch following transformers' modeling_qwen2.py
(RMSNorm, rotate_half RoPE with float32 inv_freq, GQA via repeat_kv, q/k/v bias,
SwiGLU MLP, untied LM head), evaluated in float64 on a packed batch of three
sequences (each sequence is its own causal attention block with positions from 0).

Outputs (not run by CI; rerun by hand with Debian's torch: /usr/bin/python3):
  tiny_qwen2/config.json, tiny_qwen2/model.safetensors   the weights (F32)
  tiny_qwen2_expected.safetensors                          batch + expected values (F32):
    batch.tokens [T], batch.seq_offsets [S+1], batch.out_rows [n], batch.out_targets [n]
    logits.rows [k] (indices into the output rows), logits [k, V]   temperature 1
    logp.t1, entropy.t1, logp.t07, entropy.t07 [n]
    loss.c, loss.d [n]   the loss sum(c logp) + sum(d entropy) at temperature 0.7
    grad.<hf name>       its gradient w.r.t. every parameter
    grad_norm [1]        the global L2 norm of that gradient
    adamw.<hf name>      parameters after clip_grad_norm_(1.0) and one AdamW step
                         (lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0.01)
  tiny_qwen2_value/config.json, tiny_qwen2_value/model.safetensors
                         the same trunk as a value model: Qwen2ForTokenClassification
                         with one label (verl's critic), score.weight [1, H], score.bias [1]
  tiny_qwen2_value_expected.safetensors                    for tests/test_value_head.c:
    batch.* as above, values [n] = score(final-normed hidden state) at the output rows,
    loss.c [n]           the loss sum(c values)
    grad.<hf name>       its gradient w.r.t. every parameter of the value model
Integers are stored as F32 (exact below 2^24) so every reader handles the file.
"""
import json
import math
import os
import struct

import torch

HERE = os.path.dirname(os.path.abspath(__file__))

CONFIG = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "vocab_size": 97,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "max_position_embeddings": 128,
    "rope_theta": 10000.0,
    "rms_norm_eps": 1e-6,
    "initializer_range": 0.02,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
    "attention_dropout": 0.0,
    "use_sliding_window": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "torch_dtype": "float32",
}
LENGTHS = [11, 1, 17]
PROMPT = [4, 1, 6]          # output rows: from prompt-1 to length-2 of each sequence
LOGIT_ROWS = [0, 5, 17]     # output rows whose full logits are stored
LR, WD, MAX_NORM = 1e-3, 0.01, 1.0


def param_shapes(c):
    """HF names and shapes in distflow's layout order (include/distflow/model.h)."""
    H, I, V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    q = c["num_attention_heads"] * c["head_dim"]
    kv = c["num_key_value_heads"] * c["head_dim"]
    out = [("model.embed_tokens.weight", (V, H))]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", (H,)),
                (p + "self_attn.q_proj.weight", (q, H)), (p + "self_attn.q_proj.bias", (q,)),
                (p + "self_attn.k_proj.weight", (kv, H)), (p + "self_attn.k_proj.bias", (kv,)),
                (p + "self_attn.v_proj.weight", (kv, H)), (p + "self_attn.v_proj.bias", (kv,)),
                (p + "self_attn.o_proj.weight", (H, q)),
                (p + "post_attention_layernorm.weight", (H,)),
                (p + "mlp.gate_proj.weight", (I, H)), (p + "mlp.up_proj.weight", (I, H)),
                (p + "mlp.down_proj.weight", (H, I))]
    out += [("model.norm.weight", (H,)), ("lm_head.weight", (V, H))]
    return out


def init_params(c, seed=1234):
    """Larger-than-HF scales (and non-trivial norms / biases) so every path matters."""
    g = torch.Generator().manual_seed(seed)
    params = {}
    for name, shape in param_shapes(c):
        if "layernorm" in name or name == "model.norm.weight":
            t = 1.0 + 0.2 * torch.randn(shape, generator=g)
        elif name.endswith(".bias"):
            t = 0.1 * torch.randn(shape, generator=g)
        elif "embed" in name:
            t = 0.8 * torch.randn(shape, generator=g)
        else:
            t = torch.randn(shape, generator=g) / math.sqrt(shape[1])
        # Round to float32 first: the fixture stores F32 and the engine reads that.
        params[name] = t.float().double().requires_grad_(True)
    return params


def rms_norm(x, w, eps):
    var = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(var + eps))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_cos_sin(c, L):
    """Qwen2RotaryEmbedding: inv_freq and the positions product in float32."""
    d = c["head_dim"]
    inv_freq = 1.0 / (c["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    freqs = torch.arange(L).float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1).double()
    return emb.cos(), emb.sin()


def layer(c, p, i, x):
    """One decoder layer on a single sequence x [L, H]."""
    pre = f"model.layers.{i}."
    L = x.shape[0]
    nh, nkv, d = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    h = rms_norm(x, p[pre + "input_layernorm.weight"], c["rms_norm_eps"])
    q = h @ p[pre + "self_attn.q_proj.weight"].T + p[pre + "self_attn.q_proj.bias"]
    k = h @ p[pre + "self_attn.k_proj.weight"].T + p[pre + "self_attn.k_proj.bias"]
    v = h @ p[pre + "self_attn.v_proj.weight"].T + p[pre + "self_attn.v_proj.bias"]
    q = q.view(L, nh, d).transpose(0, 1)
    k = k.view(L, nkv, d).transpose(0, 1)
    v = v.view(L, nkv, d).transpose(0, 1)
    cos, sin = rope_cos_sin(c, L)
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    k = k.repeat_interleave(nh // nkv, dim=0)    # repeat_kv
    v = v.repeat_interleave(nh // nkv, dim=0)
    s = (q @ k.transpose(1, 2)) * d ** -0.5
    mask = torch.triu(torch.ones(L, L, dtype=torch.bool), diagonal=1)
    s = s.masked_fill(mask, float("-inf"))
    a = torch.softmax(s, dim=-1) @ v              # [nh, L, d]
    a = a.transpose(0, 1).reshape(L, nh * d)
    x = x + a @ p[pre + "self_attn.o_proj.weight"].T
    h = rms_norm(x, p[pre + "post_attention_layernorm.weight"], c["rms_norm_eps"])
    gate = h @ p[pre + "mlp.gate_proj.weight"].T
    up = h @ p[pre + "mlp.up_proj.weight"].T
    return x + (torch.nn.functional.silu(gate) * up) @ p[pre + "mlp.down_proj.weight"].T


def final_hidden(c, p, tokens, offsets):
    """Final-normed hidden states of every packed row [T, H]."""
    outs = []
    for s in range(len(offsets) - 1):
        x = p["model.embed_tokens.weight"][tokens[offsets[s]:offsets[s + 1]]]
        for i in range(c["num_hidden_layers"]):
            x = layer(c, p, i, x)
        outs.append(rms_norm(x, p["model.norm.weight"], c["rms_norm_eps"]))
    return torch.cat(outs, dim=0)


def head(c, p, hid, rows, targets, temperature):
    """verl: logits / temperature, then log-prob of the target and the entropy."""
    logits = hid[rows] @ p["lm_head.weight"].T
    z = logits / temperature
    lse = torch.logsumexp(z, dim=-1)
    logp = z.gather(-1, targets[:, None])[:, 0] - lse
    ent = lse - (torch.softmax(z, dim=-1) * z).sum(-1)
    return logits, logp, ent


def value_head(p, hid, rows):
    """Qwen2ForTokenClassification (dropout off) logits[..., 0] at the output rows."""
    return (hid[rows] @ p["score.weight"].T + p["score.bias"])[:, 0]


def write_value_fixtures(c, weights, tokens, offsets, rows):
    """The trunk of `weights` with a score head instead of lm_head, its values and gradients."""
    vc = dict(c)
    vc["architectures"] = ["Qwen2ForTokenClassification"]
    vc["id2label"] = {"0": "LABEL_0"}
    vc["label2id"] = {"LABEL_0": 0}
    H = c["hidden_size"]
    g = torch.Generator().manual_seed(4321)
    p = {n: t.clone().requires_grad_(True) for n, t in weights.items() if n != "lm_head.weight"}
    p["score.weight"] = (torch.randn((1, H), generator=g) / math.sqrt(H)).float().double().requires_grad_(True)
    p["score.bias"] = (0.1 * torch.randn((1,), generator=g)).float().double().requires_grad_(True)
    values = value_head(p, final_hidden(vc, p, tokens, offsets), rows)
    cv = torch.randn(len(rows), generator=g).double()
    (cv * values).sum().backward()
    d = os.path.join(HERE, "tiny_qwen2_value")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(vc, f, indent=2)
        f.write("\n")
    st_write(os.path.join(d, "model.safetensors"), {n: t for n, t in p.items()}, {"format": "pt"})
    exp = {
        "batch.tokens": tokens.double(),
        "batch.seq_offsets": torch.tensor(offsets).double(),
        "batch.out_rows": rows.double(),
        "values": values,
        "loss.c": cv,
    }
    for n, t in p.items():
        exp["grad." + n] = t.grad
    st_write(os.path.join(HERE, "tiny_qwen2_value_expected.safetensors"), exp)
    print(f"value model: values[0]={float(values[0]):.6f}")


def st_write(path, tensors, metadata=None):
    """safetensors by hand: u64 header length, JSON header, raw little-endian data."""
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        data = t.detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    if metadata:
        header["__metadata__"] = metadata
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)


def main():
    torch.manual_seed(0)
    c = CONFIG
    p = init_params(c)
    weights = {n: t.detach().clone() for n, t in p.items()}
    g = torch.Generator().manual_seed(99)
    offsets = [0]
    for n in LENGTHS:
        offsets.append(offsets[-1] + n)
    T = offsets[-1]
    tokens = torch.randint(0, c["vocab_size"], (T,), generator=g)
    rows, targets = [], []
    for s, n in enumerate(LENGTHS):
        for t in range(PROMPT[s] - 1, n - 1):
            rows.append(offsets[s] + t)
            targets.append(int(tokens[offsets[s] + t + 1]))
    rows = torch.tensor(rows)
    targets = torch.tensor(targets)
    n_out = len(rows)

    hid = final_hidden(c, p, tokens, offsets)
    logits, logp1, ent1 = head(c, p, hid, rows, targets, 1.0)
    _, logp7, ent7 = head(c, p, hid, rows, targets, 0.7)
    cl = torch.randn(n_out, generator=g).double()
    dl = torch.randn(n_out, generator=g).double()
    loss = (cl * logp7).sum() + (dl * ent7).sum()
    loss.backward()

    names = [n for n, _ in param_shapes(c)]
    grads = {n: p[n].grad.detach().clone() for n in names}
    norm = torch.nn.utils.clip_grad_norm_([p[n] for n in names], MAX_NORM)
    opt = torch.optim.AdamW([p[n] for n in names], lr=LR, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=WD)
    opt.step()

    os.makedirs(os.path.join(HERE, "tiny_qwen2"), exist_ok=True)
    with open(os.path.join(HERE, "tiny_qwen2", "config.json"), "w") as f:
        json.dump(c, f, indent=2)
        f.write("\n")
    st_write(os.path.join(HERE, "tiny_qwen2", "model.safetensors"),
             {n: weights[n] for n in names}, {"format": "pt"})

    exp = {
        "batch.tokens": tokens.double(),
        "batch.seq_offsets": torch.tensor(offsets).double(),
        "batch.out_rows": rows.double(),
        "batch.out_targets": targets.double(),
        "logits.rows": torch.tensor(LOGIT_ROWS).double(),
        "logits": logits[LOGIT_ROWS],
        "logp.t1": logp1, "entropy.t1": ent1, "logp.t07": logp7, "entropy.t07": ent7,
        "loss.c": cl, "loss.d": dl,
        "grad_norm": norm.reshape(1),
    }
    for n in names:
        exp["grad." + n] = grads[n]
    for n in names:
        exp["adamw." + n] = p[n]
    st_write(os.path.join(HERE, "tiny_qwen2_expected.safetensors"), exp)
    print(f"T={T} n_out={n_out} grad_norm={float(norm):.6f} loss={float(loss):.6f}")
    write_value_fixtures(c, weights, tokens, offsets, rows)


if __name__ == "__main__":
    main()
