/* Model FLOPs of a training pass, as verl counts them for its MFU metrics (model.h). */
#include "distflow/model.h"

double df_model_train_flops(const df_model_config *c, double tokens, double seqlen_sq)
{
    const double H = (double)c->hidden_size, hd = (double)c->head_dim, L = (double)c->num_hidden_layers;
    const double q = (double)c->num_attention_heads * hd, kv = (double)c->num_key_value_heads * hd;
    const double dense = (3.0 * H * (double)c->intermediate_size + H * (q + 2.0 * kv + q)) * L +
                         2.0 * (double)c->vocab_size * H; /* the embedding counted as a matmul, as verl */
    return 6.0 * dense * tokens + 6.0 * seqlen_sq * hd * (double)c->num_attention_heads * L;
}
