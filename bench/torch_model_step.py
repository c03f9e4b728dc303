#!/usr/bin/python3
"""PyTorch baseline for bench/model_step.c: the same Qwen2 config and workload (and the model of
bench/torch_rows.py's logprob / update rows, Qwen3-MoE there with --experts: bench/torch_moe.py).

Linear layers run on the packed [T, hidden] rows (no padding there); attention
gathers each sequence into a padded [B, heads, Lmax, head_dim] batch with a
causal + padding mask (what eager HF attention does without flash-attn); the LM
head is applied to the scored rows only. Loss: mean NLL + 0.01 * mean entropy.
Prints `metric: value` lines that model_step.c parses: medians over --iters steps after
--warmup, CPU seconds of all threads averaged over the same steps.

--lora R: LoRA as PEFT's LoraConfig(r=R, lora_alpha=2R, target_modules="all-linear",
lora_dropout=0) runs it, unmerged: every q/k/v/o/gate/up/down Linear computes
y = x W^T + b + s (x A^T) B^T with s = alpha / r, A [r, in] kaiming-uniform(a=sqrt(5)), B [out, r]
zero; W, biases, embeddings, norms and the LM head frozen; clipping and AdamW over A and B only.
Written here with torch alone (PEFT is not a Debian package). Metrics are then torch_lora_*.
"""
import argparse
import math
import random
import resource
import statistics
import time

import torch
import torch.nn.functional as F


def build(args):
    if getattr(args, "experts", 0):  # Qwen3-MoE (torch_rows.py --experts): bench/torch_moe.py
        import torch_moe
        return torch_moe.build(args)
    g = torch.Generator().manual_seed(1)
    H, I, V, nh, nkv = args.hidden, args.inter, args.vocab, args.heads, args.kv_heads
    hd = H // nh

    def w(*shape):
        return (torch.randn(*shape, generator=g) * 0.02).requires_grad_(True)

    p = {"embed": w(V, H), "norm": torch.ones(H, requires_grad=True), "layers": []}
    for _ in range(args.layers):
        p["layers"].append({
            "ln1": torch.ones(H, requires_grad=True), "ln2": torch.ones(H, requires_grad=True),
            "wq": w(nh * hd, H), "bq": torch.zeros(nh * hd, requires_grad=True),
            "wk": w(nkv * hd, H), "bk": torch.zeros(nkv * hd, requires_grad=True),
            "wv": w(nkv * hd, H), "bv": torch.zeros(nkv * hd, requires_grad=True),
            "wo": w(H, nh * hd), "wg": w(I, H), "wu": w(I, H), "wd": w(H, I)})
    p["lm_head"] = p["embed"] if args.tied else w(V, H)
    return p


# The LoRA targets: PEFT module name -> weight key in a layer's dict.
LORA_TARGETS = {"q_proj": "wq", "k_proj": "wk", "v_proj": "wv", "o_proj": "wo",
                "gate_proj": "wg", "up_proj": "wu", "down_proj": "wd"}


def add_lora(p, r, alpha):
    """Freeze every base tensor and give each target an adapter, as PEFT's LoRA Linear makes it:
    lora_A kaiming_uniform_(a=sqrt(5)) (reset_lora_parameters), lora_B zeros."""
    for t in params(p):
        t.requires_grad_(False)
    torch.manual_seed(2)
    p["lora_scale"] = alpha / r
    for l in p["layers"]:
        l["lora"] = {}
        for key in LORA_TARGETS.values():
            out_f, in_f = l[key].shape
            a = torch.empty(r, in_f)
            torch.nn.init.kaiming_uniform_(a, a=math.sqrt(5))
            l["lora"][key] = (a.requires_grad_(True), torch.zeros(out_f, r, requires_grad=True))


def layer_tensors(l):
    """A layer's base tensors (a Qwen3-MoE layer's experts flattened, the LoRA adapters out)."""
    for k, t in l.items():
        if k == "experts":
            for e in t:
                yield from e.values()
        elif k != "lora":
            yield t


def params(p):
    out = [p["embed"], p["norm"]] + [t for l in p["layers"] for t in layer_tensors(l)]
    if p["lm_head"] is not p["embed"]:
        out.append(p["lm_head"])
    return out


