#!/usr/bin/env python3
"""PyTorch on the same GPU and shapes as bench/cuda_model.c: HF transformers' Qwen2ForCausalLM
(the model verl trains) at the Qwen2.5-0.5B shape with random weights, eager, SDPA attention.

  logprob  forward + verl's logprobs_from_logits / entropy_from_logits over the full logits
  update   forward, loss = -mean(logp), backward, clip_grad_norm_(1.0), AdamW(fused=True)
  prefill  model.generate of B prompts of P tokens, one new token (top-k 50 sampling, KV cache)
  decode   the same with N more new tokens (min_new_tokens = max_new_tokens): the extra time

in float32 with TF32 off (as distflow's float32) and under torch.autocast(bfloat16) with float32
master weights (the mixed precision verl's FSDP runs). Prints `torch_<metric>: value` lines,
medians of 7 timed calls after a warm-up, CUDA-synchronised.
Usage: python3 bench/torch_cuda_model.py [--tokens T (4096)] [--seq L (256)] [--layers N (24)]
       [--prompts B (64)] [--prompt-len P (256)] [--new N (128)]
(HF generate is the baseline at hand on the lent machine; vLLM, which verl's rollouts use, is not.)
The generation runs last: the weights are cast to bfloat16 for its bf16 line, as an inference
engine's dtype=bfloat16 loads them.
"""
import argparse
import contextlib
import statistics
import time

import torch
import torch.nn.functional as F


def time_s(fn):
    fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(7):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=256)
    ap.add_argument("--new", type=int, default=128)
    args = ap.parse_args()
    import transformers
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print(f"torch: {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.cuda.get_device_name()}")
    cfg = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864,
                      num_hidden_layers=args.layers, num_attention_heads=14,
                      num_key_value_heads=2, tie_word_embeddings=True, rope_theta=1e6,
                      max_position_embeddings=32768)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Qwen2ForCausalLM(cfg).float()
    print(f"torch_model: Qwen2ForCausalLM, attention {model.config._attn_implementation}, "
          f"{sum(p.numel() for p in model.parameters())} parameters")
    B, L = args.tokens // args.seq, args.seq
    ids = torch.randint(0, cfg.vocab_size, (B, L), device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, fused=True)

    def logprobs(ctx):
        with ctx:
            logits = model(input_ids=ids).logits[:, :-1].float()
        logp = torch.gather(F.log_softmax(logits, -1), -1, ids[:, 1:, None]).squeeze(-1)
        pd = F.softmax(logits, -1)
        ent = torch.logsumexp(logits, -1) - (pd * logits).sum(-1)
        return logp, ent

    for name, ctx in (("f32", contextlib.nullcontext),
                      ("bf16", lambda: torch.autocast("cuda", dtype=torch.bfloat16))):
        def lp():
            with torch.no_grad():
                logprobs(ctx())

        def up():
            logp, _ = logprobs(ctx())
            (-logp.mean()).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)

        s = time_s(lp)
        print(f"torch_logprob_{name}_ms: {s * 1e3:.3f}\ntorch_logprob_{name}_tokens_per_s: "
              f"{args.tokens / s:.0f}")
        s = time_s(up)
        print(f"torch_update_{name}_ms: {s * 1e3:.3f}\ntorch_update_{name}_tokens_per_s: "
              f"{args.tokens / s:.0f}")
    generation(model, cfg, args)
    print(f"torch_peak_mem_gib: {torch.cuda.max_memory_allocated() / 2**30:.1f}")


def generation(model, cfg, args):
    B, P, N = args.prompts, args.prompt_len, args.new
    prompts = torch.randint(0, cfg.vocab_size, (B, P), device="cuda")
    mask = torch.ones_like(prompts)
    for name, dtype in (("f32", torch.float32), ("bf16", torch.bfloat16)):
        model.to(dtype)

        def gen(n):
            with torch.no_grad():
                model.generate(prompts, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                               do_sample=True, top_k=50, pad_token_id=0)

        s_pf = time_s(lambda: gen(1))
        s_gen = time_s(lambda: gen(N + 1))
        print(f"torch_prefill_{name}_ms: {s_pf * 1e3:.3f}\ntorch_prefill_{name}_tokens_per_s: "
              f"{B * P / s_pf:.0f}")
        print(f"torch_decode_{name}_ms_per_step: {(s_gen - s_pf) / N * 1e3:.3f}\n"
              f"torch_decode_{name}_tokens_per_s: {B * N / (s_gen - s_pf):.0f}")


if __name__ == "__main__":
    main()
