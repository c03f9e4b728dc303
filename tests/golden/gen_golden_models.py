#!/usr/bin/python3
"""Write the golden fixtures of the newer model families for tests/test_model_families.c.

A sibling of gen_golden.py (whose Qwen2 fixture stays as it is): the same packed batch,
float64 reference and file layout, for two tiny models that exercise what Qwen2 does not:

  tiny_qwen3    Qwen3ForCausalLM (transformers' modeling_qwen3.py): per-head RMSNorm of q and
                k (q_norm / k_norm over head_dim, after the projections, before RoPE), no
                biases, head_dim 16 with hidden 32 (num_heads * head_dim != hidden), untied
                LM head, and Qwen3Config's sliding window: use_sliding_window with
                sliding_window 4 and max_window_layers 1, so layer 0 attends causally and
                layer 1 only to its last 4 positions (masking_utils: key j is visible to
                query i when i - 4 < j <= i).
  tiny_qwen3_yarn  tiny_qwen3 with rope_scaling "yarn" (transformers 4.56's
                _compute_yarn_parameters): factor 4, original_max_position_embeddings 2048 of
                8192, beta_fast 24, beta_slow 2, so the correction range is dims [2, 5] of 8
                (frequencies 0-2 kept, 3-4 blended, 5-7 divided by 4) and cos / sin carry the
                attention factor 0.1 ln 4 + 1.
  tiny_mistral  MistralForCausalLM (modeling_mistral.py): the Llama layer without biases and
                MistralConfig's sliding window on every layer (sliding_window 4, no
                use_sliding_window / max_window_layers keys), head_dim 16 with hidden 32,
                rope_theta 1e6 (Mistral 7B v0.2+), untied LM head.
  tiny_phi3     Phi3ForCausalLM (modeling_phi3.py): the Llama layer without biases whose
                checkpoint fuses each layer's projections: self_attn.qkv_proj.weight (the rows
                of q, then k, then v, sliced as Phi3Attention does) and mlp.gate_up_proj.weight
                (gate's rows, then up's: Phi3MLP's chunk(2)); GQA (4 heads, 2 key/value
                heads), head_dim 16 with hidden 32, no window, untied. Its gradients are of the
                fused tensors.
  tiny_phi3_longrope  tiny_phi3's layout with Phi-3.5's rope_scaling "longrope": per-frequency
                short factors (all different) and max_position_embeddings 16 x
                original_max_position_embeddings, so cos / sin carry the attention factor
                sqrt(1 + ln 16 / ln 512) (HF _compute_longrope_parameters at lengths within the
                original context, where the short factors apply).
  tiny_phi4_mini  Phi-4-mini's attention on tiny_phi3's layout: partial_rotary_factor 0.75, so
                RoPE rotates the first int(16 * 0.75) = 12 dims of each head (Phi3Attention's
                q_rot / q_pass slices; the frequencies sized by those 12 dims), LongRoPE with 6
                short factors (all different), tied embeddings as Phi-4-mini has.
  tiny_llama31  LlamaForCausalLM with Llama 3.1's rope_scaling (rope_type llama3; the
                inverse frequencies rescaled as _compute_llama3_parameters, in float32),
                chosen so that the 8 frequencies fall in all three bands (3 high, 2 medium,
                3 low), attention_bias true (q/k/v AND o_proj biases, LlamaAttention), tied
                embeddings, head_dim 16.
  tiny_olmo2    Olmo2ForCausalLM (modeling_olmo2.py): post-norm layers, with no input norm,
                post_attention_layernorm on the attention's output and
                post_feedforward_layernorm on the MLP's, each before its residual add; q_norm /
                k_norm over the whole projection (widths 4 x 16 and 2 x 16) before the split
                into heads and RoPE; GQA, head_dim 16 with hidden 32, no biases, untied,
                rope_theta 5e5 (OLMo 2's).
  tiny_olmo2_bias  tiny_olmo2 with attention_bias (q / k / v AND o_proj biases, Olmo2Attention;
                the o_proj bias inside the post-attention norm) and tied embeddings.
  tiny_gemma3   Gemma3ForCausalLM (modeling_gemma3.py, model_type gemma3_text): every RMSNorm
                scales by (1 + w) (Gemma3RMSNorm; the weights drawn around 0, 0.3 N(0, 1), so
                the 1 matters); four norms a layer (input, post_attention on the attention's
                output, pre_feedforward, post_feedforward on the MLP's output, the latter two
                each before its residual add); q_norm / k_norm per head over head_dim (as
                Qwen3's, with the 1 +); GeGLU MLP with gelu_pytorch_tanh; the embedding times
                sqrt(hidden) rounded to float32 (Gemma3TextScaledWordEmbedding on float32
                weights); attention scale query_pre_attn_scalar^-0.5 (24, head_dim 16);
                layer_types [sliding, sliding, full] with sliding_window 4 (masking_utils: key j
                visible to query i when i - 4 < j <= i); RoPE per layer type: sliding layers
                rope_local_base_freq 1e4 without scaling, the full layer rope_theta 1e6 with
                rope_scaling linear factor 8 (inv_freq / 8 in float32); GQA 4 / 2, head_dim 16
                with hidden 32, tied, no biases.
  tiny_gemma2   Gemma2ForCausalLM (modeling_gemma2.py, model_type gemma2): tiny_gemma3's sandwich
                layer, (1 + w) norms, GeGLU and scaled embedding, without q / k norms; one RoPE
                (rope_theta 1e4) on every layer; no layer_types, so Gemma2Config's alternation:
                layer i slides when (i + 1) % 2 != 0 (layers 0 and 2 over sliding_window 4,
                layer 1 full); attn_logit_softcapping 2 (scores = 2 tanh(scores / 2) after the
                query_pre_attn_scalar^-0.5 scaling, before the mask) and final_logit_softcapping 3
                (logits = 3 tanh(logits / 3) before the temperature), both small enough to bite.
                Its "logits" are the LM head's output before the cap (what the test multiplies
                out); the log-probs, entropies and gradients are of the capped model.
  tiny_qwen3_moe  Qwen3MoeForCausalLM (modeling_qwen3_moe.py, configuration_qwen3_moe.py, model_type
                qwen3_moe): tiny_qwen3's layer (q_norm / k_norm per head, no biases, head_dim 16)
                without a window (use_sliding_window false, sliding_window null), three layers,
                untied. Qwen3MoeDecoderLayer: layer i is a Qwen3MoeSparseMoeBlock when i is not in
                mlp_only_layers and (i + 1) % decoder_sparse_step == 0, else the dense MLP of
                intermediate_size; mlp_only_layers [1] with step 1, so layers 0 and 2 are sparse and
                1 dense. The block: router probabilities softmax(x gate^T) over num_experts 4
                (mlp.gate.weight [4, 32], no bias, drawn N(0, 0.5^2) so the routing is far from
                uniform), the top num_experts_per_tok 2 divided by their sum (norm_topk_prob), the
                weighted sum of the chosen experts' SwiGLU (mlp.experts.{e}.gate_proj / up_proj /
                down_proj, moe_intermediate_size 24). The gradients reach the router through the
                weights (the choice is a constant); every expert is chosen by some token. No aux
                loss in the fixture (output_router_logits false). Seed 3701, routing gap 0.1227:
                over every token of every sparse layer the k-th largest probability exceeds the
                (k + 1)-th by at least that fraction of itself (>= 1e-3 required, moe_seed), so a
                float32 engine picks the same experts.
  tiny_qwen3_moe_topk  tiny_qwen3_moe with num_experts 5, num_experts_per_tok 3, norm_topk_prob false
                (the raw softmax probabilities weight the experts, summing to less than 1),
                decoder_sparse_step 2 and mlp_only_layers [], so only layer 1 ((1 + 1) % 2 == 0)
                is sparse and layers 0 and 2 dense; tied embeddings. Seed 3711, routing gap 0.0355.
  tiny_mixtral  MixtralForCausalLM (modeling_mixtral.py, configuration_mixtral.py, model_type mixtral):
                tiny_mistral's attention (no biases, sliding_window 4 on every layer, head_dim 16
                with hidden 32, rope_theta 1e6, untied) with every layer's MLP a
                MixtralSparseMoeBlock: router block_sparse_moe.gate.weight [num_local_experts 4, 32]
                (no bias, N(0, 0.5^2) as Qwen3-MoE's), softmax, the top num_experts_per_tok 2 always
                divided by their sum (no norm_topk_prob key), experts
                block_sparse_moe.experts.{e}.w2(silu(w1 x) * w3 x) of intermediate_size 24 (no dense
                MLP), listed per expert as w1 (gate), w3 (up), w2 (down). router_jitter_noise 0,
                output_router_logits false (no aux loss). Every expert is chosen by some token in
                both layers. Seed 3801, routing gap 0.0265.
  tiny_olmoe    OlmoeForCausalLM (modeling_olmoe.py, configuration_olmoe.py, model_type olmoe): Llama's
                pre-norm layer with OLMo 2's q/k RMSNorms over the whole q / k projections (before
                the heads and RoPE), no biases, 4 heads of hidden / heads = 8 (no head_dim key, as
                OlmoeConfig has none), GQA 4 / 2, untied; every layer an OlmoeSparseMoeBlock:
                router mlp.gate.weight [4, 32], softmax, the top 2 unnormalised (norm_topk_prob
                false, OlmoeConfig's default), experts mlp.experts.{e}.{gate,up,down}_proj of
                intermediate_size 24 (no dense MLP); clip_qkv null. Seed 4001, routing gap 0.0705.
  tiny_qwen2_moe  Qwen2MoeForCausalLM (modeling_qwen2_moe.py, configuration_qwen2_moe.py, model_type
                qwen2_moe): Qwen2's attention (q/k/v biases from qkv_bias true, no o_proj bias, no
                q/k norms, no window), three layers with mlp_only_layers [1] (layer 1 the dense MLP
                of intermediate_size 24), untied. Qwen2MoeSparseMoeBlock: tiny_qwen3_moe's routing
                over 4 experts of moe_intermediate_size 16 with norm_topk_prob false (Qwen2MoE's
                default), plus the shared expert mlp.shared_expert.{gate,up,down}_proj of
                shared_expert_intermediate_size 40 (wider than the others, so it sizes the MLP
                scratch) on every token, scaled by sigmoid(h mlp.shared_expert_gate.weight^T)
                ([1, 32], no bias) and added to the routed experts' sum. Seed 3901, routing gap
                0.0090.

For each <name>: <name>/config.json, <name>/model.safetensors (F32) and
<name>_expected.safetensors with batch.*, logits.rows / logits (temperature 1), logp.t1,
entropy.t1, logp.t07, entropy.t07, loss.c, loss.d and grad.<hf name> of the loss
sum(c logp) + sum(d entropy) at temperature 0.7, as gen_golden.py writes them.
Not run by CI; rerun by hand with Debian's torch: /usr/bin/python3.
"""
import json
import math
import os
import sys

