#!/usr/bin/python3
"""Qwen3-MoE for the PyTorch side of bench/rows.c (torch_rows.py --experts E, docs/performance.md
"Qwen3-MoE rows"), written with torch alone the way transformers' eager modeling_qwen3_moe.py
computes it (Debian 12 has no transformers package):

- Qwen3MoeAttention: q/k/v/o projections without biases, q_norm / k_norm (RMSNorm over each
  head's head_dim) before RoPE (torch_model_step.qk_heads);
- Qwen3MoeSparseMoeBlock on every layer (decoder_sparse_step 1, no mlp_only_layers): the router
  Linear, softmax in float32, top-k, renormalised when norm_topk_prob, the weights cast back to
  the hidden states' dtype, and the loop over the experts that some token was routed to
  (expert_mask = one_hot(selected).permute(2, 1, 0); per expert hit: torch.where, the gathered
  rows through its Qwen3MoeMLP, times their routing weights, index_add_ into the output).

Each expert is its own set of three weights (HF's nn.ModuleList of Qwen3MoeMLP), so AdamW and
clip_grad_norm_ see E * 3 tensors a layer, as they do on HF's model. Routing counts no auxiliary
load-balancing loss: RL's actor loss does not include it (verl), nor does the engine.
"""
import torch
import torch.nn.functional as F


def build(a):
    """Random Qwen3-MoE weights (std 0.02, norms 1) of a's sizes, tied embeddings, every layer
    sparse. Layer dict: ln1, ln2, wq, wk, wv, wo, q_norm, k_norm, router [E, H] and experts, a
    list of {wg [I, H], wu [I, H], wd [H, I]} (I = a.moe_inter)."""
    g = torch.Generator().manual_seed(1)
    H, V, nh, nkv = a.hidden, a.vocab, a.heads, a.kv_heads
    E, I = a.experts, a.moe_inter
    hd = H // nh

    def w(*shape):
        return (torch.randn(*shape, generator=g) * 0.02).requires_grad_(True)

    def ones(n):
        return torch.ones(n, requires_grad=True)

    p = {"embed": w(V, H), "norm": ones(H), "layers": []}
    for _ in range(a.layers):
        p["layers"].append({
            "ln1": ones(H), "ln2": ones(H),
            "wq": w(nh * hd, H), "wk": w(nkv * hd, H), "wv": w(nkv * hd, H), "wo": w(H, nh * hd),
            "q_norm": ones(hd), "k_norm": ones(hd),
            "router": w(E, H),
            "experts": [{"wg": w(I, H), "wu": w(I, H), "wd": w(H, I)} for _ in range(E)]})
    p["lm_head"] = p["embed"] if a.tied else w(V, H)
    return p


def expert_mlp(x, e):
    """Qwen3MoeMLP: down_proj(act_fn(gate_proj(x)) * up_proj(x)), SiLU, no biases."""
    return F.linear(F.silu(F.linear(x, e["wg"])) * F.linear(x, e["wu"]), e["wd"])


def moe_block(hidden_states, l, a):
    """Qwen3MoeSparseMoeBlock.forward on rows [..., H] (the router logits are not returned: no
    auxiliary loss is computed)."""
    shape = hidden_states.shape
    hidden_dim = shape[-1]
    hidden_states = hidden_states.reshape(-1, hidden_dim)
    router_logits = F.linear(hidden_states, l["router"])
    routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
    routing_weights, selected_experts = torch.topk(routing_weights, a.topk, dim=-1)
    if a.norm_topk:
        routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
    routing_weights = routing_weights.to(hidden_states.dtype)
    final_hidden_states = torch.zeros((hidden_states.shape[0], hidden_dim),
                                      dtype=hidden_states.dtype, device=hidden_states.device)
    expert_mask = F.one_hot(selected_experts, num_classes=a.experts).permute(2, 1, 0)
    expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
    for expert_idx in expert_hit:
        expert = l["experts"][int(expert_idx)]
        idx, top_x = torch.where(expert_mask[expert_idx].squeeze(0))
        current_state = hidden_states[None, top_x].reshape(-1, hidden_dim)
        current_hidden_states = expert_mlp(current_state, expert) * routing_weights[top_x, idx, None]
        final_hidden_states.index_add_(0, top_x, current_hidden_states.to(hidden_states.dtype))
    return final_hidden_states.reshape(shape)
