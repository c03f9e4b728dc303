#!/usr/bin/python3
"""Write the fixtures of tests/test_golden_step.c: one GRPO step and one PPO (GAE) step through
the DAG worker, every value computed here, independently of distflow, in float64.

The models are tests/golden/tiny_qwen2 (the actor, and the reference) and tiny_qwen2_value (the
critic), read from their files; the float64 Qwen2 forward is gen_golden.py's. What this adds is
the RL step around it, written from verl's definitions (core_algos.py at commit
012be9d9dcb7c38499f23616142870d2682757fc: compute_grpo_outcome_advantage,
compute_gae_advantage_return + masked_whiten, compute_policy_loss (vanilla, dual clip), kl_penalty
low_var_kl, agg_loss, compute_value_loss) and torch's clip_grad_norm_ and AdamW.

The rollout is fixed: the prompts of train.jsonl rendered with the ChatML template and encoded
with the character-level tokenizer written here (97 ids, one per character: the vocabulary of
tiny_qwen2), and twelve fixed responses (4 per prompt). The reward is the share of digits in the
decoded response (tests/testutil.h's df_test_digit_share, registered as golden/digits by the
test). After the reference log-probs the test's node shifts old_log_probs, ref_log_prob and (PPO)
values by the fixed `perturb.*` amounts, as a batch from a staler policy, an older reference and
an older critic would hold them, so that one optimizer step already clips ratios (both sides and
the dual clip), has a KL loss with a non-zero gradient and clips values.

Outputs (not run by CI; rerun by hand with Debian's torch, `apt-get install python3-torch`:
/usr/bin/python3 tests/golden/gen_rl_step.py; the outputs change only if this file or the models do):
  rl_step/tokenizer.json, rl_step/tokenizer_config.json   the tokenizer (data.tokenizer)
  rl_step/train.jsonl                                    the three prompts
  rl_step/grpo.json, rl_step/ppo.json                    config overrides, token ids,
      perturbations, expected batch columns (flat over response tokens), per-token gradient norms
      for the test's error bounds, and the step's metrics
  rl_step/grpo_grad.safetensors, rl_step/ppo_grad.safetensors
      actor.<hf name> (and critic.<hf name>): the gradient of the step's loss before clipping (F32);
      the AdamW update follows from it in closed form (grad_and_adamw)
"""
import json
import math
import os
import struct

import torch

import gen_golden as gg

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "rl_step")

# ---- tokenizer: one id per character -----------------------------------------------------------

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
EOS = 2
CHARS = ["\n", " "] + [chr(b) for b in range(33, 127) if chr(b) not in "`~"]
assert len(SPECIALS) + len(CHARS) == gg.CONFIG["vocab_size"]
CHAT_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                 "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
                 "{{ '<|im_start|>assistant\\n' }}{% endif %}")


