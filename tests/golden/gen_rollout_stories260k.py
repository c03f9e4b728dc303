#!/usr/bin/python3
"""Write tests/golden/rollout_stories260k.json for tests/test_rollout_real.c.

Greedy continuations of a few prompts by Karpathy's pretrained stories260K
(llama2.c legacy .bin, layout in ../shared/data/models/FORMAT.md), computed in
float64 PyTorch with llama2.c's own conventions (interleaved-pair RoPE,
RMSNorm eps 1e-5, tied classifier), i.e. independently of the HF rotate_half
layout the C test converts the weights to.

For each prompt: the greedy tokens (stopping after BOS=1 / EOS=2 or at
MAX_NEW), their log-probs at temperature 1, and the margin between the best
and second-best logit at every step (the test needs margins well above float32
rounding for exact token agreement).

Not run by CI; rerun by hand with Debian's torch: /usr/bin/python3 gen_rollout_stories260k.py
"""
import json
import os
import struct

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.join(HERE, "..", "..", "..", "shared", "data", "models", "stories260K",
                   "stories260K.bin")
MAX_NEW = 40
PROMPTS = [[1], [1, 403, 407], [1, 365, 263, 1001 % 512, 280]]


def load(path):
    with open(path, "rb") as f:
        raw = f.read()
    dim, hidden, n_layers, n_heads, n_kv, vocab, seq_len = struct.unpack("<7i", raw[:28])
    w = torch.frombuffer(bytearray(raw[28:]), dtype=torch.float32).double()
    hs = dim // n_heads
    kv_dim = n_kv * hs
    shapes = [("emb", (vocab, dim)), ("rms_att", (n_layers, dim)),
              ("wq", (n_layers, dim, dim)), ("wk", (n_layers, kv_dim, dim)),
              ("wv", (n_layers, kv_dim, dim)), ("wo", (n_layers, dim, dim)),
              ("rms_ffn", (n_layers, dim)), ("w1", (n_layers, hidden, dim)),
              ("w2", (n_layers, dim, hidden)), ("w3", (n_layers, hidden, dim)),
              ("rms_final", (dim,))]
    p, off = {}, 0
    for name, shape in shapes:
        n = 1
        for s in shape:
            n *= s
        p[name] = w[off:off + n].reshape(shape)
        off += n
    cfg = dict(dim=dim, hidden=hidden, n_layers=n_layers, n_heads=n_heads, n_kv=n_kv,
               vocab=vocab, hs=hs)
    return cfg, p


def rmsnorm(x, w):
    return x * w / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5)


def rope_interleaved(x, n_heads, hs):
    """llama2.c run.c: rotate consecutive pairs (x[i], x[i+1]) of each head."""
    T = x.shape[0]
    x = x.reshape(T, n_heads, hs // 2, 2)
    i = torch.arange(0, hs, 2, dtype=torch.float64)
    freq = 1.0 / (10000.0 ** (i / hs))
    ang = torch.arange(T, dtype=torch.float64)[:, None] * freq[None, :]
    c, s = torch.cos(ang)[:, None, :], torch.sin(ang)[:, None, :]
    a, b = x[..., 0], x[..., 1]
    out = torch.stack([a * c - b * s, a * s + b * c], dim=-1)
    return out.reshape(T, n_heads * hs)


def logits_last(cfg, p, toks):
    T = len(toks)
    x = p["emb"][torch.tensor(toks)]
    nh, nkv, hs = cfg["n_heads"], cfg["n_kv"], cfg["hs"]
    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    for l in range(cfg["n_layers"]):
        h = rmsnorm(x, p["rms_att"][l])
        q = rope_interleaved(h @ p["wq"][l].T, nh, hs).reshape(T, nh, hs)
        k = rope_interleaved(h @ p["wk"][l].T, nkv, hs).reshape(T, nkv, hs)
        v = (h @ p["wv"][l].T).reshape(T, nkv, hs)
        rep = nh // nkv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        att = torch.einsum("thd,shd->hts", q, k) / hs ** 0.5 + mask
        o = torch.einsum("hts,shd->thd", torch.softmax(att, -1), v).reshape(T, nh * hs)
        x = x + o @ p["wo"][l].T
        h = rmsnorm(x, p["rms_ffn"][l])
        g = h @ p["w1"][l].T
        x = x + (torch.nn.functional.silu(g) * (h @ p["w3"][l].T)) @ p["w2"][l].T
    return rmsnorm(x[-1], p["rms_final"]) @ p["emb"].T


def main():
    cfg, p = load(BIN)
    out = {"max_new_tokens": MAX_NEW, "stop_ids": [1, 2], "cases": []}
    for prompt in PROMPTS:
        toks, gen, logps, margins = list(prompt), [], [], []
        for _ in range(MAX_NEW):
            z = logits_last(cfg, p, toks)
            top2 = torch.topk(z, 2).values
            t = int(torch.argmax(z))
            gen.append(t)
            logps.append(float(torch.log_softmax(z, -1)[t]))
            margins.append(float(top2[0] - top2[1]))
            toks.append(t)
            if t in (1, 2):
                break
        out["cases"].append({"prompt": prompt, "tokens": gen, "log_probs": logps,
                             "min_margin": min(margins)})
        print(prompt, len(gen), "min margin %.3g" % min(margins))
    with open(os.path.join(HERE, "rollout_stories260k.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