import torch

from gen_golden import HERE, LENGTHS, LOGIT_ROWS, PROMPT, rms_norm, rotate_half, st_write

COMMON = {
    "vocab_size": 61,
    "hidden_size": 32,
    "intermediate_size": 24,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 2048,
    "rope_theta": 10000.0,
    "initializer_range": 0.02,
    "hidden_act": "silu",
    "attention_dropout": 0.0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "torch_dtype": "float32",
}

QWEN3 = dict(COMMON, **{
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "rms_norm_eps": 1e-6,
    "attention_bias": False,
    "tie_word_embeddings": False,
    "rope_scaling": None,
    "use_sliding_window": True,
    "sliding_window": 4,
    "max_window_layers": 1,
})

LLAMA31 = dict(COMMON, **{
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "rms_norm_eps": 1e-5,
    "attention_bias": True,
    "mlp_bias": False,
    "tie_word_embeddings": True,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 8.0, "original_max_position_embeddings": 1024},
})


MISTRAL = dict(COMMON, **{
    "architectures": ["MistralForCausalLM"],
    "model_type": "mistral",
    "rms_norm_eps": 1e-5,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": False,
    "sliding_window": 4,
})


PHI3 = dict(COMMON, **{
    "architectures": ["Phi3ForCausalLM"],
    "model_type": "phi3",
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
    "rope_scaling": None,
    "sliding_window": None,
    "original_max_position_embeddings": 2048,
    "partial_rotary_factor": 1.0,
    "resid_pdrop": 0.0,
    "embd_pdrop": 0.0,
})


