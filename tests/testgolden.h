/*
 * testgolden.h — the golden fixtures written by tests/golden/gen_golden.py:
 * reading float vectors from an expected-values safetensors file, the
 * packed batch stored in it (batch.tokens, batch.seq_offsets, batch.out_rows
 * and, when present, batch.out_targets), and the relative L2 error used to
 * compare against the PyTorch reference, with its bound. Include after cmocka.h.
 */
#ifndef DF_TESTS_TESTGOLDEN_H
#define DF_TESTS_TESTGOLDEN_H

#include "distflow/model.h"
#include "model/hf_io.h"
#include "model/safetensors.h"
#include "tolerance.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/** Tensor `name` of f as floats (malloc'd); its element count into *numel when non-NULL. */
static inline float *df_golden_read_vec(df_st_file *f, const char *name, int64_t *numel)
{
    df_st_tensor t;
    if (df_st_find(f, name, &t))
        fail_msg("%s", df_last_error());
    int64_t n = df_st_numel(&t);
    float *v = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    assert_non_null(v);
    assert_int_equal(df_st_read_f32(f, name, v, n), DF_OK);
    if (numel)
        *numel = n;
    return v;
}

/** ||a - b|| / ||b|| over n floats. */
static inline double df_golden_rel_err(const float *a, const float *b, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return sqrt(num) / (sqrt(den) + 1e-30);
}

/** An expected-values file and the packed batch it holds. */
typedef struct df_golden_batch {
    df_st_file *exp;
    int64_t T, n_seqs, n_out;
    int32_t *tokens, *targets; /* targets NULL when the file has no batch.out_targets */
    int64_t *offsets, *rows;
    df_seq_batch b;
} df_golden_batch;

static inline int64_t *df_golden_ids64(df_st_file *f, const char *name, int64_t *n)
{
    float *v = df_golden_read_vec(f, name, n);
    int64_t *out = malloc(sizeof(int64_t) * (size_t)(*n > 0 ? *n : 1));
    assert_non_null(out);
    for (int64_t i = 0; i < *n; i++)
        out[i] = (int64_t)v[i];
    free(v);
    return out;
}

static inline int32_t *df_golden_ids32(df_st_file *f, const char *name, int64_t *n)
{
    float *v = df_golden_read_vec(f, name, n);
    int32_t *out = malloc(sizeof(int32_t) * (size_t)(*n > 0 ? *n : 1));
    assert_non_null(out);
    for (int64_t i = 0; i < *n; i++)
        out[i] = (int32_t)v[i];
    free(v);
    return out;
}

/** Open `path` and read its batch into g (fails the test on error). */
static inline void df_golden_batch_load(df_golden_batch *g, const char *path)
{
    memset(g, 0, sizeof *g);
    if (df_st_open(path, &g->exp))
        fail_msg("%s", df_last_error());
    int64_t n;
    df_st_tensor t;
    g->tokens = df_golden_ids32(g->exp, "batch.tokens", &g->T);
    g->offsets = df_golden_ids64(g->exp, "batch.seq_offsets", &n);
    g->n_seqs = n - 1;
    g->rows = df_golden_ids64(g->exp, "batch.out_rows", &g->n_out);
    if (!df_st_find(g->exp, "batch.out_targets", &t))
        g->targets = df_golden_ids32(g->exp, "batch.out_targets", &n);
    g->b = (df_seq_batch){g->T, g->tokens, g->n_seqs, g->offsets, g->n_out, g->rows, g->targets, NULL, NULL};
}

static inline void df_golden_batch_free(df_golden_batch *g)
{
    df_st_close(g->exp);
    free(g->tokens), free(g->targets), free(g->offsets), free(g->rows);
}

/** The longest sequence of g: attention's key count. */
static inline int64_t df_golden_max_len(const df_golden_batch *g)
{
    int64_t L = 1;
    for (int64_t s = 0; s < g->n_seqs; s++)
        L = g->offsets[s + 1] - g->offsets[s] > L ? g->offsets[s + 1] - g->offsets[s] : L;
    return L;
}

/**
 * The largest df_golden_rel_err of grads ([n_params], m's layout) against the fixture's
 * "grad.<tensor>" times `scale`, over every tensor of m; its tensor's name into *worst_name
 * (may be NULL). A NaN counts as the largest.
 */
static inline double df_golden_worst_grad(const df_model *m, df_st_file *f, const float *grads,
                                          float scale, const char **worst_name)
{
    /* by the checkpoint's names: a phi3 fixture holds the gradients of its fused projections */
    df_hf_tensor *hf = NULL;
    int n_hf = 0;
    if (df_hf_tensor_table(m, &hf, &n_hf))
        return INFINITY;
    static char worst_buf[96];
    double worst = 0;
    for (int i = 0; i < n_hf; i++) {
        const df_hf_tensor *h = &hf[i];
        char name[128];
        snprintf(name, sizeof name, "grad.%s", h->name);
        float *want = df_golden_read_vec(f, name, NULL), *got = malloc(sizeof(float) * (size_t)h->numel);
        for (int64_t k = 0, at = 0; k < h->n_parts; k++) {
            const df_param_desc *t = &m->tensors[h->part[k]];
            memcpy(got + at, grads + t->offset, sizeof(float) * (size_t)t->numel);
            at += t->numel;
        }
        for (int64_t j = 0; j < h->numel; j++)
            want[j] *= scale;
        double e = df_golden_rel_err(got, want, h->numel);
        if (!(e <= worst)) {
            worst = e;
            snprintf(worst_buf, sizeof worst_buf, "%s", h->name);
            if (worst_name)
                *worst_name = worst_buf;
        }
        free(want);
        free(got);
    }
    free(hf);
    return worst;
}

/**
 * Bound of df_golden_rel_err for a float32 computation of n chained roundings (a deep one:
 * tests/testbounds.h's chains) against the float64 reference stored as F32: the probabilistic
 * bound, the reference's rounding to F32 (u) and its own float64 computation (gamma_n of double).
 */
static inline double df_golden_tol(double n)
{
    return df_tol_gamma_prob(n, DF_TOL_LAMBDA, DF_U32) + DF_U32 + df_tol_gamma(n, DF_U64);
}

#endif