def bytes_to_unicode():
    """GPT-2's byte-level alphabet: the vocabulary form of each byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def char_id(ch):
    return len(SPECIALS) + CHARS.index(ch)


def write_tokenizer():
    b2u = bytes_to_unicode()
    vocab = {b2u[ord(ch)]: char_id(ch) for ch in CHARS}
    added = [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, s in enumerate(SPECIALS)]
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                  "vocab": vocab, "merges": []},
    }
    cfg = {
        "add_bos_token": False, "bos_token": None, "eos_token": SPECIALS[EOS],
        "pad_token": SPECIALS[0], "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False, "model_max_length": 128,
        "tokenizer_class": "Qwen2Tokenizer",
        "added_tokens_decoder": {str(a["id"]): {k: v for k, v in a.items() if k != "id"} for a in added},
    }
    for name, obj in (("tokenizer.json", tok), ("tokenizer_config.json", cfg)):
        with open(os.path.join(OUT, name), "w") as f:
            json.dump(obj, f, indent=2, ensure_ascii=False)
            f.write("\n")


def encode_chatml(content):
    """The ChatML rendering of one user message with the generation prompt, id by id."""
    ids = [1] + [char_id(c) for c in "user\n" + content] + [2, char_id("\n"), 1]
    return ids + [char_id(c) for c in "assistant\n"]


# ---- the fixed rollout ---------------------------------------------------------------------------

PROMPTS = ["Add 1 and 3.", "What is 20 + 9?", "Sum 7 and 8!"]
GROUND_TRUTH = ["4", "29", "15"]
N = 4  # rollout.n
RESPONSES = [  # (text, ends with <|im_end|>)
    ("4", True), ("It is 4.", True), ("four", False), ("2+2=4", True),
    ("29", True), ("I say 29", False), ("2 9 !", True), ("x", True),
    ("15", True), ("7+8=15", True), ("fifteen 15", False), ("1", True),
]


def digit_share(text):
    """df_test_digit_share: digits / bytes of the decoded response (specials skipped)."""
    return sum(c.isdigit() for c in text) / len(text) if text else 0.0


def write_dataset():
    with open(os.path.join(OUT, "train.jsonl"), "w") as f:
        for p, gt in zip(PROMPTS, GROUND_TRUTH):
            row = {"data_source": "golden/digits", "prompt": [{"role": "user", "content": p}],
                   "reward_model": {"style": "rule", "ground_truth": gt}}
            f.write(json.dumps(row) + "\n")


# ---- the step's settings (the test passes `overrides` to the worker) -----------------------------

TEMPERATURE = 0.75
LR_ACTOR, LR_CRITIC, MAX_NORM, EPS, BETAS = 1e-3, 2e-3, 1.0, 1e-8, (0.9, 0.999)
CLIP_LOW, CLIP_HIGH, CLIP_C = 0.25, 0.375, 3.0
KL_COEF, ENT_COEF = 0.5, 0.5  # large, so that each term moves the update well beyond rounding
GAMMA, LAM, CLIP_V = 0.875, 0.625, 0.25   # binary fractions: the float32 config values are exact


def overrides(algo):
    a = "actor_rollout_ref.actor."
    o = [f"{a}optim.lr={LR_ACTOR}", f"{a}optim.weight_decay=0.0", f"{a}grad_clip={MAX_NORM}",
         f"{a}ppo_mini_batch_size=3", f"{a}ppo_micro_batch_size_per_gpu=4", f"{a}ppo_epochs=1",
         f"{a}use_kl_loss=true", f"{a}kl_loss_coef={KL_COEF}", f"{a}kl_loss_type=low_var_kl",
         f"{a}entropy_coeff={ENT_COEF}", f"{a}clip_ratio_low={CLIP_LOW}",
         f"{a}clip_ratio_high={CLIP_HIGH}", f"{a}clip_ratio_c={CLIP_C}",
         f"{a}loss_agg_mode={'seq-mean-token-mean' if algo == 'grpo' else 'token-mean'}",
         f"actor_rollout_ref.rollout.n={N}", f"actor_rollout_ref.rollout.temperature={TEMPERATURE}",
         "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
         "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=5",
         "data.train_batch_size=3", "data.max_prompt_length=64", "data.max_response_length=16",
         f"algorithm.adv_estimator={'grpo' if algo == 'grpo' else 'gae'}"]
    if algo == "ppo":
        o += [f"algorithm.gamma={GAMMA}", f"algorithm.lam={LAM}",
              f"critic.optim.lr={LR_CRITIC}", "critic.optim.weight_decay=0.0", f"critic.grad_clip={MAX_NORM}",
              "critic.ppo_mini_batch_size=3", "critic.ppo_micro_batch_size_per_gpu=6",
              "critic.forward_micro_batch_size_per_gpu=5", "critic.ppo_epochs=1",
              f"critic.cliprange_value={CLIP_V}", "critic.loss_agg_mode=token-mean"]
    return o


# ---- models ---------------------------------------------------------------------------------------

def st_read(path):
    """safetensors by hand (F32 only): name -> float64 tensor."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        assert h["dtype"] == "F32"
        a, b = h["data_offsets"]
        vals = struct.unpack(f"<{(b - a) // 4}f", data[a:b])
        out[name] = torch.tensor(vals, dtype=torch.float64).reshape(h["shape"])
    return out