PHI3_LONGROPE = dict(PHI3, **{
    "max_position_embeddings": 8192,
    "original_max_position_embeddings": 512,
    "rope_scaling": {"type": "longrope",
                     "short_factor": [1.0, 1.05, 1.2, 1.5, 2.1, 3.3, 5.0, 9.5],
                     "long_factor": [1.0, 1.3, 2.0, 3.1, 5.2, 8.8, 14.0, 20.0]},
})


PHI4_MINI = dict(PHI3_LONGROPE, **{
    "partial_rotary_factor": 0.75,
    "tie_word_embeddings": True,
    "rope_scaling": {"type": "longrope",
                     "short_factor": [1.0, 1.1, 1.35, 1.8, 2.6, 4.0],
                     "long_factor": [1.0, 1.4, 2.2, 3.5, 6.0, 11.0]},
})


QWEN3_YARN = dict(QWEN3, **{
    "max_position_embeddings": 8192,
    "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048,
                     "beta_fast": 24.0, "beta_slow": 2.0},
})


QWEN3_MOE = dict(QWEN3, **{
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "num_hidden_layers": 3,
    "use_sliding_window": False,
    "sliding_window": None,
    "max_window_layers": 3,
    "decoder_sparse_step": 1,
    "moe_intermediate_size": 24,
    "num_experts_per_tok": 2,
    "num_experts": 4,
    "norm_topk_prob": True,
    "output_router_logits": False,
    "router_aux_loss_coef": 0.001,
    "mlp_only_layers": [1],
})


QWEN3_MOE_TOPK = dict(QWEN3_MOE, **{
    "num_experts": 5,
    "num_experts_per_tok": 3,
    "norm_topk_prob": False,
    "decoder_sparse_step": 2,
    "mlp_only_layers": [],
    "tie_word_embeddings": True,
})


QWEN2_MOE = dict(COMMON, **{
    "architectures": ["Qwen2MoeForCausalLM"],
    "model_type": "qwen2_moe",
    "num_hidden_layers": 3,
    "rms_norm_eps": 1e-6,
    "qkv_bias": True,
    "tie_word_embeddings": False,
    "rope_scaling": None,
    "use_sliding_window": False,
    "sliding_window": 4096,
    "max_window_layers": 3,
    "decoder_sparse_step": 1,
    "moe_intermediate_size": 16,
    "shared_expert_intermediate_size": 40,
    "num_experts_per_tok": 2,
    "num_experts": 4,
    "norm_topk_prob": False,
    "output_router_logits": False,
    "router_aux_loss_coef": 0.001,
    "mlp_only_layers": [1],
})


OLMOE = {k: v for k, v in COMMON.items() if k != "head_dim"}  # OlmoeConfig: head_dim = hidden / heads
OLMOE.update({
    "architectures": ["OlmoeForCausalLM"],
    "model_type": "olmoe",
    "rms_norm_eps": 1e-5,
    "attention_bias": False,
    "tie_word_embeddings": False,
    "rope_scaling": None,
    "clip_qkv": None,
    "pad_token_id": 1,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "norm_topk_prob": False,
    "output_router_logits": False,
    "router_aux_loss_coef": 0.01,
})


MIXTRAL = dict(MISTRAL, **{
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "router_jitter_noise": 0.0,
    "output_router_logits": False,
    "router_aux_loss_coef": 0.02,
})


ROUTER_STD = 0.5            # the MoE routers' N(0, 0.5^2) entries: logits of std ~ 0.5 sqrt(hidden)
MIN_ROUTING_GAP = 1e-3      # (p_(k) - p_(k+1)) / p_(k) at every token of every sparse layer


OLMO2 = dict(COMMON, **{
    "architectures": ["Olmo2ForCausalLM"],
    "model_type": "olmo2",
    "rms_norm_eps": 1e-6,
    "rope_theta": 500000.0,
    "attention_bias": False,
    "tie_word_embeddings": False,
    "rope_scaling": None,
    "pad_token_id": 1,
})


OLMO2_BIAS = dict(OLMO2, **{"attention_bias": True, "tie_word_embeddings": True})