def cast_weights(p, dtype):
    """Inference weights in dtype, detached (from_pretrained(torch_dtype=...)), in place."""
    with torch.no_grad():
        for l in p["layers"]:
            for k in list(l):
                if k == "experts":
                    l[k] = [{n: t.detach().to(dtype) for n, t in e.items()} for e in l[k]]
                elif k != "lora":
                    l[k] = l[k].detach().to(dtype)
        tied = p["lm_head"] is p["embed"]
        p["embed"] = p["embed"].detach().to(dtype)
        p["lm_head"] = p["embed"] if tied else p["lm_head"].detach().to(dtype)
        p["norm"] = p["norm"].detach().to(dtype)


def mlp(h, l, args, s_lora=1.0):
    """The layer's MLP on rows h: SwiGLU (Qwen2MLP), or Qwen3-MoE's sparse block on a layer
    with a router (bench/torch_moe.py, HF's Qwen3MoeSparseMoeBlock)."""
    if "router" in l:
        import torch_moe
        return torch_moe.moe_block(h, l, args)
    m = F.silu(linear(h, l, "wg", None, s_lora)) * linear(h, l, "wu", None, s_lora)
    return linear(m, l, "wd", None, s_lora)


def qk_heads(h, l, args, s_lora=1.0):
    """q [.., nh, hd], k and v [.., nkv, hd] of rows h: Qwen2's biased projections, or Qwen3's
    unbiased ones with q_norm / k_norm over each head (Qwen3Attention: before RoPE)."""
    nh, nkv = args.heads, args.kv_heads
    hd = args.hidden // nh
    lead = h.shape[:-1]
    q = linear(h, l, "wq", l.get("bq"), s_lora).view(*lead, nh, hd)
    k = linear(h, l, "wk", l.get("bk"), s_lora).view(*lead, nkv, hd)
    v = linear(h, l, "wv", l.get("bv"), s_lora).view(*lead, nkv, hd)
    if "q_norm" in l:
        q, k = rms(q, l["q_norm"]), rms(k, l["k_norm"])
    return q, k, v


def trainable(p):
    """What the optimizer steps: the adapters with LoRA, else every tensor."""
    if "lora_scale" in p:
        return [t for l in p["layers"] for ab in l["lora"].values() for t in ab]
    return params(p)


def linear(h, l, key, bias=None, scale=1.0):
    """F.linear through layer l's weight `key`, plus its adapter where it has one (PEFT's
    lora.Linear.forward: base_layer(x) + lora_B(lora_A(dropout(x))) * scaling)."""
    y = F.linear(h, l[key], bias)
    if "lora" in l:
        a, b = l["lora"][key]
        y = y + F.linear(F.linear(h, a), b) * scale
    return y


def rms(x, w, eps=1e-6):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Batch:
    def __init__(self, args):
        rnd = random.Random(7)
        T, lens = args.tokens, []
        while sum(lens) < T:
            lens.append(min(rnd.randint(64, 128), T - sum(lens)))
        self.T, self.B, self.Lmax = T, len(lens), max(lens)
        self.tokens = torch.randint(0, args.vocab, (T,), generator=torch.Generator().manual_seed(3))
        off = [0]
        for n in lens:
            off.append(off[-1] + n)
        # packed row -> (b, position) in the padded attention layout
        b_idx = torch.cat([torch.full((n,), i) for i, n in enumerate(lens)])
        pos = torch.cat([torch.arange(n) for n in lens])
        self.flat = b_idx * self.Lmax + pos
        self.pos = pos
        valid = torch.zeros(self.B, self.Lmax, dtype=torch.bool)
        valid.view(-1)[self.flat] = True
        causal = torch.tril(torch.ones(self.Lmax, self.Lmax, dtype=torch.bool))
        self.mask = (causal[None] & valid[:, None, :])[:, None]  # [B, 1, L, L]
        rows = [off[s] + t for s, n in enumerate(lens) for t in range(n - 1)]
        self.rows = torch.tensor(rows)
        self.targets = self.tokens[self.rows + 1]
        d = args.hidden // args.heads
        inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2).float() / d))
        fr = self.pos.float()[:, None] * inv[None]
        emb = torch.cat((fr, fr), -1)
        self.cos, self.sin = emb.cos()[:, None], emb.sin()[:, None]  # [T, 1, d]