def load(sub):
    p = st_read(os.path.join(HERE, sub, "model.safetensors"))
    return {n: t.requires_grad_(True) for n, t in p.items()}


def packed(prompts, responses):
    """Packed tokens, sequence offsets, output rows (the row before each response token), targets."""
    tokens, offsets, rows, targets = [], [0], [], []
    for p, r in zip(prompts, responses):
        base = len(tokens)
        tokens += p + r
        offsets.append(len(tokens))
        rows += [base + len(p) - 1 + t for t in range(len(r))]
        targets += r
    return torch.tensor(tokens), offsets, torch.tensor(rows), torch.tensor(targets)


def actor_out(p, batch):
    tokens, offsets, rows, targets = batch
    hid = gg.final_hidden(gg.CONFIG, p, tokens, offsets)
    _, logp, ent = gg.head(gg.CONFIG, p, hid, rows, targets, TEMPERATURE)
    return logp, ent


def values_out(p, batch):
    tokens, offsets, rows, _ = batch
    return gg.value_head(p, gg.final_hidden(gg.CONFIG, p, tokens, offsets), rows)


def per_token_grad_norms(p, outs):
    """||d outs[t] / d theta||_2 for every t (the magnitudes of the gradient's per-token terms)."""
    params = list(p.values())
    norms = []
    for t in range(len(outs)):
        g = torch.autograd.grad(outs[t], params, retain_graph=True)
        norms.append(math.sqrt(sum(float((x * x).sum()) for x in g)))
    return norms


def grad_and_adamw(p, loss, lr):
    """The gradient of loss (before clipping) and its norm. The test applies torch's AdamW to it
    itself: its first step (weight decay 0) moves each parameter by -lr h / (|h| + eps), h the
    gradient after clip_grad_norm_(MAX_NORM); checked here against torch.optim.AdamW."""
    params = list(p.values())
    for x in params:
        x.grad = None
    loss.backward()
    grads = {n: x.grad.detach().clone() for n, x in p.items()}
    norm = float(torch.nn.utils.clip_grad_norm_(params, MAX_NORM))
    before = {n: x.detach().clone() for n, x in p.items()}
    torch.optim.AdamW(params, lr=lr, betas=BETAS, eps=EPS, weight_decay=0.0).step()
    s = min(1.0, MAX_NORM / (norm + 1e-6))
    for n, x in p.items():
        h = s * grads[n]
        assert torch.allclose(x.detach() - before[n], -lr * h / (h.abs() + EPS), rtol=1e-9, atol=1e-15)
    return grads, norm


# ---- the algorithms (verl's definitions) ----------------------------------------------------------

def agg_weights(mode, lengths):
    """Per-token weights of agg_loss over one mini-batch (the whole batch here). The seq-mean count
    leaves out responses without tokens, as verl's agg_loss (b178a3cd) does; the pinned batches
    have none, so the goldens do not depend on it."""
    T, n = sum(lengths), sum(1 for L in lengths if L > 0)
    w = []
    for L in lengths:
        if mode == "token-mean":
            w += [1.0 / T] * L
        elif mode == "seq-mean-token-mean":
            w += [1.0 / (n * L)] * L
        else:
            raise ValueError(mode)
    return torch.tensor(w, dtype=torch.float64)


def grpo_advantages(scores):
    """compute_grpo_outcome_advantage: per uid group (s - mean) / (std + 1e-6), std unbiased."""
    adv = []
    for g in range(0, len(scores), N):
        s = torch.tensor(scores[g:g + N], dtype=torch.float64)
        adv += ((s - s.mean()) / (s.std() + 1e-6)).tolist()
    return adv


