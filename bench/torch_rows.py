#!/usr/bin/python3
"""PyTorch side of bench/rows.c (make bench, docs/performance.md): the same row, shape and
work as the engine's, run the way PyTorch users run it on a CPU.

Rows (one per process, so ru_maxrss is the row's own peak):
  gemm     C = A B^T on large square float32 / bf16 operands: torch.matmul (f32: the BLAS
           torch links; bf16: oneDNN)
  prefill  B prompts of P tokens through a minimal Qwen2 that fills a KV cache, logits of
           the last position only, one sampled token (what HF generate's first step does)
  decode   B sequences (B / n prompts, each prefilled once and its cache repeated n times)
           decoded together for G tokens after that prefill: HF generate's
           eager loop (per-layer K/V grown with torch.cat, repeat_kv for GQA, softmax
           over the last position's float32 logits, torch.multinomial); decode time only
  logprob  no-grad forward of packed sequences, log-prob of each next token and entropy
           (bench/torch_model_step.py's model: packed Linear rows, padded attention)
With --experts E (a qwen3_moe shape of bench_rows) the model is Qwen3-MoE (bench/torch_moe.py:
Qwen3's attention with q/k norms, HF's Qwen3MoeSparseMoeBlock on every layer) in every row.
  update   forward, loss = -mean logp + 0.01 mean entropy, backward, clip_grad_norm_(1),
           AdamW step
--dtype f32: float32 everything. --dtype bf16: the inference rows (prefill, decode,
logprob) hold bf16 weights (from_pretrained(torch_dtype=bfloat16)) with float32
log-softmax; update runs under torch.autocast("cpu", bfloat16) with float32 master weights
and AdamW state (the mixed precision of verl's FSDP actor).

Prints `torch_<metric>: value` lines (per second: medians over --iters timed runs after
--warmup; per CPU-second: CPU time of all threads, averaged over the same runs) and
`torch_info_*` lines: the BLAS library actually mapped into this process, torch's build
configuration, and the oneDNN implementation that ran a bf16 / f32 Linear (oneDNN verbose).
"""
import argparse
import os
import resource
import statistics
import subprocess
import sys
import time


def parse():
    ap = argparse.ArgumentParser()
    ap.add_argument("row", choices=["gemm", "prefill", "decode", "logprob", "update", "info"])
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    for k, d in [("hidden", 256), ("layers", 4), ("heads", 4), ("kv-heads", 2), ("inter", 512),
                 ("vocab", 600), ("tokens", 2048), ("batch", 8), ("prompt", 64), ("gen", 16),
                 ("n", 2048), ("iters", 3), ("warmup", 1), ("threads", 2)]:
        ap.add_argument("--" + k, type=int, default=d)
    ap.add_argument("--tied", action="store_true")
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    # Qwen3-MoE (bench/torch_moe.py): --experts E > 0 makes every layer Qwen3MoeDecoderLayer's
    # (q/k norms, no biases, the sparse block: top --topk of E experts of width --moe-inter,
    # renormalised with --norm-topk); --inter is then unused
    ap.add_argument("--experts", type=int, default=0)
    ap.add_argument("--topk", type=int, default=8)
    ap.add_argument("--moe-inter", type=int, default=0)
    ap.add_argument("--norm-topk", action="store_true")
    a = ap.parse_args()
    if a.experts and not (0 < a.topk <= a.experts and a.moe_inter > 0):
        ap.error("--experts needs 0 < --topk <= --experts and --moe-inter > 0")
    return a


ARGS = parse()
# OpenBLAS (pthread build) and OpenMP size their pools when loaded: set them before torch.
os.environ.setdefault("OPENBLAS_NUM_THREADS", str(ARGS.threads))
os.environ.setdefault("OMP_NUM_THREADS", str(ARGS.threads))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_model_step as tms  # noqa: E402


def median_s(fn, iters, warmup):
    """Median wall seconds of fn over iters runs after warmup, mean CPU seconds (all threads
    of the process: the work, whatever the waiting on a shared machine), fastest run."""
    for _ in range(warmup):
        fn()
    out, c0 = [], time.process_time()
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out), (time.process_time() - c0) / iters, min(out)


def report(name, work, wall_s, cpu_s, unit="tokens"):
    print(f"torch_{name}_{unit}_per_s: {work / wall_s:.1f}")
    print(f"torch_{name}_{unit}_per_cpu_s: {work / cpu_s:.1f}")