def forward(p, bt, args, float_logits=False):
    """float_logits: log-softmax over float32 logits (under bf16 weights or autocast)."""
    nh, nkv = args.heads, args.kv_heads
    hd = args.hidden // nh
    T, B, L = bt.T, bt.B, bt.Lmax
    s_lora = p.get("lora_scale", 1.0)
    x = p["embed"][bt.tokens]
    for l in p["layers"]:
        h = rms(x, l["ln1"])
        q, k, v = qk_heads(h, l, args, s_lora)
        q = q * bt.cos + rotate_half(q) * bt.sin
        k = k * bt.cos + rotate_half(k) * bt.sin

        def pad(t, n):
            out = t.new_zeros(B * L, n, hd)
            out = out.index_copy(0, bt.flat, t)
            return out.view(B, L, n, hd).transpose(1, 2)

        qp, kp, vp = pad(q, nh), pad(k, nkv), pad(v, nkv)
        kp = kp.repeat_interleave(nh // nkv, dim=1)
        vp = vp.repeat_interleave(nh // nkv, dim=1)
        s = (qp @ kp.transpose(-1, -2)) * (hd ** -0.5)
        s = s.masked_fill(~bt.mask, float("-inf"))
        a = torch.softmax(s, dim=-1) @ vp                       # [B, nh, L, hd]
        a = a.transpose(1, 2).reshape(B * L, nh * hd)[bt.flat]  # back to packed rows
        x = x + linear(a, l, "wo", None, s_lora)
        h = rms(x, l["ln2"])
        x = x + mlp(h, l, args, s_lora)
    hf = rms(x[bt.rows], p["norm"])
    z = F.linear(hf, p["lm_head"])
    if float_logits:
        z = z.float()
    logp_all = torch.log_softmax(z, dim=-1)
    logp = logp_all.gather(-1, bt.targets[:, None])[:, 0]
    ent = -(logp_all.exp() * logp_all).sum(-1)
    return logp, ent


def main():
    ap = argparse.ArgumentParser()
    for k, d in [("hidden", 256), ("layers", 4), ("heads", 4), ("kv-heads", 2), ("inter", 512),
                 ("vocab", 600), ("tokens", 8192), ("iters", 5), ("warmup", 1), ("threads", 2)]:
        ap.add_argument("--" + k, type=int, default=d)
    ap.add_argument("--tied", action="store_true")
    ap.add_argument("--lora", type=int, default=0, help="adapter rank R (alpha 2R, all-linear)")
    args = ap.parse_args()
    if args.lora < 0 or args.iters < 1:
        ap.error("--lora must be >= 0 and --iters >= 1")
    torch.set_num_threads(args.threads)
    p = build(args)
    if args.lora:
        add_lora(p, args.lora, 2.0 * args.lora)
    bt = Batch(args)
    ps = trainable(p)
    opt = torch.optim.AdamW(ps, lr=1e-4, weight_decay=0.01)
    t_fwd, t_step, t_opt, c_fwd, c_step = [], [], [], 0.0, 0.0
    for it in range(-args.warmup, args.iters):
        t0, c0 = time.perf_counter(), time.process_time()
        with torch.no_grad():
            forward(p, bt, args)
        t1, c1 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=False)
        logp, ent = forward(p, bt, args)
        loss = -logp.mean() + 0.01 * ent.mean()
        loss.backward()
        t2, c2 = time.perf_counter(), time.process_time()
        torch.nn.utils.clip_grad_norm_(ps, 1.0)
        opt.step()
        t3 = time.perf_counter()
        if it >= 0:
            t_fwd.append(t1 - t0)
            t_step.append(t2 - t1)
            t_opt.append(t3 - t2)
            c_fwd += (c1 - c0) / args.iters
            c_step += (c2 - c1) / args.iters
    pre = "torch_lora_" if args.lora else "torch_"
    med = statistics.median
    print(f"{pre}trainable_params: {sum(t.numel() for t in ps)}")
    print(f"{pre}forward_tokens_per_s: {args.tokens / med(t_fwd):.0f}")
    print(f"{pre}fwd_bwd_tokens_per_s: {args.tokens / med(t_step):.0f}")
    print(f"{pre}adamw_ms: {1e3 * med(t_opt):.2f}")
    print(f"{pre}step_ms: {1e3 * (med(t_step) + med(t_opt)):.2f}")
    print(f"{pre}forward_cpu_s_per_step: {c_fwd:.3f}")
    print(f"{pre}fwd_bwd_cpu_s_per_step: {c_step:.3f}")
    print(f"{pre}peak_rss_mib: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0:.1f}")


if __name__ == "__main__":
    main()
