#!/usr/bin/env python3
"""PyTorch on the same GPU, ops and shapes as bench/cuda_backend.c (the baseline its users run).

Eager PyTorch at its best for each op: cuBLAS matmuls (bf16 autocast-style operands, f32 with
TF32 off, as distflow's f32), F.rms_norm, F.silu(gate) * up, rotate_half RoPE, SDPA (causal,
GQA) in f32 and bf16, log_softmax + gather + entropy over full logits (verl's
logprobs_from_logits / entropy_from_logits), torch.optim.AdamW(fused=True).
Prints `torch_<metric>_ms: value` lines (median of 7 trials, each the mean of several calls,
timed with CUDA events after a warm-up) and the kernels PyTorch chose where it reports them.
Usage: python3 bench/torch_cuda_ops.py [--tokens T (4096)] [--quick]
"""
import argparse
import statistics

import torch
import torch.nn.functional as F


def time_ms(fn, reps):
    fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(7):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        torch.cuda.synchronize()
        out.append(a.elapsed_time(b) / reps)
    return statistics.median(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False  # f32 means f32, as distflow's
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda"
    print(f"torch: {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name()}")
    T, H, nh, nkv, hd, I, V = args.tokens, 896, 14, 2, 64, 4864, 151936
    G = 4096 if args.quick else 8192
    g = torch.Generator(device=dev).manual_seed(0)

    def rnd(*shape, dtype=torch.float32):
        return (torch.rand(*shape, device=dev, generator=g) * 2 - 1).to(dtype)

    A, B = rnd(G, G), rnd(G, G)
    Ah, Bh = A.bfloat16(), B.bfloat16()
    print(f"torch_gemm_bf16_{G}_ms: {time_ms(lambda: Ah @ Bh.T, 10):.4f}")
    print(f"torch_gemm_f32_{G}_ms: {time_ms(lambda: A @ B.T, 3):.4f}")
    del A, B, Ah, Bh

    x, w = rnd(T, H), rnd(H).abs() + 0.5
    print(f"torch_rmsnorm_fwd_ms: {time_ms(lambda: F.rms_norm(x, (H,), w, 1e-6), 20):.4f}")
    gate, up = rnd(T, I) * 3, rnd(T, I)
    print(f"torch_swiglu_fwd_ms: {time_ms(lambda: F.silu(gate) * up, 20):.4f}")
    L = min(T, 256)
    S = (T + L - 1) // L
    q = rnd(T, nh, hd)
    pos = torch.arange(T, device=dev) % L
    inv = 1.0 / (1e6 ** (torch.arange(0, hd, 2, device=dev).float() / hd))
    ang = pos[:, None].float() * inv[None]
    cos, sin = torch.cat([ang.cos()] * 2, -1)[:, None], torch.cat([ang.sin()] * 2, -1)[:, None]

    def rope():
        x1, x2 = q[..., : hd // 2], q[..., hd // 2:]
        return q * cos + torch.cat((-x2, x1), -1) * sin

    print(f"torch_rope_q_ms: {time_ms(rope, 20):.4f}")
    for dt, name in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        qb = rnd(S, nh, L, hd, dtype=dt).requires_grad_()
        kb, vb = rnd(S, nkv, L, hd, dtype=dt).requires_grad_(), rnd(S, nkv, L, hd, dtype=dt).requires_grad_()
        fwd = lambda: F.scaled_dot_product_attention(qb, kb, vb, is_causal=True, enable_gqa=True)
        print(f"torch_attention_fwd_{name}_ms: {time_ms(fwd, 10):.4f}")
        o = fwd()
        do = torch.ones_like(o)
        bwd = lambda: torch.autograd.grad(o, (qb, kb, vb), do, retain_graph=True)
        print(f"torch_attention_bwd_{name}_ms: {time_ms(bwd, 5):.4f}")
        del qb, kb, vb, o
    h, W = rnd(T, H), rnd(V, H) * 0.05
    tgt = (torch.arange(T, device=dev) * 7919) % V

    def lmhead():
        logits = h @ W.T
        lp = logits.log_softmax(-1)
        logp = lp.gather(-1, tgt[:, None])
        ent = torch.logsumexp(logits, -1) - (lp.exp() * logits).sum(-1)
        return logp, ent

    print(f"torch_lmhead_fwd_f32_ms: {time_ms(lmhead, 1 if args.quick else 3):.4f}")
    del h, W
    n = 494032768
    p = torch.nn.Parameter(rnd(n))
    p.grad = rnd(n)
    opt = torch.optim.AdamW([p], lr=1e-6, fused=True)
    print(f"torch_adamw_0.5b_ms: {time_ms(opt.step, 3):.4f}")


if __name__ == "__main__":
    main()
