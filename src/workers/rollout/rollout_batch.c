/* Generate a batch of responses (rollout_batch.h). */
#include "workers/rollout/rollout_batch.h"

#include "engine/actor.h"
#include "util/timeutil.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct {
    df_progress bar;
} gen_progress;

static void on_progress(void *user, int64_t done, int64_t total, int64_t tokens)
{
    gen_progress *g = user;
    char extra[64];
    double dt = df_now() - g->bar.start;
    snprintf(extra, sizeof extra, "%lld tok, %.0f tok/s", (long long)tokens,
             dt > 0 ? (double)tokens / dt : 0.0);
    (void)total;
    df_progress_update(&g->bar, done, extra);
}

int df_generate_batch(df_rollout_engine *e, const df_model *m, const df_batch *prompts,
                      int64_t n, const df_sampling_params *sp, uint64_t seed, const char *label,
                      df_batch **out)
{
    return df_generate_batch_turns(e, m, prompts, n, sp, NULL, seed, label, out);
}

/* The response_mask as the batch's int32 column (rows as response_ids), and verl's num_turns
 * per sample: assistant turns + appended replies (user / tool turns) + 1. */
int df_generate_set_turn_columns(df_batch *b, int64_t n, const int64_t *offsets, const int8_t *response_mask,
                                 const int32_t *assistant_turns)
{
    const int64_t total = offsets[n];
    int32_t *mask = malloc((size_t)(total ? total : 1) * sizeof *mask);
    int64_t *turns = malloc((size_t)(n ? n : 1) * sizeof *turns);
    if (!mask || !turns) {
        free(mask), free(turns);
        return df_error(DF_ENOMEM, "out of memory for the response mask");
    }
    for (int64_t s = 0; s < n; s++) {
        turns[s] = assistant_turns[s] + 1;
        for (int64_t t = offsets[s]; t < offsets[s + 1]; t++) {
            mask[t] = response_mask[t];
            turns[s] += !mask[t] && (t == offsets[s] || mask[t - 1]); /* a reply starts */
        }
    }
    int rc = df_batch_set_tok_i32(b, "response_mask", offsets, mask);
    if (!rc)
        rc = df_batch_set_i64(b, "num_turns", turns);
    free(mask), free(turns);
    return rc;
}

/* R3 (an engine recording routes): the rollout's routes as the batch field routed_experts, each
 * sequence's prompt ++ response rows of `W` experts (engine/routes.h). */
static int set_routes(df_batch *b, const df_rollout_result *res, int64_t W)
{
    int64_t *off = malloc((size_t)(res->n_seqs + 1) * sizeof *off);
    if (!off)
        return df_error(DF_ENOMEM, "out of memory for the rollout's routes");
    for (int64_t s = 0; s <= res->n_seqs; s++)
        off[s] = res->route_offsets[s] * W;
    int rc = df_batch_set_tok_i32(b, DF_ROUTES_COLUMN, off, res->routes);
    free(off);
    return rc;
}

int df_generate_batch_turns(df_rollout_engine *e, const df_model *m, const df_batch *prompts,
                            int64_t n, const df_sampling_params *sp, const df_turn_handler *turns,
                            uint64_t seed, const char *label, df_batch **out)
{
    const df_column *pc = df_batch_column(prompts, "prompt_ids");
    if (!pc || pc->kind != DF_COL_TOK_I32)
        return df_error(DF_EINVAL, "generate: the batch has no prompt_ids column");
    int64_t np = df_batch_size(prompts);
    const int64_t *idx = df_batch_i64(prompts, "index");
    uint64_t *keys = idx ? malloc((size_t)(np ? np : 1) * sizeof *keys) : NULL;
    if (idx && !keys)
        return df_error(DF_ENOMEM, "out of memory");
    for (int64_t i = 0; keys && i < np; i++)
        keys[i] = (uint64_t)idx[i];
    df_rollout_request req = {.n_prompts = np, .prompt_offsets = pc->offsets,
                              .prompt_tokens = pc->data, .n_samples = n, .seed = seed,
                              .prompt_keys = keys};
    df_rollout_result res = {0};
    gen_progress g;
    df_progress_begin(&g.bar, label, np * n);
    int rc = df_rollout_generate_turns(e, m, &req, sp, turns, &res, on_progress, &g);
    df_progress_end(&g.bar);
    free(keys);
    df_batch *b = NULL;
    if (!rc)
        rc = df_batch_repeat_interleave(prompts, n, &b);
    if (!rc)
        rc = df_batch_set_tok_i32(b, "response_ids", res.offsets, res.tokens);
    if (!rc)
        rc = df_batch_set_tok_f32(b, "rollout_log_probs", res.offsets, res.log_probs);
    if (!rc && turns) /* multi-turn: losses, KL and advantages skip the appended tokens */
        rc = df_generate_set_turn_columns(b, res.n_seqs, res.offsets, res.response_mask, res.assistant_turns);
    if (!rc && res.routes)
        rc = set_routes(b, &res, df_model_route_width(&m->cfg));
    df_rollout_result_free(&res);
    if (rc) {
        df_batch_free(b);
        return rc;
    }
    *out = b;
    return DF_OK;
}
