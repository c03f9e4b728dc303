/* The MoE families' config.json keys (transformers' Qwen3MoeConfig, Qwen2MoeConfig, MixtralConfig
   and OlmoeConfig), read and written back (hf_io.h). */
#include "model/hf_io.h"

#include <string.h>

void df_cfg_moe_defaults(df_model_config *c)
{
    c->vocab_size = 151936;
    c->hidden_size = 2048;
    c->intermediate_size = 6144;
    c->num_hidden_layers = 24;
    c->num_attention_heads = 32;
    c->num_key_value_heads = 4;
    c->attention_bias = false;
    c->qk_norm = true;
    c->num_experts = 128;
    c->num_experts_per_tok = 8;
    c->moe_intermediate_size = 768;
    c->norm_topk_prob = false;
    c->decoder_sparse_step = 1;
}

void df_cfg_qwen2_moe_defaults(df_model_config *c)
{
    c->vocab_size = 151936;
    c->hidden_size = 2048;
    c->intermediate_size = 5632;
    c->num_hidden_layers = 24;
    c->num_attention_heads = 16;
    c->num_key_value_heads = 16;
    c->max_position_embeddings = 32768;
    c->rope_theta = 10000.0;
    c->num_experts = 60;
    c->num_experts_per_tok = 4;
    c->moe_intermediate_size = 1408;
    c->shared_expert_intermediate_size = 5632;
    c->norm_topk_prob = false;
    c->decoder_sparse_step = 1;
}

/* mlp_only_layers: a list of layer indices in [0, num_hidden_layers) (HF would let an index past
   the model match no layer; distflow names it instead; a repeated one is accepted, as in HF). */
static int parse_dense_layers(json_t *root, const char *src, df_model_config *c)
{
    json_t *a = df_cfg_get(root, "mlp_only_layers");
    memset(c->mlp_only_layers, 0, sizeof c->mlp_only_layers);
    if (!a)
        return DF_OK;
    if (!json_is_array(a))
        return df_cfg_wrong_type(src, "mlp_only_layers", "a list of layer indices", a);
    for (size_t i = 0; i < json_array_size(a); i++) {
        json_t *v = json_array_get(a, i);
        if (!json_is_integer(v))
            return df_error(DF_EINVAL, "%s: key \"mlp_only_layers\": entry %zu must be an integer, got %s", src, i,
                            df_cfg_type_name(v));
        const json_int_t l = json_integer_value(v);
        if (l < 0 || l >= c->num_hidden_layers || l >= DF_MAX_TYPED_LAYERS)
            return df_error(DF_EINVAL, "%s: key \"mlp_only_layers\": entry %zu (%lld) is not a layer index in "
                            "[0, %lld)%s", src, i, (long long)l, (long long)c->num_hidden_layers,
                            l >= DF_MAX_TYPED_LAYERS ? " that distflow can mark (at most 256)" : "");
        c->mlp_only_layers[l / 64] |= (uint64_t)1 << (l % 64);
    }
    return DF_OK;
}

/* The load-balancing loss (output_router_logits, router_aux_loss_coef) enters only the HF model's own
   loss with labels, which RL does not compute (verl's actor neither): the keys are type-checked and
   kept in the file. */
static int check_aux_loss(json_t *root, const char *src)
{
    bool out = false;
    double coef = 0;
    int rc = df_cfg_get_bool(root, src, "output_router_logits", &out);
    return rc ? rc : df_cfg_get_num(root, src, "router_aux_loss_coef", &coef);
}

int df_cfg_parse_moe(json_t *root, const char *src, df_model_config *c)
{
    struct { const char *key; int64_t *dst; } ints[] = {
        {"num_experts", &c->num_experts},
        {"num_experts_per_tok", &c->num_experts_per_tok},
        {"moe_intermediate_size", &c->moe_intermediate_size},
        {"decoder_sparse_step", &c->decoder_sparse_step},
    };
    int rc = DF_OK;
    for (size_t i = 0; i < sizeof ints / sizeof ints[0] && !rc; i++)
        rc = df_cfg_get_int(root, src, ints[i].key, false, ints[i].dst);
    if (!rc && !strcmp(c->model_type, "qwen2_moe"))
        rc = df_cfg_get_int(root, src, "shared_expert_intermediate_size", false, &c->shared_expert_intermediate_size);
    if (!rc)
        rc = df_cfg_get_bool(root, src, "norm_topk_prob", &c->norm_topk_prob);
    if (!rc)
        rc = check_aux_loss(root, src);
    if (!rc)
        rc = parse_dense_layers(root, src, c);
    return rc;
}

void df_cfg_mixtral_defaults(df_model_config *c)
{
    c->vocab_size = 32000;
    c->hidden_size = 4096;
    c->intermediate_size = 14336;
    c->num_hidden_layers = 32;
    c->num_attention_heads = 32;
    c->num_key_value_heads = 8;
    c->max_position_embeddings = 4096 * 32;
    c->rope_theta = 1e6;
    c->rms_norm_eps = 1e-5;
    c->attention_bias = false;
    c->bos_token_id = 1;
    c->eos_token_ids[0] = 2;
    c->n_eos = 1;
    c->num_experts = 8;
    c->num_experts_per_tok = 2;
    c->norm_topk_prob = true; /* MixtralSparseMoeBlock always renormalises */
    c->decoder_sparse_step = 1;
}