# ---- what ran: BLAS, build, oneDNN implementations ------------------------------------

def mapped_blas():
    """The BLAS / LAPACK shared objects mapped into this process (after a float32 matmul)."""
    torch.ones(64, 64) @ torch.ones(64, 64)
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            p = line.split()[-1]
            if "blas" in p or "lapack" in p:
                libs.add(os.path.realpath(p))
    return sorted(libs) or ["none mapped"]


def onednn_impl(dtype):
    """oneDNN's implementation string for a [256, 896] x [896, 896]^T Linear in `dtype`, from
    oneDNN's verbose output in a child process (the library prints it with C stdio)."""
    code = ("import torch, torch.nn.functional as F; torch.set_num_threads(%d); "
            "F.linear(torch.randn(256, 896).to(torch.%s), torch.randn(896, 896).to(torch.%s))"
            % (ARGS.threads, dtype, dtype))
    env = dict(os.environ, ONEDNN_VERBOSE="1", DNNL_VERBOSE="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    for line in out.stdout.splitlines():
        f = line.split(",")
        if len(f) > 4 and f[1] == "exec" and f[3] in ("matmul", "inner_product"):
            return f"oneDNN {f[3]} {f[4]}"
    return "not oneDNN (ATen: the BLAS above)"


def print_info():
    cfg = torch.__config__.show()
    keep = [l.strip(" -") for l in cfg.splitlines()
            if "MKL-DNN" in l or "CPU capability" in l or "OpenMP" in l]
    blas = [kv for kv in cfg.replace(",", " ").split() if kv.startswith("BLAS_INFO=")]
    print(f"torch_info_version: {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"torch_info_build: {'; '.join(keep + blas)}")
    print(f"torch_info_blas_mapped: {' '.join(mapped_blas())}")
    alt = "/usr/lib/x86_64-linux-gnu/libblas.so.3"
    if os.path.exists(alt):
        print(f"torch_info_libblas_alternative: {os.path.realpath(alt)}")
    print(f"torch_info_mkldnn: available {torch.backends.mkldnn.is_available()}")
    print(f"torch_info_linear_f32: {onednn_impl('float32')}")
    print(f"torch_info_linear_bf16: {onednn_impl('bfloat16')}")


# ---- rows ---------------------------------------------------------------------------

def row_gemm(a):
    dt = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    g = torch.Generator().manual_seed(1)
    A = torch.randn(a.n, a.n, generator=g).to(dt)
    B = torch.randn(a.n, a.n, generator=g).to(dt)
    s, c, best = median_s(lambda: A @ B.t(), a.iters, a.warmup)
    report("gemm", 2.0 * a.n ** 3 / 1e9, s, c, unit="gflop")
    print(f"torch_gemm_best_gflop_per_s: {2.0 * a.n ** 3 / 1e9 / best:.1f}")


class KVModel:
    """Qwen2 for generation, as HF's Qwen2ForCausalLM computes it in eager mode (Qwen3-MoE's
    Qwen3MoeForCausalLM with --experts: q/k norms and the sparse block, bench/torch_moe.py)."""

    def __init__(self, a, dtype):
        self.p = tms.build(a)
        tms.cast_weights(self.p, dtype)
        self.a, self.dtype = a, dtype
        hd = a.hidden // a.heads
        self.inv = 1.0 / (a.rope_theta ** (torch.arange(0, hd, 2).float() / hd))

    def rope(self, pos):
        fr = pos.float()[:, None] * self.inv[None]
        emb = torch.cat((fr, fr), -1)
        return emb.cos().to(self.dtype), emb.sin().to(self.dtype)  # [L, hd]

    def forward(self, ids, cache, start):
        """ids [B, L] at positions start.. ; cache: per layer [k, v] of [B, nkv, S, hd] or None.
        Returns float32 logits of the last position [B, V]."""
        a = self.a
        B, L = ids.shape
        nh, nkv, hd = a.heads, a.kv_heads, a.hidden // a.heads
        cos, sin = self.rope(torch.arange(start, start + L))
        x = self.p["embed"][ids]
        for i, l in enumerate(self.p["layers"]):
            h = tms.rms(x, l["ln1"])
            q, k, v = (t.transpose(1, 2) for t in tms.qk_heads(h, l, a))  # [B, n, L, hd]
            q = q * cos + tms.rotate_half(q) * sin
            k = k * cos + tms.rotate_half(k) * sin
            if cache[i] is not None:  # DynamicCache.update: concatenate along the sequence
                k = torch.cat((cache[i][0], k), dim=2)
                v = torch.cat((cache[i][1], v), dim=2)
            cache[i] = [k, v]
            kr = k.repeat_interleave(nh // nkv, dim=1)  # repeat_kv
            vr = v.repeat_interleave(nh // nkv, dim=1)
            s = (q @ kr.transpose(-1, -2)) * (hd ** -0.5)
            if L > 1:
                S = k.shape[2]
                causal = torch.ones(L, S, dtype=torch.bool).tril(S - L)
                s = s.masked_fill(~causal, float("-inf"))
            o = torch.softmax(s.float(), dim=-1).to(q.dtype) @ vr
            x = x + F.linear(o.transpose(1, 2).reshape(B, L, nh * hd), l["wo"])
            h = tms.rms(x, l["ln2"])
            x = x + tms.mlp(h, l, a)
        h = tms.rms(x[:, -1], self.p["norm"])
        return F.linear(h, self.p["lm_head"]).float()


def sample(logits, g):
    return torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=g)


def row_generate(a, decode):
    """prefill: a.batch prompts. decode: a.batch // a.n prompts prefilled once, their cache
    and first token repeated n times (the engine's prompt sharing; HF generate would prefill
    every copy, which only the untimed part would pay), then a.gen - 1 decode steps."""
    dt = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    m = KVModel(a, dt)
    g = torch.Generator().manual_seed(5)
    n = a.n if decode else 1
    ids = torch.randint(0, min(a.vocab, 512), (a.batch // n, a.prompt), generator=g)
    t_pre, t_dec, c_pre, c_dec = [], [], [], []
    with torch.no_grad():
        for it in range(a.warmup + a.iters):
            cache = [None] * a.layers
            c0 = time.process_time()
            t0 = time.perf_counter()
            logits = m.forward(ids, cache, 0)
            if n > 1:
                logits = logits.repeat_interleave(n, dim=0)
                cache = [[k.repeat_interleave(n, dim=0), v.repeat_interleave(n, dim=0)]
                         for k, v in cache]
            tok = sample(logits, g)
            t1, c1 = time.perf_counter(), time.process_time()
            if decode:
                for step in range(1, a.gen):
                    tok = sample(m.forward(tok, cache, a.prompt + step - 1), g)
            t2, c2 = time.perf_counter(), time.process_time()
            if it >= a.warmup:
                t_pre.append(t1 - t0)
                t_dec.append(t2 - t1)
                c_pre.append(c1 - c0)
                c_dec.append(c2 - c1)
    if decode:
        report("decode", a.batch * (a.gen - 1), statistics.median(t_dec), statistics.mean(c_dec))
    else:
        report("prefill", a.batch * a.prompt, statistics.median(t_pre), statistics.mean(c_pre))


def row_logprob(a):
    bt = tms.Batch(a)
    p = tms.build(a)
    if a.dtype == "bf16":  # inference weights in bf16; log-softmax over float32 logits
        tms.cast_weights(p, torch.bfloat16)
        bt.cos, bt.sin = bt.cos.to(torch.bfloat16), bt.sin.to(torch.bfloat16)

    def run():
        with torch.no_grad():
            tms.forward(p, bt, a, float_logits=True)

    s, c, _ = median_s(run, a.iters, a.warmup)
    report("logprob", a.tokens, s, c)


def row_update(a):
    bt = tms.Batch(a)
    p = tms.build(a)
    ps = tms.params(p)
    opt = torch.optim.AdamW(ps, lr=1e-4, weight_decay=0.01)
    ctx = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if a.dtype == "bf16" else None

    def run():
        opt.zero_grad(set_to_none=False)
        if ctx:
            with ctx():
                logp, ent = tms.forward(p, bt, a, float_logits=True)
        else:
            logp, ent = tms.forward(p, bt, a)
        loss = -logp.mean() + 0.01 * ent.mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(ps, 1.0)
        opt.step()

    s, c, _ = median_s(run, a.iters, a.warmup)
    report("update", a.tokens, s, c)


def main():
    a = ARGS
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    print_info()
    if a.row == "gemm":
        row_gemm(a)
    elif a.row in ("prefill", "decode"):
        row_generate(a, a.row == "decode")
    elif a.row == "logprob":
        row_logprob(a)
    elif a.row == "update":
        row_update(a)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(f"torch_peak_rss_mib: {rss:.1f}")


if __name__ == "__main__":
    main()