GEMMA3 = {k: v for k, v in COMMON.items() if k != "hidden_act"}
GEMMA3.update({
    "architectures": ["Gemma3ForCausalLM"],
    "model_type": "gemma3_text",
    "num_hidden_layers": 3,
    "hidden_activation": "gelu_pytorch_tanh",
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "rope_local_base_freq": 10000.0,
    "rope_scaling": {"rope_type": "linear", "factor": 8.0},
    "query_pre_attn_scalar": 24,
    "sliding_window": 4,
    "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
    "attn_logit_softcapping": None,
    "final_logit_softcapping": None,
    "attention_bias": False,
    "tie_word_embeddings": True,
    "bos_token_id": 2,
    "eos_token_id": 1,
    "pad_token_id": 0,
})


def is_gemma3(c):
    """Gemma 3's text layer, which Gemma 2's shares (is_gemma2 marks what differs)."""
    return c["model_type"] in ("gemma3_text", "gemma2")


def is_gemma2(c):
    """Gemma2: no q / k norms, no local RoPE, the two tanh soft-caps."""
    return c["model_type"] == "gemma2"


def gemma3_full(c, i):
    """Gemma3TextConfig: layer_types, else layer i is full when (i + 1) % sliding_window_pattern == 0
    (Gemma2Config: when (i + 1) % 2 == 0, no pattern key)."""
    if c.get("layer_types"):
        return c["layer_types"][i] == "full_attention"
    return (i + 1) % (2 if is_gemma2(c) else c.get("sliding_window_pattern", 6)) == 0


def is_mixtral(c):
    """MixtralForCausalLM: Mistral's attention, every MLP a MixtralSparseMoeBlock."""
    return c["model_type"] == "mixtral"


def all_sparse(c):
    """Mixtral and OLMoE: every layer's MLP is the sparse block, its experts of intermediate_size."""
    return c["model_type"] in ("mixtral", "olmoe")


def num_experts(c):
    """Qwen3MoeConfig's num_experts, MixtralConfig's num_local_experts."""
    return c["num_local_experts"] if is_mixtral(c) else c["num_experts"]


def sparse_layer(c, i):
    """Qwen3MoeDecoderLayer (and Qwen2MoeDecoderLayer): Qwen3MoeSparseMoeBlock when i is not in
    mlp_only_layers, num_experts > 0 and (i + 1) % decoder_sparse_step == 0, else the dense
    Qwen3MoeMLP of intermediate_size. MixtralDecoderLayer and OlmoeDecoderLayer: always their
    sparse block."""
    if all_sparse(c):
        return True
    return (c["model_type"] in ("qwen3_moe", "qwen2_moe") and i not in c["mlp_only_layers"] and c["num_experts"] > 0
            and (i + 1) % c["decoder_sparse_step"] == 0)


def moe_names(c, i):
    """Layer i's router and, per expert, its (gate, up, down) weight names: Qwen3-MoE's
    mlp.gate / mlp.experts.{e}.gate_proj, up_proj, down_proj; Mixtral's block_sparse_moe.gate /
    block_sparse_moe.experts.{e}.w1, w3, w2 (w1 the gate, w3 the up, w2 the down)."""
    m = f"model.layers.{i}."
    if is_mixtral(c):
        b = m + "block_sparse_moe."
        return b + "gate.weight", [tuple(b + f"experts.{e}.{w}.weight" for w in ("w1", "w3", "w2"))
                                   for e in range(num_experts(c))]
    b = m + "mlp."
    return b + "gate.weight", [tuple(b + f"experts.{e}.{w}_proj.weight" for w in ("gate", "up", "down"))
                               for e in range(num_experts(c))]


def softcap(x, cap):
    """Gemma 2's soft-cap: cap tanh(x / cap); None: x."""
    return cap * torch.tanh(x / cap) if cap else x


def norm(c, x, w, eps):
    """RMSNorm; Gemma3RMSNorm scales by (1 + w)."""
    return rms_norm(x, 1 + w if is_gemma3(c) else w, eps)


def embed_scale(c):
    """Gemma3TextScaledWordEmbedding: sqrt(hidden) as a float32 tensor (the weights' dtype)."""
    return float(torch.tensor(c["hidden_size"] ** 0.5, dtype=torch.float32)) if is_gemma3(c) else 1.0


