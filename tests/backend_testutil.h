/*
 * backend_testutil.h — what the backend conformance harness (tests/test_backend_ops.c) needs
 * around its references (tests/backend_ref.h): the backends of this build, buffers in a
 * backend's memory that fail the test on error, the elementwise check against a reference and
 * its bound, and the per-operator summary of the worst error / bound. Include after cmocka.h.
 */
#ifndef DF_TESTS_BACKEND_TESTUTIL_H
#define DF_TESTS_BACKEND_TESTUTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_ref.h"
#include "distflow/backend.h"
#include "distflow/rng.h"
#ifdef DF_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

/* ---- backends and their memory --------------------------------------------------------------- */

typedef struct {
    const char *name;
    df_backend be;
} bo_backend;

static bo_backend bo_list[8];
static int bo_n;

#define BO_OK(call)                                                                    \
    do {                                                                               \
        int bo_rc_ = (call);                                                           \
        if (bo_rc_ != DF_OK)                                                           \
            fail_msg("%s -> %d: %s", #call, bo_rc_, df_last_error());                  \
    } while (0)

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    assert_non_null(p);
    return p;
}

/* A backend buffer holding a copy of host memory. */
static void *bo_up(const bo_backend *b, const void *h, size_t bytes)
{
    void *d = NULL;
    BO_OK(b->be.ops->alloc(b->be.ctx, bytes, &d));
    assert_non_null(d);
    if (bytes)
        BO_OK(b->be.ops->upload(b->be.ctx, d, h, bytes));
    return d;
}

/* n floats of backend memory holding NaN: an output the operator does not write shows. */
static float *bo_nan(const bo_backend *b, int64_t n)
{
    float *h = xmalloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        h[i] = NAN;
    float *d = bo_up(b, h, sizeof(float) * (size_t)n);
    free(h);
    return d;
}

/* A host copy (malloc) of backend memory, after every earlier call (sync first). */
static void *bo_down(const bo_backend *b, const void *d, size_t bytes)
{
    void *h = xmalloc(bytes);
    BO_OK(b->be.ops->sync(b->be.ctx));
    if (bytes)
        BO_OK(b->be.ops->download(b->be.ctx, h, d, bytes));
    return h;
}

static void bo_free(const bo_backend *b, void *d) { b->be.ops->release(b->be.ctx, d); }

/* x[n] ~ N(0, scale^2) from a seeded distflow RNG. */
static float *bo_rand(int64_t n, uint64_t seed, double scale)
{
    float *x = xmalloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    df_rng r;
    df_rng_seed(&r, df_rng_key(seed, 14, 0, 0));
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(df_rng_normal(&r) * scale);
    return x;
}

static double *to_d(const float *x, int64_t n)
{
    double *d = br_dvec(n);
    for (int64_t i = 0; i < n; i++)
        d[i] = x[i];
    return d;
}

static float *to_f(const double *x, int64_t n)
{
    float *f = xmalloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++)
        f[i] = (float)x[i];
    return f;
}

/* ---- the summary: worst error / bound per backend and operator --------------------------------- */

typedef struct {
    char be[16], op[48];
    double worst;
    int64_t n;
} bo_rec;

static bo_rec bo_recs[160];
static int bo_nrec;

static void bo_note(const char *be, const char *op, double ratio, int64_t n)
{
    for (int i = 0; i < bo_nrec; i++)
        if (!strcmp(bo_recs[i].be, be) && !strcmp(bo_recs[i].op, op)) {
            bo_recs[i].worst = fmax(bo_recs[i].worst, ratio);
            bo_recs[i].n += n;
            return;
        }
    assert_true(bo_nrec < (int)(sizeof bo_recs / sizeof bo_recs[0]));
    bo_rec *r = &bo_recs[bo_nrec++];
    snprintf(r->be, sizeof r->be, "%s", be);
    snprintf(r->op, sizeof r->op, "%s", op);
    r->worst = ratio, r->n = n;
}

/*
 * |got[i] - ref[i]| <= bound[i] for every i, got finite (a bound of 0: equal bit for bit, up to
 * the sign of zero). Records the worst ratio under (backend, op).
 */
static void bo_check(const char *be, const char *op, const float *got, const double *ref,
                     const double *bound, int64_t n)
{
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        const double e = fabs((double)got[i] - ref[i]);
        if (!isfinite(got[i]) || !(e <= bound[i]))
            fail_msg("%s %s[%lld] = %.9g, reference %.9g: error %.3g above its bound %.3g", be,
                     op, (long long)i, (double)got[i], ref[i], e, bound[i]);
        if (bound[i] > 0)
            worst = fmax(worst, e / bound[i]);
    }
    bo_note(be, op, worst, n);
}

/* A finite-difference check of a reference backward (in double): records slope error / bound. */
static void bo_fd(const char *op, double an, double fd, double bound)
{
    if (!(fabs(an - fd) <= bound))
        fail_msg("reference %s: directional derivative %.12g, finite difference %.12g: error "
                 "%.3g above its bound %.3g", op, an, fd, fabs(an - fd), bound);
    bo_note("ref-fd", op, fabs(an - fd) / bound, 1);
}

/* sum_i g[i] u[i] in double and the bound of that dot's rounding, gamma_n(u64) sum |g u|. */
static double dot_b(const double *g, const double *u, int64_t n, double *b)
{
    double s = 0, m = 0;
    for (int64_t i = 0; i < n; i++)
        s += g[i] * u[i], m += fabs(g[i] * u[i]);
    *b += df_tol_gamma((double)n, DF_U64) * m;
    return s;
}

static int print_summary(void **state)
{
    (void)state;
    printf("\nbackend conformance: worst |error| / bound per operator (elements checked)\n");
    for (int i = 0; i < bo_nrec; i++)
        printf("  %-8s %-34s %8.3e  (%lld)\n", bo_recs[i].be, bo_recs[i].op, bo_recs[i].worst,
               (long long)bo_recs[i].n);
    return 0;
}

/* Every backend of this build; one that cannot open here (no GPU) is skipped with a line. */
static void open_backends(void)
{
#ifdef DF_HAVE_CUDA
    df_backend_register("cuda", df_backend_cuda_open);
#endif
    bo_list[bo_n++] = (bo_backend){"cpu", df_backend_cpu()};
    char names[256];
    snprintf(names, sizeof names, "%s", df_backend_names());
    for (char *save = NULL, *t = strtok_r(names, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
        if (!strcmp(t, "cpu"))
            continue;
        df_backend be;
        if (df_backend_open(t, &be) != DF_OK) {
            printf("SKIP: backend %s: %s\n", t, df_last_error());
            continue;
        }
        static char names_kept[8][32];
        snprintf(names_kept[bo_n], sizeof names_kept[bo_n], "%s", t);
        bo_list[bo_n] = (bo_backend){names_kept[bo_n], be};
        bo_n++;
    }
    printf("backends: %s (checked:", df_backend_names());
    for (int i = 0; i < bo_n; i++)
        printf(" %s", bo_list[i].name);
    printf(")\n");
}

#endif /* DF_TESTS_BACKEND_TESTUTIL_H */
