/*
 * bench/rollout.c — generated tokens per second of df_rollout_generate.
 *
 * Default: a demo-sized random model (hidden 256, 4 layers, vocab 600, ~2.9M
 * params), 32 prompts x n = 8 = 256 sequences decoded together with top_p 0.95.
 * --qwen2-tiny: the shapes of examples/models/qwen2-tiny.json (vocab 151,936,
 * hidden 64, 2 layers, tied embeddings), 16 prompts x n = 4 as in
 * examples/gsm8k/grpo.yaml, top_p 1 (verl's default): the large-vocabulary
 * path, where the LM head and sampling are nearly all the work.
 *
 * Baselines measured in the same run:
 *  - one_seq: the same engine with max_num_seqs = 1, i.e. one sequence at a
 *    time (on the first baseline_seqs sequences, to keep it short);
 *  - full_logits (when top_p = 1): the same request with top_p = 1 - 2^-24,
 *    which keeps practically every token but takes the sampler that
 *    materialises each row of logits and filters it (the pre-fusion path).
 *
 * Usage: bench_rollout [max_new_tokens (64)] [baseline_seqs (16)] [--qwen2-tiny]
 *        [--top-p P]
 * Prints `metric: value` lines.
 */
#include "distflow/model.h"
#include "distflow/platform.h"
#include "distflow/rollout.h"
#include "distflow/rng.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAX_SEQ_LEN = 192 };

typedef struct {
    int64_t max_new, base_seqs, n_prompts, n_samples;
    int qwen2_tiny;
    float top_p;
} bench_cfg;

static int parse(int argc, char **argv, bench_cfg *b)
{
    *b = (bench_cfg){64, 16, 32, 8, 0, -1.0f};
    int pos = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--qwen2-tiny"))
            b->qwen2_tiny = 1;
        else if (!strcmp(argv[i], "--top-p") && i + 1 < argc)
            b->top_p = (float)atof(argv[++i]);
        else if (argv[i][0] != '-' && pos < 2)
            *(pos++ == 0 ? &b->max_new : &b->base_seqs) = atoll(argv[i]);
        else
            return 1;
    }
    if (b->qwen2_tiny)
        b->n_prompts = 16, b->n_samples = 4;
    if (b->top_p < 0.0f)
        b->top_p = b->qwen2_tiny ? 1.0f : 0.95f; /* the nucleus path, as a GRPO run may use */
    return b->max_new < 1 || b->base_seqs < 1 || !(b->top_p > 0.0f && b->top_p <= 1.0f);
}

static int bench_config(const bench_cfg *b, df_model_config *c)
{
    df_model_config_defaults(c);
    if (b->qwen2_tiny) {
        c->vocab_size = 151936;
        c->hidden_size = 64;
        c->intermediate_size = 192;
        c->num_hidden_layers = 2;
        c->num_attention_heads = 4;
        c->num_key_value_heads = 2;
        c->head_dim = 16;
        c->rope_theta = 1e6;
    } else {
        c->vocab_size = 600;
        c->hidden_size = 256;
        c->intermediate_size = 704;
        c->num_hidden_layers = 4;
        c->num_attention_heads = 4;
        c->num_key_value_heads = 2;
        c->head_dim = 64;
    }
    c->max_position_embeddings = 1024;
    c->tie_word_embeddings = true;
    c->n_eos = 0;
    return df_model_config_validate(c);
}

/* Prompts of 32..64 tokens below token id 600 (any vocabulary here has them). */
static void make_prompts(int64_t n, int64_t *off, int32_t **tok)
{
    df_rng r;
    df_rng_seed(&r, 2024);
    off[0] = 0;
    for (int64_t i = 0; i < n; i++)
        off[i + 1] = off[i] + 32 + (int64_t)df_rng_below(&r, 33);
    *tok = malloc((size_t)off[n] * sizeof(int32_t));
    for (int64_t t = 0; t < off[n]; t++)
        (*tok)[t] = (int32_t)df_rng_below(&r, 600);
}