def head_dim(c):
    """head_dim, or hidden / heads for a config without one (OlmoeConfig has no such key)."""
    return c.get("head_dim", c["hidden_size"] // c["num_attention_heads"])


def rot_dim(c):
    """The dims of each head RoPE rotates: int(head_dim * partial_rotary_factor) as HF computes it."""
    return int(head_dim(c) * c.get("partial_rotary_factor", 1.0))


def param_shapes(c):
    """HF names and shapes in the checkpoint's order (distflow's layout, phi3's fused)."""
    H, I, V, d = c["hidden_size"], c["intermediate_size"], c["vocab_size"], head_dim(c)
    q, kv = c["num_attention_heads"] * d, c["num_key_value_heads"] * d
    bias = c.get("attention_bias", False) or c.get("qkv_bias", False)
    o_bias = c.get("attention_bias", False)      # Qwen2MoE's qkv_bias: q/k/v only
    phi3, olmo2 = c["model_type"] == "phi3", c["model_type"] == "olmo2"
    full_qk = c["model_type"] in ("olmo2", "olmoe")  # q/k norms over the whole projections
    out = [("model.embed_tokens.weight", (V, H))]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}.self_attn."
        if not olmo2:                            # Olmo2DecoderLayer has no input norm
            out.append((f"model.layers.{i}.input_layernorm.weight", (H,)))
        if phi3:
            out.append((p + "qkv_proj.weight", (q + 2 * kv, H)))
        for proj, n in (("q", q), ("k", kv), ("v", kv)) if not phi3 else ():
            out.append((p + f"{proj}_proj.weight", (n, H)))
            if bias:
                out.append((p + f"{proj}_proj.bias", (n,)))
        out.append((p + "o_proj.weight", (H, q)))
        if o_bias:
            out.append((p + "o_proj.bias", (H,)))
        if c["model_type"] in ("qwen3", "qwen3_moe"):
            out += [(p + "q_norm.weight", (d,)), (p + "k_norm.weight", (d,))]
        if full_qk:                              # over the whole projections
            out += [(p + "q_norm.weight", (q,)), (p + "k_norm.weight", (kv,))]
        if is_gemma3(c) and not is_gemma2(c):    # per head over head_dim, as Qwen3's
            out += [(p + "q_norm.weight", (d,)), (p + "k_norm.weight", (d,))]
        m = f"model.layers.{i}."
        out.append((m + "post_attention_layernorm.weight", (H,)))
        if is_gemma3(c):
            out.append((m + "pre_feedforward_layernorm.weight", (H,)))
        if sparse_layer(c, i):                   # the router, then each expert's gate, up, down
            E = num_experts(c)
            Im = I if all_sparse(c) else c["moe_intermediate_size"]  # Mixtral, OLMoE: the experts' width
            router, experts = moe_names(c, i)
            out.append((router, (E, H)))
            for gate, up, down in experts:
                out += [(gate, (Im, H)), (up, (Im, H)), (down, (H, Im))]
            if "shared_expert_intermediate_size" in c:  # Qwen2MoE: the shared expert, its gate
                Is, b = c["shared_expert_intermediate_size"], m + "mlp.shared_expert"
                out += [(b + ".gate_proj.weight", (Is, H)), (b + ".up_proj.weight", (Is, H)),
                        (b + ".down_proj.weight", (H, Is)), (b + "_gate.weight", (1, H))]
        elif phi3:
            out += [(m + "mlp.gate_up_proj.weight", (2 * I, H)), (m + "mlp.down_proj.weight", (H, I))]
        else:
            out += [(m + "mlp.gate_proj.weight", (I, H)), (m + "mlp.up_proj.weight", (I, H)),
                    (m + "mlp.down_proj.weight", (H, I))]
        if olmo2 or is_gemma3(c):
            out.append((m + "post_feedforward_layernorm.weight", (H,)))
    out.append(("model.norm.weight", (H,)))
    if not c["tie_word_embeddings"]:
        out.append(("lm_head.weight", (V, H)))
    return out


def init_params(c, seed):
    """As gen_golden.py: scales that make every path matter, rounded to float32."""
    g = torch.Generator().manual_seed(seed)
    params = {}
    for name, shape in param_shapes(c):
        if name.endswith("norm.weight") and is_gemma3(c):
            t = 0.3 * torch.randn(shape, generator=g)    # Gemma3RMSNorm's w, used as 1 + w
        elif name.endswith("norm.weight"):
            t = 1.0 + 0.2 * torch.randn(shape, generator=g)
        elif name.endswith(".bias"):
            t = 0.1 * torch.randn(shape, generator=g)
        elif "embed" in name and is_gemma3(c):   # times sqrt(hidden) in, tied head out
            t = 0.15 * torch.randn(shape, generator=g)
        elif "embed" in name:
            t = 0.8 * torch.randn(shape, generator=g)
        elif name.endswith((".mlp.gate.weight", ".block_sparse_moe.gate.weight")):  # MoE routers:
            t = ROUTER_STD * torch.randn(shape, generator=g)    # far from uniform routing
        else:
            t = torch.randn(shape, generator=g) / math.sqrt(shape[1])
        params[name] = t.float().double().requires_grad_(True)
    return params