def gae(rewards, values):
    """compute_gae_advantage_return for one response: (advantages before whitening, returns)."""
    L = len(rewards)
    adv, last = [0.0] * L, 0.0
    for t in reversed(range(L)):
        nv = values[t + 1] if t + 1 < L else 0.0
        delta = rewards[t] + GAMMA * nv - values[t]
        last = delta + GAMMA * LAM * last
        adv[t] = last
    return adv, [a + v for a, v in zip(adv, values)]


def masked_whiten(x):
    """(x - mean) * rsqrt(var + 1e-8), var unbiased over all response tokens."""
    x = torch.tensor(x, dtype=torch.float64)
    mean = x.mean()
    var = ((x - mean) ** 2).sum() / (len(x) - 1)
    return ((x - mean) * torch.rsqrt(var + 1e-8)).tolist()


def policy_terms(logp, old, adv, ref, ent, w):
    """The actor's loss and metrics: vanilla PPO with dual clip, low_var_kl, entropy bonus."""
    neg_kl = torch.clamp(logp - old, -20.0, 20.0)
    ratio = torch.exp(neg_kl)
    pg1 = -adv * ratio
    pg2 = -adv * torch.clamp(ratio, 1 - CLIP_LOW, 1 + CLIP_HIGH)
    clip1 = torch.maximum(pg1, pg2)
    pg3 = -adv * CLIP_C
    clip2 = torch.minimum(pg3, clip1)
    pg = torch.where(adv < 0, clip2, clip1)
    kl = ref - logp
    kld = torch.clamp(torch.exp(kl) - kl - 1, -10.0, 10.0)
    pg_loss, kl_loss, ent_loss = (w * pg).sum(), (w * kld).sum(), (w * ent).sum()
    total = pg_loss + KL_COEF * kl_loss - ENT_COEF * ent_loss
    m = {
        "actor/pg_loss": float(pg_loss), "actor/kl_loss": float(kl_loss),
        "actor/entropy_loss": float(ent_loss),
        "actor/pg_clipfrac": float((pg2 > pg1).double().mean()),
        "actor/pg_clipfrac_lower": float(((clip1 > pg3) & (adv < 0)).double().mean()),
        "actor/ppo_kl": float((-neg_kl).mean()),
    }
    return total, m


def value_terms(vpred, values, returns, w):
    vc = torch.maximum(torch.minimum(vpred, values + CLIP_V), values - CLIP_V)
    l1, l2 = (vpred - returns) ** 2, (vc - returns) ** 2
    loss = 0.5 * (w * torch.maximum(l1, l2)).sum()
    m = {"critic/vf_loss": float(loss), "critic/vf_clipfrac": float((l2 > l1).double().mean()),
         "critic/vpred_mean": float(vpred.mean())}
    return loss, m


def perturbation(seed, choices, T):
    g = torch.Generator().manual_seed(seed)
    return [choices[int(i)] for i in torch.randint(0, len(choices), (T,), generator=g)]


def flat(x):
    return [float(v) for v in x]