void df_cfg_olmoe_defaults(df_model_config *c)
{
    c->vocab_size = 50304;
    c->hidden_size = 2048;
    c->intermediate_size = 2048;
    c->num_hidden_layers = 16;
    c->num_attention_heads = 16;
    c->max_position_embeddings = 4096;
    c->rms_norm_eps = 1e-5;
    c->attention_bias = false;
    c->eos_token_ids[0] = 50279;
    c->n_eos = 1;
    c->qk_norm = c->qk_norm_full = true; /* OlmoeAttention: over the whole q / k projections */
    c->num_experts = 64;
    c->num_experts_per_tok = 8;
    c->norm_topk_prob = false;
    c->decoder_sparse_step = 1;
}

/* OlmoeConfig's clip_qkv: null (none), else refused. */
static int check_clip_qkv(json_t *root, const char *src)
{
    json_t *v = df_cfg_get(root, "clip_qkv");
    if (v && !json_is_number(v))
        return df_cfg_wrong_type(src, "clip_qkv", "a number or null", v);
    if (v)
        return df_error(DF_EUNSUPPORTED, "%s: key \"clip_qkv\" %g is not supported (null: q, k and v are not "
                        "clamped)", src, json_number_value(v));
    return DF_OK;
}

int df_cfg_parse_mixtral(json_t *root, const char *src, df_model_config *c)
{
    const bool olmoe = !strcmp(c->model_type, "olmoe"); /* OlmoeConfig maps num_local_experts to num_experts */
    int rc = df_cfg_get_int(root, src, "num_local_experts", false, &c->num_experts);
    if (!rc && olmoe)
        rc = df_cfg_get_int(root, src, "num_experts", false, &c->num_experts);
    if (!rc)
        rc = df_cfg_get_int(root, src, "num_experts_per_tok", false, &c->num_experts_per_tok);
    if (!rc && olmoe)
        rc = df_cfg_get_bool(root, src, "norm_topk_prob", &c->norm_topk_prob);
    if (!rc && olmoe)
        rc = check_clip_qkv(root, src);
    c->moe_intermediate_size = c->intermediate_size; /* the experts' width: there is no dense MLP */
    if (olmoe)
        return rc ? rc : check_aux_loss(root, src);
    /* the jitter multiplies the router's input by U(1 - j, 1 + j) in training mode (HF), which
       distflow does not draw */
    double jitter = 0;
    if (!rc)
        rc = df_cfg_get_num(root, src, "router_jitter_noise", &jitter);
    if (!rc && jitter != 0)
        return df_error(DF_EUNSUPPORTED, "%s: key \"router_jitter_noise\" %g is not supported (0: the router's "
                        "input is not perturbed)", src, jitter);
    return rc ? rc : check_aux_loss(root, src);
}

int df_cfg_write_moe(json_t *o, const df_model_config *c, bool fresh)
{
    if (!strcmp(c->model_type, "olmoe")) {
        int bad = json_object_set_new(o, "num_experts", json_integer(c->num_experts)) |
                  json_object_set_new(o, "num_experts_per_tok", json_integer(c->num_experts_per_tok)) |
                  json_object_set_new(o, "norm_topk_prob", json_boolean(c->norm_topk_prob));
        if (fresh) /* as transformers writes a new OlmoeConfig */
            bad |= json_object_set_new(o, "output_router_logits", json_false()) |
                   json_object_set_new(o, "router_aux_loss_coef", json_real(0.01)) |
                   json_object_set_new(o, "clip_qkv", json_null());
        return bad;
    }
    if (!strcmp(c->model_type, "mixtral")) {
        int bad = json_object_set_new(o, "num_local_experts", json_integer(c->num_experts)) |
                  json_object_set_new(o, "num_experts_per_tok", json_integer(c->num_experts_per_tok));
        if (fresh) /* as transformers writes a new MixtralConfig */
            bad |= json_object_set_new(o, "output_router_logits", json_false()) |
                   json_object_set_new(o, "router_aux_loss_coef", json_real(0.001)) |
                   json_object_set_new(o, "router_jitter_noise", json_real(0.0));
        return bad;
    }
    json_t *dense = json_array();
    for (int64_t l = 0; dense && l < c->num_hidden_layers && l < DF_MAX_TYPED_LAYERS; l++)
        if (c->mlp_only_layers[l / 64] >> (l % 64) & 1u)
            json_array_append_new(dense, json_integer(l));
    int bad = !dense;
    bad |= json_object_set_new(o, "num_experts", json_integer(c->num_experts));
    bad |= json_object_set_new(o, "num_experts_per_tok", json_integer(c->num_experts_per_tok));
    bad |= json_object_set_new(o, "moe_intermediate_size", json_integer(c->moe_intermediate_size));
    bad |= json_object_set_new(o, "norm_topk_prob", json_boolean(c->norm_topk_prob));
    bad |= json_object_set_new(o, "decoder_sparse_step", json_integer(c->decoder_sparse_step));
    bad |= json_object_set_new(o, "mlp_only_layers", dense);
    if (c->shared_expert_intermediate_size > 0)
        bad |= json_object_set_new(o, "shared_expert_intermediate_size", json_integer(c->shared_expert_intermediate_size));
    if (fresh) /* as transformers writes a new Qwen3MoeConfig / Qwen2MoeConfig */
        bad |= json_object_set_new(o, "output_router_logits", json_false()) |
               json_object_set_new(o, "router_aux_loss_coef", json_real(0.001));
    return bad;
}
