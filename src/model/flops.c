/* Model FLOPs of a training pass, as verl counts them for its MFU metrics (model.h). */
#include "distflow/model.h"

#include <string.h>

double df_model_train_flops(const df_model_config *c, double tokens, double seqlen_sq)
{
    return df_model_train_flops_win(c, tokens, seqlen_sq, seqlen_sq);
}

double df_model_train_flops_win(const df_model_config *c, double tokens, double seqlen_sq, double seqlen_win)
{
    const double H = (double)c->hidden_size, hd = (double)c->head_dim, L = (double)c->num_hidden_layers;
    const double q = (double)c->num_attention_heads * hd, kv = (double)c->num_key_value_heads * hd;
    /* verl's _estimate_qwen2_moe_flops for a sparse layer: the router and k experts a token
       (verl counts every layer sparse; mlp_only_layers' dense ones count as dense here). verl
       leaves qwen2_moe's shared expert and its gate out; they run on every token, so they count */
    double mlp = 0;
    const double shared = 3.0 * (double)c->shared_expert_intermediate_size + (c->shared_expert_intermediate_size > 0);
    for (int64_t l = 0; l < c->num_hidden_layers; l++)
        mlp += df_model_layer_moe(c, l) ? H * ((double)c->num_experts + 3.0 * (double)c->num_experts_per_tok *
                                                                          (double)c->moe_intermediate_size + shared)
                                         : 3.0 * H * (double)c->intermediate_size;
    const double dense = mlp + H * (q + 2.0 * kv + q) * L +
                         2.0 * (double)c->vocab_size * H; /* the embedding counted as a matmul, as verl */
    /* verl's _estimate_gemma3_flops: the sliding layers' queries see min(len, W) keys; its qwen2
       estimate (the other families) counts every layer whole, windows or not */
    double sliding = 0;
    for (int64_t l = 0; !strcmp(c->model_type, "gemma3_text") && l < c->num_hidden_layers; l++)
        sliding += df_model_layer_sliding(c, l);
    const double attn = seqlen_sq * (L - sliding) + seqlen_win * sliding;
    return 6.0 * dense * tokens + 6.0 * attn * hd * (double)c->num_attention_heads;
}