def inv_freq(c, i=0):
    """The rotary inverse frequencies in float32, with Llama 3.1's rescaling when configured.
    Gemma 3 (Gemma3RotaryEmbedding): sliding layers rope_local_base_freq without scaling, full
    layers rope_theta with rope_scaling (linear: inv_freq / factor in float32)."""
    d = rot_dim(c)
    if is_gemma3(c) and not is_gemma2(c) and not gemma3_full(c, i):
        return 1.0 / (c["rope_local_base_freq"] ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    f = 1.0 / (c["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    rs = c.get("rope_scaling")
    if rs and rs.get("rope_type", rs.get("type")) == "linear":
        return f / rs["factor"]
    if rs and rs.get("rope_type") == "yarn":
        return yarn_inv_freq(c, d)
    if rs and rs.get("type") == "longrope":     # the short factors: lengths within the original context
        shape = torch.arange(0, d, 2, dtype=torch.int64).float() / d
        return 1.0 / (torch.tensor(rs["short_factor"], dtype=torch.float32) * c["rope_theta"] ** shape)
    if not rs or rs["rope_type"] != "llama3":
        return f
    n0, lo, hi, factor = (rs["original_max_position_embeddings"], rs["low_freq_factor"],
                          rs["high_freq_factor"], rs["factor"])
    wavelength = 2 * math.pi / f
    long_waves = wavelength > n0 / lo            # low frequencies: slowed down by `factor`
    short_waves = wavelength < n0 / hi           # high frequencies: kept
    slowed = torch.where(long_waves, f / factor, f)
    s = (n0 / wavelength - lo) / (hi - lo)       # 0 at the long end of the band, 1 at the short
    blend = (1 - s) * slowed / factor + s * slowed
    between = ~short_waves * ~long_waves
    return torch.where(between, blend, slowed)


def yarn_inv_freq(c, d):
    """YaRN as transformers 4.56's _compute_yarn_parameters: the dims between the correction range
    of beta_fast and beta_slow rotations over the original context (floored / ceiled unless
    truncate is false, clipped to [0, d - 1]) ramp linearly from the default frequency
    (extrapolation) to it divided by factor (interpolation); Python floats for the range,
    float32 tensors for the rest."""
    rs = c["rope_scaling"]
    base, factor = c["rope_theta"], rs["factor"]
    n0 = rs.get("original_max_position_embeddings") or c["max_position_embeddings"]
    beta_fast, beta_slow = rs.get("beta_fast") or 32, rs.get("beta_slow") or 1

    def correction_dim(rot):                     # the dim that turns `rot` times over n0 positions
        return (d * math.log(n0 / (rot * 2 * math.pi))) / (2 * math.log(base))

    lo, hi = correction_dim(beta_fast), correction_dim(beta_slow)
    if rs.get("truncate", True):
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, d - 1)
    if lo == hi:
        hi += 0.001
    ramp = torch.clamp((torch.arange(d // 2, dtype=torch.float32) - lo) / (hi - lo), 0, 1)
    pos = base ** (torch.arange(0, d, 2).float() / d)
    extrap, interp = 1.0 / pos, 1.0 / (factor * pos)
    keep = 1 - ramp                              # inv_freq_extrapolation_factor
    return interp * (1 - keep) + extrap * keep


def attention_factor(c):
    """LongRoPE's cos / sin multiplier: sqrt(1 + ln s / ln original) for the extension s > 1;
    YaRN's: attention_factor, else get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
    when both are set, else 0.1 ln(factor) + 1 (1 for factor <= 1)."""
    rs = c.get("rope_scaling")
    if rs and rs.get("rope_type") == "yarn":
        def mscale(s, m=1):
            return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0
        if rs.get("attention_factor") is not None:
            return rs["attention_factor"]
        if rs.get("mscale") and rs.get("mscale_all_dim"):
            return mscale(rs["factor"], rs["mscale"]) / mscale(rs["factor"], rs["mscale_all_dim"])
        return mscale(rs["factor"])
    if not rs or rs.get("type") != "longrope":
        return 1.0
    s = c["max_position_embeddings"] / c["original_max_position_embeddings"]
    return 1.0 if s <= 1 else math.sqrt(1 + math.log(s) / math.log(c["original_max_position_embeddings"]))


def rope_cos_sin(c, L, i=0):
    freqs = torch.arange(L).float()[:, None] * inv_freq(c, i)[None, :]
    emb = torch.cat((freqs, freqs), dim=-1).double()
    a = attention_factor(c)
    return emb.cos() * a, emb.sin() * a


def window_of(c, i):
    """Qwen2Config / Qwen3Config: windowed layers are those with index >= max_window_layers;
    MistralConfig / MixtralConfig / Phi3Config: every layer when sliding_window is set."""
    if c["model_type"] in ("mistral", "mixtral", "phi3"):
        return c.get("sliding_window") or 0
    if is_gemma3(c):                             # Gemma3Attention: sliding_attention layers only
        return 0 if gemma3_full(c, i) else c["sliding_window"]
    if c.get("use_sliding_window") and c.get("sliding_window") and i >= c["max_window_layers"]:
        return c["sliding_window"]
    return 0


def linear(p, name, x):
    y = x @ p[name + ".weight"].T
    return y + p[name + ".bias"] if name + ".bias" in p else y


def mlp(c, p, pre, h):
    if c["model_type"] == "phi3":                # Phi3MLP: gate, up = gate_up_proj(h).chunk(2)
        gate, up = (h @ p[pre + "mlp.gate_up_proj.weight"].T).chunk(2, dim=-1)
    else:
        gate = h @ p[pre + "mlp.gate_proj.weight"].T
        up = h @ p[pre + "mlp.up_proj.weight"].T
    if is_gemma3(c):                             # Gemma3MLP: hidden_activation gelu_pytorch_tanh
        act = torch.nn.functional.gelu(gate, approximate="tanh")
    else:
        act = torch.nn.functional.silu(gate)
    return (act * up) @ p[pre + "mlp.down_proj.weight"].T


def moe(c, p, i, h, record=None):
    """Qwen3MoeSparseMoeBlock on layer i's h [L, H]: router probabilities softmax(h gate^T), their
    top num_experts_per_tok (divided by their sum when norm_topk_prob) weighting the chosen
    experts' SwiGLU outputs (Qwen3MoeMLP of moe_intermediate_size). MixtralSparseMoeBlock: the
    same with the top k always divided by their sum (no norm_topk_prob key; router_jitter_noise
    only in training) and experts w2(silu(w1 x) * w3 x) of intermediate_size. The weights keep
    their graph, so the gradient reaches the router through the softmax; the choice itself is a
    constant. Each expert runs on every row, weighted by 0 where not chosen. Qwen2MoeSparseMoeBlock
    adds its shared expert's SwiGLU times sigmoid(h shared_expert_gate^T). record: a list that
    gets the probabilities."""
    router, experts = moe_names(c, i)
    prob = torch.softmax(h @ p[router].T, dim=-1)
    if record is not None:
        record.append(prob.detach())
    w, idx = torch.topk(prob, c["num_experts_per_tok"], dim=-1)
    if is_mixtral(c) or c["norm_topk_prob"]:
        w = w / w.sum(-1, keepdim=True)
    out = torch.zeros_like(h)
    for e, (gate, up, down) in enumerate(experts):
        y = (torch.nn.functional.silu(h @ p[gate].T) * (h @ p[up].T)) @ p[down].T
        out = out + (w * (idx == e)).sum(-1, keepdim=True) * y
    if "shared_expert_intermediate_size" in c:
        b = f"model.layers.{i}.mlp.shared_expert"
        y = (torch.nn.functional.silu(h @ p[b + ".gate_proj.weight"].T) * (h @ p[b + ".up_proj.weight"].T)) \
            @ p[b + ".down_proj.weight"].T
        out = out + torch.sigmoid(h @ p[b + "_gate.weight"].T) * y
    return out


def layer(c, p, i, x, record=None):
    """One decoder layer on a single sequence x [L, H]; record: see moe."""
    pre, at = f"model.layers.{i}.", f"model.layers.{i}.self_attn."
    L = x.shape[0]
    nh, nkv, d, eps = c["num_attention_heads"], c["num_key_value_heads"], head_dim(c), c["rms_norm_eps"]
    olmo2 = c["model_type"] == "olmo2"
    h = x if olmo2 else norm(c, x, p[pre + "input_layernorm.weight"], eps)
    if c["model_type"] == "phi3":                # Phi3Attention: one projection, sliced
        qkv = linear(p, at + "qkv_proj", h)
        qp = nh * d
        q = qkv[..., :qp].reshape(L, nh, d)
        k = qkv[..., qp:qp + nkv * d].reshape(L, nkv, d)
        v = qkv[..., qp + nkv * d:].reshape(L, nkv, d)
    else:
        q, k = linear(p, at + "q_proj", h), linear(p, at + "k_proj", h)
        v = linear(p, at + "v_proj", h).view(L, nkv, d)
        if c["model_type"] in ("olmo2", "olmoe"):  # Olmo2Attention / OlmoeAttention: whole projection, then heads
            q = rms_norm(q, p[at + "q_norm.weight"], eps)
            k = rms_norm(k, p[at + "k_norm.weight"], eps)
        q, k = q.view(L, nh, d), k.view(L, nkv, d)
    if c["model_type"] in ("qwen3", "qwen3_moe", "gemma3_text"):  # per head over head_dim (Gemma: 1 + w)
        q = norm(c, q, p[at + "q_norm.weight"], eps)
        k = norm(c, k, p[at + "k_norm.weight"], eps)
    q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)
    cos, sin = rope_cos_sin(c, L, i)
    rd = rot_dim(c)                              # Phi3's apply_rotary_pos_emb: rotate [:rd], pass the rest
    q = torch.cat((q[..., :rd] * cos + rotate_half(q[..., :rd]) * sin, q[..., rd:]), dim=-1)
    k = torch.cat((k[..., :rd] * cos + rotate_half(k[..., :rd]) * sin, k[..., rd:]), dim=-1)
    k = k.repeat_interleave(nh // nkv, dim=0)
    v = v.repeat_interleave(nh // nkv, dim=0)
    scale = c["query_pre_attn_scalar"] ** -0.5 if is_gemma3(c) else d ** -0.5
    s = (q @ k.transpose(1, 2)) * scale
    s = softcap(s, c.get("attn_logit_softcapping"))  # Gemma 2: after the scaling, before the mask
    qi, kj = torch.arange(L)[:, None], torch.arange(L)[None, :]
    hidden = kj > qi
    W = window_of(c, i)
    if W:
        hidden = hidden | (kj <= qi - W)
    s = s.masked_fill(hidden, float("-inf"))
    a = (torch.softmax(s, dim=-1) @ v).transpose(0, 1).reshape(L, nh * d)
    o = linear(p, at + "o_proj", a)
    if olmo2:                                    # Olmo2DecoderLayer: the sublayers' outputs normed
        x = x + rms_norm(o, p[pre + "post_attention_layernorm.weight"], eps)
        return x + rms_norm(mlp(c, p, pre, x), p[pre + "post_feedforward_layernorm.weight"], eps)
    if is_gemma3(c):                             # Gemma3DecoderLayer: four norms
        x = x + norm(c, o, p[pre + "post_attention_layernorm.weight"], eps)
        m = mlp(c, p, pre, norm(c, x, p[pre + "pre_feedforward_layernorm.weight"], eps))
        return x + norm(c, m, p[pre + "post_feedforward_layernorm.weight"], eps)
    x = x + o
    h = rms_norm(x, p[pre + "post_attention_layernorm.weight"], eps)
    return x + (moe(c, p, i, h, record) if sparse_layer(c, i) else mlp(c, p, pre, h))


def final_hidden(c, p, tokens, offsets, record=None):
    outs = []
    for s in range(len(offsets) - 1):
        x = p["model.embed_tokens.weight"][tokens[offsets[s]:offsets[s + 1]]] * embed_scale(c)
        for i in range(c["num_hidden_layers"]):
            x = layer(c, p, i, x, record)
        outs.append(norm(c, x, p["model.norm.weight"], c["rms_norm_eps"]))
    return torch.cat(outs, dim=0)


def head(c, p, hid, rows, targets, temperature):
    W = p["model.embed_tokens.weight"] if c["tie_word_embeddings"] else p["lm_head.weight"]
    logits = hid[rows] @ W.T
    z = softcap(logits, c.get("final_logit_softcapping")) / temperature
    lse = torch.logsumexp(z, dim=-1)
    logp = z.gather(-1, targets[:, None])[:, 0] - lse
    ent = lse - (torch.softmax(z, dim=-1) * z).sum(-1)
    return logits, logp, ent


def packed_tokens(c, g):
    """The packed batch's tokens (the first draws of g) and its sequence offsets."""
    offsets = [0]
    for n in LENGTHS:
        offsets.append(offsets[-1] + n)
    return torch.randint(0, c["vocab_size"], (offsets[-1],), generator=g), offsets


def routing_gap(c, p, tokens, offsets):
    """The smallest (p_(k) - p_(k+1)) / p_(k) over every token of every sparse layer, the router
    probabilities sorted descending and k = num_experts_per_tok (inf when k = num_experts): how far
    each token is from choosing another expert, which float32 must not flip."""
    probs = []
    with torch.no_grad():
        final_hidden(c, p, tokens, offsets, probs)
    k, gap = c["num_experts_per_tok"], math.inf
    for pr in probs if k < num_experts(c) else ():
        s = pr.sort(dim=-1, descending=True).values
        gap = min(gap, float(((s[:, k - 1] - s[:, k]) / s[:, k - 1]).min()))
    return gap


def moe_seed(name, c, seed, tries=100):
    """The first seed from `seed` up whose weights and batch route every token with a gap of at
    least MIN_ROUTING_GAP (routing_gap)."""
    for s in range(seed, seed + tries):
        tokens, offsets = packed_tokens(c, torch.Generator().manual_seed(s + 1))
        gap = routing_gap(c, init_params(c, s), tokens, offsets)
        print(f"{name}: seed {s} min routing gap {gap:.6g}")
        if gap >= MIN_ROUTING_GAP:
            return s
    raise SystemExit(f"{name}: no seed in [{seed}, {seed + tries}) routes with a gap >= {MIN_ROUTING_GAP}")


def write_fixture(name, c, seed):
    if c["model_type"] in ("qwen3_moe", "qwen2_moe", "mixtral", "olmoe"):
        seed = moe_seed(name, c, seed)
    p = init_params(c, seed)
    g = torch.Generator().manual_seed(seed + 1)
    tokens, offsets = packed_tokens(c, g)
    rows, targets = [], []
    for s, n in enumerate(LENGTHS):
        for t in range(PROMPT[s] - 1, n - 1):
            rows.append(offsets[s] + t)
            targets.append(int(tokens[offsets[s] + t + 1]))
    rows, targets = torch.tensor(rows), torch.tensor(targets)
    hid = final_hidden(c, p, tokens, offsets)
    logits, logp1, ent1 = head(c, p, hid, rows, targets, 1.0)
    _, logp7, ent7 = head(c, p, hid, rows, targets, 0.7)
    cl = torch.randn(len(rows), generator=g).double()
    dl = torch.randn(len(rows), generator=g).double()
    loss = (cl * logp7).sum() + (dl * ent7).sum()
    loss.backward()
    d = os.path.join(HERE, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
        f.write("\n")
    names = [n for n, _ in param_shapes(c)]
    st_write(os.path.join(d, "model.safetensors"), {n: p[n] for n in names}, {"format": "pt"})
    exp = {
        "batch.tokens": tokens.double(),
        "batch.seq_offsets": torch.tensor(offsets).double(),
        "batch.out_rows": rows.double(),
        "batch.out_targets": targets.double(),
        "logits.rows": torch.tensor(LOGIT_ROWS).double(),
        "logits": logits[LOGIT_ROWS],
        "logp.t1": logp1, "entropy.t1": ent1, "logp.t07": logp7, "entropy.t07": ent7,
        "loss.c": cl, "loss.d": dl,
    }
    for n in names:
        exp["grad." + n] = p[n].grad
    st_write(os.path.join(HERE, name + "_expected.safetensors"), exp)
    print(f"{name}: n_out={len(rows)} loss={float(loss):.6f} logp.t1[0]={float(logp1[0]):.6f}")


GEMMA2 = {k: v for k, v in GEMMA3.items() if k not in ("rope_local_base_freq", "layer_types")}
GEMMA2.update({
    "architectures": ["Gemma2ForCausalLM"],
    "model_type": "gemma2",
    "rope_theta": 10000.0,
    "rope_scaling": None,
    "attn_logit_softcapping": 2.0,
    "final_logit_softcapping": 3.0,
})


FIXTURES = [("tiny_qwen3", QWEN3, 3003), ("tiny_llama31", LLAMA31, 3101),
            ("tiny_mistral", MISTRAL, 3211), ("tiny_phi3", PHI3, 3307),
            ("tiny_phi3_longrope", PHI3_LONGROPE, 3313), ("tiny_phi4_mini", PHI4_MINI, 3319),
            ("tiny_olmo2", OLMO2, 3401), ("tiny_olmo2_bias", OLMO2_BIAS, 3403),
            ("tiny_gemma3", GEMMA3, 3501), ("tiny_qwen3_yarn", QWEN3_YARN, 3009),
            ("tiny_gemma2", GEMMA2, 3601), ("tiny_qwen3_moe", QWEN3_MOE, 3701),
            ("tiny_qwen3_moe_topk", QWEN3_MOE_TOPK, 3711), ("tiny_mixtral", MIXTRAL, 3801),
            ("tiny_qwen2_moe", QWEN2_MOE, 3901), ("tiny_olmoe", OLMOE, 4001)]


def main():
    """Every fixture, or those named on the command line (each is seeded on its own)."""
    torch.manual_seed(0)
    only = set(sys.argv[1:])
    for name, c, seed in FIXTURES:
        if not only or name in only:
            write_fixture(name, c, seed)


if __name__ == "__main__":
    main()