/* CPU seconds of all threads: the work done, whatever the waiting on a shared machine. */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
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
    bench_cfg bc;
    if (parse(argc, argv, &bc)) {
        fprintf(stderr, "usage: bench_rollout [max_new_tokens] [baseline_seqs] [--qwen2-tiny] "
                        "[--top-p P]\n");
        return 2;
    }
    df_model_config c;
    df_model *m = NULL;
    if (bench_config(&bc, &c) || df_model_create(&c, &m) || df_model_init_random(m, 7)) {
        fprintf(stderr, "model: %s\n", df_last_error());
        return 1;
    }
    const int64_t NP = bc.n_prompts, NS = bc.n_samples;
    int64_t *off = malloc((size_t)(NP + 1) * sizeof(int64_t));
    int32_t *tok;
    make_prompts(NP, off, &tok);
    df_sampling_params sp;
    df_sampling_params_defaults(&sp);
    sp.max_new_tokens = bc.max_new;
    sp.top_p = bc.top_p;
    sp.ignore_eos = true;
    df_rollout_request q = {NP, off, tok, NS, 1, NULL, NULL};

    df_rollout_engine *big = NULL, *one = NULL;
    if (df_rollout_engine_create(&c, NP * NS, MAX_SEQ_LEN, &big) ||
        df_rollout_engine_create(&c, 1, MAX_SEQ_LEN, &one)) {
        fprintf(stderr, "engine: %s\n", df_last_error());
        return 1;
    }
    printf("config: vocab %lld hidden %lld layers %lld, %lld prompts x %lld samples, %lld new "
           "tokens, top_p %g\n",
           (long long)c.vocab_size, (long long)c.hidden_size, (long long)c.num_hidden_layers,
           (long long)NP, (long long)NS, (long long)bc.max_new, (double)sp.top_p);
    printf("threads: %d\n", omp_get_max_threads());
    printf("kernels: %s (%s)\n", df_kernels_active(), df_kernels_reason());
    printf("model_params: %lld\n", (long long)m->n_params);
    printf("engine_bytes: %lld\n", (long long)df_rollout_engine_bytes(&c, NP * NS, MAX_SEQ_LEN));
    df_rollout_stats st;
    df_rollout_request warm = q;
    warm.n_prompts = 2;
    if (timed(big, m, &warm, &sp, &st) < 0)
        return 1;
    double best = 0.0, cpu0 = cpu_s(), toks = 0.0;
    for (int rep = 0; rep < 2; rep++) {
        double tps = timed(big, m, &q, &sp, &st);
        if (tps < 0)
            return 1;
        best = tps > best ? tps : best;
        toks += (double)st.generated_tokens;
    }
    double cpu = cpu_s() - cpu0;
    printf("batched_sequences: %lld\n", (long long)(NP * NS));
    printf("batched_generated_tokens: %lld\n", (long long)st.generated_tokens);
    printf("batched_seconds: %.3f\n", st.seconds);
    printf("batched_mean_active: %.1f\n", st.mean_active);
    printf("batched_prefill_tokens: %lld\n", (long long)st.prefill_tokens);
    printf("batched_tokens_per_s: %.0f\n", best);
    printf("batched_tokens_per_cpu_s: %.0f\n", toks / cpu);

    if (sp.top_p == 1.0f) { /* baseline: sampling from materialised logits rows */
        df_sampling_params fl = sp;
        fl.top_p = 1.0f - 0x1p-24f;
        double full = timed(big, m, &q, &fl, &st);
        if (full < 0)
            return 1;
        printf("baseline_full_logits_tokens_per_s: %.0f\n", full);
        printf("speedup_vs_full_logits: %.2f\n", best / full);
    }

    /* baseline: the same engine one sequence at a time */
    df_rollout_request b = q;
    b.n_prompts = (bc.base_seqs + NS - 1) / NS;
    double base = timed(one, m, &b, &sp, &st);
    if (base < 0)
        return 1;
    printf("baseline_one_seq_sequences: %lld\n", (long long)(b.n_prompts * NS));
    printf("baseline_one_seq_tokens_per_s: %.0f\n", base);
    printf("speedup_vs_one_seq: %.1f\n", best / base);
    df_rollout_engine_free(big);
    df_rollout_engine_free(one);
    df_model_free(m);
    free(tok);
    free(off);
    return 0;
}
