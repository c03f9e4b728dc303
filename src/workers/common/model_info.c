/* The console's description of a model (model_info.h). */
#include "workers/common/model_info.h"

#include "model/hf_io.h"

#include <string.h>

/* A count with 3-4 significant digits: 494032768 -> "494.0M", 1543714304 -> "1.54B", 1700 -> "1.7K". */
static void count_text(int64_t n, char *out, size_t cap)
{
    if (n >= 1000000000)
        snprintf(out, cap, "%.2fB", (double)n / 1e9);
    else if (n >= 1000000)
        snprintf(out, cap, "%.1fM", (double)n / 1e6);
    else
        snprintf(out, cap, "%.1fK", (double)n / 1e3);
}

/* `  lora: r <r>, alpha <a> on <targets>: <N> trainable parameters (<p>% of the model)...` */
static void print_lora(FILE *f, const df_model *m, const df_lora *l)
{
    char n[32], targets[128] = "";
    count_text(l->n_params, n, sizeof n);
    df_lora_module mods[DF_LORA_N_TARGETS]; /* PEFT's modules: phi3's fused ones by their names */
    const int n_mods = df_lora_modules(&l->mcfg, l->cfg.targets, mods);
    for (int i = 0; i < n_mods; i++)
        snprintf(targets + strlen(targets), sizeof targets - strlen(targets), "%s%s", targets[0] ? "," : "",
                 mods[i].name);
    fprintf(f, "  lora: rank %lld, alpha %g on %s: %s trainable parameters (%.2f%% of the model; "
               "every base weight frozen); float32 weights %.2f GiB, frozen %s copies of the targets "
               "%.2f GiB, the adapters' weights, gradients and AdamW moments %.1f MiB\n",
            (long long)l->cfg.rank, l->cfg.alpha, targets, n, 100.0 * (double)l->n_params / (double)m->n_params,
            (double)m->n_params * 4 / (1 << 30), l->base16 ? "bf16 (exact)" : "float32",
            (double)l->n_base * (l->base16 ? 2 : 4) / (1 << 30), (double)l->n_params * 16 / (1 << 20));
}

/* The architecture's features beyond the plain decoder, each as ", feature", into buf[cap]. */
static void features(const df_model_config *c, char *buf, size_t cap)
{
    char rope[48];
    size_t k = (size_t)snprintf(buf, cap, "%s%s%s%s%s", c->tie_word_embeddings ? ", tied embeddings" : "",
                                c->attention_bias ? ", q/k/v bias" : "", c->o_proj_bias ? ", o_proj bias" : "",
                                !c->qk_norm ? "" : c->qk_norm_full ? ", q/k norm over the whole projection" : ", q/k norm",
                                c->post_norm ? ", post-norm layers" : "");
    if (k < cap && c->rope_type != DF_ROPE_DEFAULT)
        k += (size_t)snprintf(buf + k, cap - k, ", RoPE %s", df_model_rope_name(c, rope, sizeof rope));
    if (k < cap && df_model_rope_dim(c) != c->head_dim)
        k += (size_t)snprintf(buf + k, cap - k, ", RoPE on %lld of %lld dims", (long long)df_model_rope_dim(c),
                              (long long)c->head_dim);
    if (k < cap && c->sandwich_norm) /* gemma3_text */
        k += (size_t)snprintf(buf + k, cap - k, ", input and output norms per sublayer%s%s%s",
                              c->norm_plus_one ? " scaling by 1 + w" : "", c->geglu ? ", GeGLU" : "",
                              c->embed_scale ? ", embedding x sqrt(hidden)" : "");
    if (k < cap && c->num_experts > 0) { /* qwen3_moe, qwen2_moe, mixtral, olmoe: the sparse layers */
        const int64_t n = df_model_route_width(c) / c->num_experts_per_tok;
        k += (size_t)snprintf(buf + k, cap - k, ", %lld of %lld layers sparse: %lld of %lld experts a token (width %lld%s)",
                              (long long)n, (long long)c->num_hidden_layers, (long long)c->num_experts_per_tok,
                              (long long)c->num_experts, (long long)c->moe_intermediate_size,
                              c->norm_topk_prob ? ", renormalised" : "");
    }
    if (k < cap && c->shared_expert_intermediate_size > 0) /* qwen2_moe */
        k += (size_t)snprintf(buf + k, cap - k, " + a gated shared expert (width %lld)",
                              (long long)c->shared_expert_intermediate_size);
    if (k < cap && c->rope_local_theta > 0)
        k += (size_t)snprintf(buf + k, cap - k, ", local RoPE base %g on the sliding layers", c->rope_local_theta);
    if (k < cap && c->sliding_window > 0) {
        int64_t n = 0;
        for (int64_t l = 0; l < c->num_hidden_layers; l++)
            n += df_model_layer_sliding(c, l);
        snprintf(buf + k, cap - k, ", sliding-window attention (%lld on %lld of %lld layers)",
                 (long long)c->sliding_window, (long long)n, (long long)c->num_hidden_layers);
    }
}

void df_print_model_info(FILE *f, const char *dir, const df_model *m, bool bf16, const df_lora *lora,
                         const char *tok_dir, const df_tokenizer *tok)
{
    const df_model_config *c = &m->cfg;
    char n[32], feat[384];
    count_text(m->n_params, n, sizeof n);
    features(c, feat, sizeof feat);
    fprintf(f, "model: %s: %s%s, %s parameters (%lld layers, hidden %lld, %lld attention heads, %lld KV heads, "
               "head_dim %lld, vocab %lld%s)\n",
            dir, df_model_class_prefix(c->model_type), c->num_labels ? "ForTokenClassification" : "ForCausalLM", n,
            (long long)c->num_hidden_layers, (long long)c->hidden_size, (long long)c->num_attention_heads,
            (long long)c->num_key_value_heads, (long long)c->head_dim, (long long)c->vocab_size, feat);
    /* weights, gradients and the two AdamW moments: 4 float32 numbers a parameter */
    if (lora)
        print_lora(f, m, lora);
    else
        fprintf(f, "  dtype: %s files (config.json torch_dtype, kept on save); float32 master weights, "
                   "gradients and AdamW moments take %.2f GiB; matmuls in %s\n",
                df_dtype_torch_name(c->torch_dtype), (double)m->n_params * 16 / (1 << 30),
                bf16 ? "bf16 with float32 accumulation (mixed precision)" : "float32");
    if (lora)
        fprintf(f, "  dtype: %s files (config.json torch_dtype, kept on save); matmuls in %s\n",
                df_dtype_torch_name(c->torch_dtype),
                bf16 ? "bf16 with float32 accumulation (mixed precision)" : "float32");
    if (tok)
        fprintf(f, "tokenizer: %s (%lld tokens)\n", tok_dir, (long long)df_tokenizer_vocab_size(tok));
}
