/*
 * bench/rollout.c — generated tokens per second of df_rollout_generate on a
 * demo-sized random model (hidden 256, 4 layers, vocab 600, ~2.9M params):
 * 32 prompts x n = 8 = 256 sequences decoded together, against a baseline
 * measured in the same run: the same engine with max_num_seqs = 1, i.e. one
 * sequence at a time (on the first BASELINE_SEQS sequences, to keep it short).
 *
 * Usage: bench_rollout [max_new_tokens (64)] [baseline_seqs (16)]
 * Prints `metric: value` lines.
 */
#include "distflow/model.h"
#include "distflow/rollout.h"
#include "distflow/rng.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_PROMPTS = 32, N_SAMPLES = 8, MAX_SEQ_LEN = 192 };

static int bench_config(df_model_config *c)
{
    df_model_config_defaults(c);
    c->vocab_size = 600;
    c->hidden_size = 256;
    c->intermediate_size = 704;
    c->num_hidden_layers = 4;
    c->num_attention_heads = 4;
    c->num_key_value_heads = 2;
    c->head_dim = 64;
    c->max_position_embeddings = 1024;
    c->tie_word_embeddings = true;
    c->n_eos = 0;
    return df_model_config_validate(c);
}

static void make_prompts(int64_t *off, int32_t **tok)
{
    df_rng r;
    df_rng_seed(&r, 2024);
    off[0] = 0;
    for (int i = 0; i < N_PROMPTS; i++)
        off[i + 1] = off[i] + 32 + (int64_t)df_rng_below(&r, 33); /* 32..64 tokens */
    *tok = malloc((size_t)off[N_PROMPTS] * sizeof(int32_t));
    for (int64_t t = 0; t < off[N_PROMPTS]; t++)
        (*tok)[t] = (int32_t)df_rng_below(&r, 600);
}

/* Run one generate; returns tokens/s or -1. */
static double timed(df_rollout_engine *e, const df_model *m, const df_rollout_request *q,
                    const df_sampling_params *sp, df_rollout_stats *st)
{
    df_rollout_result res;
    if (df_rollout_generate(e, m, q, sp, &res, NULL, NULL)) {
        fprintf(stderr, "generate: %s\n", df_last_error());
        return -1.0;
    }
    df_rollout_engine_stats(e, st);
    df_rollout_result_free(&res);
    return (double)st->generated_tokens / st->seconds;
}

int main(int argc, char **argv)
{
    int64_t max_new = argc > 1 ? atoll(argv[1]) : 64;
    int64_t base_seqs = argc > 2 ? atoll(argv[2]) : 16;
    df_model_config c;
    df_model *m = NULL;
    if (bench_config(&c) || df_model_create(&c, &m) || df_model_init_random(m, 7)) {
        fprintf(stderr, "model: %s\n", df_last_error());
        return 1;
    }
    int64_t off[N_PROMPTS + 1];
    int32_t *tok;
    make_prompts(off, &tok);
    df_sampling_params sp;
    df_sampling_params_defaults(&sp);
    sp.max_new_tokens = max_new;
    sp.top_p = 0.95f; /* exercise the nucleus path as a GRPO run would */
    sp.ignore_eos = true;
    df_rollout_request q = {N_PROMPTS, off, tok, N_SAMPLES, 1, NULL};

    df_rollout_engine *big = NULL, *one = NULL;
    if (df_rollout_engine_create(&c, N_PROMPTS * N_SAMPLES, MAX_SEQ_LEN, &big) ||
        df_rollout_engine_create(&c, 1, MAX_SEQ_LEN, &one)) {
        fprintf(stderr, "engine: %s\n", df_last_error());
        return 1;
    }
    printf("threads: %d\n", omp_get_max_threads());
    printf("model_params: %lld\n", (long long)m->n_params);
    printf("engine_bytes: %lld\n", (long long)df_rollout_engine_bytes(&c, 256, MAX_SEQ_LEN));
    df_rollout_stats st;
    df_rollout_request warm = q;
    warm.n_prompts = 2;
    if (timed(big, m, &warm, &sp, &st) < 0)
        return 1;
    double best = 0.0;
    for (int rep = 0; rep < 2; rep++) {
        double tps = timed(big, m, &q, &sp, &st);
        if (tps < 0)
            return 1;
        best = tps > best ? tps : best;
    }
    printf("batched_sequences: %d\n", N_PROMPTS * N_SAMPLES);
    printf("batched_generated_tokens: %lld\n", (long long)st.generated_tokens);
    printf("batched_seconds: %.3f\n", st.seconds);
    printf("batched_mean_active: %.1f\n", st.mean_active);
    printf("batched_prefill_tokens: %lld\n", (long long)st.prefill_tokens);
    printf("batched_tokens_per_s: %.0f\n", best);

    /* baseline: the same engine one sequence at a time */
    df_rollout_request b = q;
    b.n_prompts = (base_seqs + N_SAMPLES - 1) / N_SAMPLES;
    double base = timed(one, m, &b, &sp, &st);
    if (base < 0)
        return 1;
    printf("baseline_one_seq_sequences: %lld\n", (long long)(b.n_prompts * N_SAMPLES));
    printf("baseline_one_seq_tokens_per_s: %.0f\n", base);
    printf("speedup_vs_one_seq: %.1f\n", best / base);
    df_rollout_engine_free(big);
    df_rollout_engine_free(one);
    df_model_free(m);
    free(tok);
    return 0;
}