def run(algo):
    prompts = [encode_chatml(p) for p in PROMPTS for _ in range(N)]
    responses = [[char_id(c) for c in text] + ([EOS] if eos else []) for text, eos in RESPONSES]
    lengths = [len(r) for r in responses]
    T = sum(lengths)
    batch = packed(prompts, responses)
    # rewards: the score (rounded to float32, as the column holds it) on the last response token
    scores = [float(torch.tensor(digit_share(t), dtype=torch.float32)) for t, _ in RESPONSES]
    token_scores = []
    for s, L in zip(scores, lengths):
        token_scores += [0.0] * (L - 1) + [s]

    actor = load("tiny_qwen2")
    logp0, ent0 = actor_out(actor, batch)
    cols = {"token_level_scores": token_scores, "token_level_rewards": token_scores,
            "old_log_probs": flat(logp0), "ref_log_prob": flat(logp0), "entropy": flat(ent0)}
    # actor/entropy as distflow's old-log-prob node reports it: the token mean (verl's trainer
    # aggregates it with actor.loss_agg_mode instead; the GRPO step's seq-mean-token-mean tells them apart)
    metrics = {"actor/entropy": float(ent0.mean()), "critic/score/mean": sum(scores) / len(scores)}
    tok = {"J": per_token_grad_norms(actor, logp0), "K": per_token_grad_norms(actor, ent0)}

    if algo == "grpo":
        adv_s = grpo_advantages(scores)
        adv = [a for a, L in zip(adv_s, lengths) for _ in range(L)]
        ret = adv
        adv_raw = adv
    else:
        critic = load("tiny_qwen2_value")
        v0 = values_out(critic, batch)
        cols["values"] = flat(v0)
        tok["Jv"] = per_token_grad_norms(critic, v0)
        adv_raw, ret, k = [], [], 0
        for L in lengths:
            a, r = gae(token_scores[k:k + L], cols["values"][k:k + L])
            adv_raw += a
            ret += r
            k += L
        adv = masked_whiten(adv_raw)
    cols["advantages"], cols["returns"] = adv, ret
    tok["adv_raw"] = adv_raw

    perturb = {"old_log_probs": perturbation(11, [-1.375, -0.5, -0.125, 0.0625, 0.5, 0.75], T),
               "ref_log_prob": perturbation(12, [-0.375, -0.125, 0.25, 0.5], T)}
    old = logp0.detach() + torch.tensor(perturb["old_log_probs"], dtype=torch.float64)
    ref = logp0.detach() + torch.tensor(perturb["ref_log_prob"], dtype=torch.float64)
    w = agg_weights("seq-mean-token-mean" if algo == "grpo" else "token-mean", lengths)
    total, m = policy_terms(logp0, old, torch.tensor(adv, dtype=torch.float64), ref, ent0, w)
    metrics.update(m)
    grads, metrics["actor/grad_norm"] = grad_and_adamw(actor, total, LR_ACTOR)
    tok["agg_w"] = flat(w)

    out_grads = {"actor." + n: t for n, t in grads.items()}
    if algo == "ppo":
        perturb["values"] = perturbation(13, [-0.5, -0.125, 0.0, 0.125, 0.625], T)
        vals = v0.detach() + torch.tensor(perturb["values"], dtype=torch.float64)
        retv = torch.tensor(ret, dtype=torch.float64)
        wv = agg_weights("token-mean", lengths)
        vloss, m = value_terms(v0, vals, retv, wv)
        metrics.update(m)
        cgrads, metrics["critic/grad_norm"] = grad_and_adamw(critic, vloss, LR_CRITIC)
        # the step's data metrics read the batch as the last node left it: the shifted values
        r, d = retv, retv - vals
        metrics["critic/vf_explained_var"] = float(1 - d.var() / (r.var() + 1e-5))
        metrics["critic/values/mean"] = float(vals.mean())
        metrics["critic/returns/mean"] = float(retv.mean())
        out_grads.update({"critic." + n: t for n, t in cgrads.items()})

    fixture = {
        "algorithm": algo,
        "overrides": overrides(algo),
        "prompt_ids": prompts, "response_ids": responses, "scores": scores,
        "perturb": perturb, "columns": cols, "token": tok, "metrics": metrics,
    }
    with open(os.path.join(OUT, f"{algo}.json"), "w") as f:
        json.dump(fixture, f, indent=1)
        f.write("\n")
    gg.st_write(os.path.join(OUT, f"{algo}_grad.safetensors"), out_grads)
    print(algo, {k: round(v, 6) for k, v in metrics.items()})


def main():
    os.makedirs(OUT, exist_ok=True)
    write_tokenizer()
    write_dataset()
    for algo in ("grpo", "ppo"):
        run(algo)


if __name__ == "__main__":
    main()
