/*
 * Optimizer tests (include/distflow/optim.h): AdamW against values printed by
 * torch.optim.AdamW (torch 1.13, float32), clipping against
 * torch.nn.utils.clip_grad_norm_ by hand, and verl's schedules at chosen steps.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "distflow/optim.h"
#include "tolerance.h"

#include <math.h>
#include <string.h>

/*
 * Two float32 AdamW implementations (ours and torch's, the same operations, perhaps
 * not in the same order) differ per step by at most twice one's rounding: p (1 - lr wd)
 * with the rounded factor (gamma_3 |p|, the final subtraction included), and the
 * update lr m / (sqrt(v) / bc2 + eps) with its eleven operations, whose m and v carry
 * a few more roundings per step (gamma_{12 + 5 s} lr |phi|); errors of earlier steps
 * carry over. phi, p in double here.
 */
static void test_adamw_matches_torch(void **state)
{
    (void)state;
    /* torch.optim.AdamW([p], betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1), the lr
     * changed before each step to 0.01, 0.005, 0.02. */
    const float g[3][4] = {{0.1f, -0.2f, 3.0f, 0.0f}, {-0.4f, 0.5f, 1.0f, 1e-3f},
                           {0.2f, 0.2f, -2.0f, 0.0f}};
    const double lr[3] = {0.01, 0.005, 0.02};
    const float want[3][4] = {{0.489500105f, -0.989000082f, 1.98800004f, 0.0f},
                              {0.492297441f, -0.990981281f, 1.98277378f, -0.00391301792f},
                              {0.493046552f, -1.00066447f, 1.97607148f, -0.0152434539f}};
    df_adamw_config c = {0.8, 0.99, 1e-6, 0.1};
    df_adamw *o;
    assert_int_equal(df_adamw_create(&c, 4, &o), DF_OK);
    float p[4] = {0.5f, -1.0f, 2.0f, 0.0f};
    double pd[4] = {0.5, -1.0, 2.0, 0.0}, md[4] = {0}, vd[4] = {0}, bound[4] = {0}, worst = 0;
    for (int s = 0; s < 3; s++) {
        assert_int_equal(df_adamw_step(o, p, g[s], lr[s]), DF_OK);
        const double bc1 = 1 - pow(c.beta1, s + 1), bc2 = sqrt(1 - pow(c.beta2, s + 1));
        for (int i = 0; i < 4; i++) {
            md[i] = c.beta1 * md[i] + (1 - c.beta1) * g[s][i];
            vd[i] = c.beta2 * vd[i] + (1 - c.beta2) * g[s][i] * g[s][i];
            double phi = md[i] / bc1 / (sqrt(vd[i]) / bc2 + c.eps);
            bound[i] += 2 * (df_tol_gamma(3, DF_U32) * fabs(pd[i]) +
                             lr[s] * df_tol_gamma(12 + 5 * s, DF_U32) * fabs(phi));
            pd[i] = pd[i] * (1 - lr[s] * c.weight_decay) - lr[s] * phi;
            assert_true(fabsf(p[i] - want[s][i]) <= bound[i]);
            if (bound[i] > 0)
                worst = fmax(worst, fabsf(p[i] - want[s][i]) / bound[i]);
        }
    }
    print_message("AdamW against torch: worst error / bound %.3f\n", worst);
    assert_int_equal(o->step, 3);
    /* The state is the checkpoint: m after three steps, by hand for element 0. */
    double m0 = 0.0, em = 0.0;
    for (int s = 0; s < 3; s++) {
        /* float: beta1 and 1 - beta1 rounded, two products and a sum */
        em = 0.8 * em + df_tol_gamma(5, DF_U32) * (0.8 * fabs(m0) + 0.2 * fabs(g[s][0]));
        m0 = 0.8 * m0 + 0.2 * g[s][0];
    }
    assert_true(fabs(o->m[0] - m0) <= em);
    df_adamw_reset(o);
    assert_int_equal(o->step, 0);
    assert_true(o->m[2] == 0.0f && o->v[2] == 0.0f);
    assert_int_equal(df_adamw_step(o, p, g[0], -1.0), DF_EINVAL);
    assert_int_equal(df_adamw_step(o, p, g[0], NAN), DF_EINVAL);
    df_adamw_free(o);
}

/* The step is torch's float32 formula, operation for operation: a scalar loop of those
 * operations gives the same bits for p, m and v (the kernel is vectorized, optim_step.c),
 * over a vector body and a tail, magnitudes from 2^-40 to 2^30, zeros, inf and NaN. */
static void test_adamw_bits(void **state)
{
    (void)state;
    enum { N = 1037 };
    df_adamw_config c = {0.9, 0.999, 1e-8, 0.01};
    df_adamw *o;
    assert_int_equal(df_adamw_create(&c, N, &o), DF_OK);
    static float p[N], g[N], rp[N], rm[N], rv[N];
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < N; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        p[i] = rp[i] = ldexpf((float)(x % 2001) / 1000.0f - 1.0f, (int)(x >> 40) % 30 - 15);
        g[i] = ldexpf((float)((x >> 12) % 2001) / 1000.0f - 1.0f, (int)(x >> 50) % 70 - 40);
        rm[i] = rv[i] = 0.0f;
    }
    g[3] = 0.0f, g[4] = -0.0f, g[5] = INFINITY, g[6] = NAN, g[7] = 1e30f, p[8] = rp[8] = 0.0f;
    const double lr[3] = {1e-3, 3e-4, 2e-2};
    for (int s = 0; s < 3; s++) {
        assert_int_equal(df_adamw_step(o, p, g, lr[s]), DF_OK);
        const double t = s + 1;
        const float decay = (float)(1.0 - lr[s] * c.weight_decay), b1 = (float)c.beta1;
        const float b2 = (float)c.beta2, omb1 = (float)(1.0 - c.beta1);
        const float omb2 = (float)(1.0 - c.beta2), eps = (float)c.eps;
        const float step = (float)(lr[s] / (1.0 - pow(c.beta1, t)));
        const float bc2 = (float)sqrt(1.0 - pow(c.beta2, t));
        for (int i = 0; i < N; i++) {
            float pi = rp[i] * decay, mi = rm[i] * b1 + g[i] * omb1;
            float vi = rv[i] * b2 + g[i] * g[i] * omb2;
            rm[i] = mi, rv[i] = vi;
            rp[i] = pi - step * (mi / (sqrtf(vi) / bc2 + eps));
        }
        assert_memory_equal(p, rp, sizeof p);
        assert_memory_equal(o->m, rm, sizeof rm);
        assert_memory_equal(o->v, rv, sizeof rv);
    }
    df_adamw_free(o);
}

static void test_adamw_config(void **state)
{
    (void)state;
    df_adamw_config c;
    df_adamw_config_defaults(&c);
    assert_true(c.beta1 == 0.9 && c.beta2 == 0.999 && c.eps == 1e-8 && c.weight_decay == 0.01);
    df_adamw *o = NULL;
    assert_int_equal(df_adamw_create(&c, 0, &o), DF_EINVAL);
    c.beta2 = 1.0;
    assert_int_equal(df_adamw_create(&c, 10, &o), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "betas"));
    df_adamw_config_defaults(&c);
    c.eps = 0.0;
    assert_int_equal(df_adamw_create(&c, 10, &o), DF_EINVAL);
    assert_null(o);
}

static void test_clip_grad_norm(void **state)
{
    (void)state;
    float g[3] = {3.0f, 0.0f, -4.0f};
    double n = df_clip_grad_norm(g, 3, 1.0);
    assert_true(n == 5.0); /* 9 + 16 and its square root are exact */
    float c = (float)(1.0 / (5.0 + 1e-6));
    assert_true(g[0] == 3.0f * c && g[2] == -4.0f * c && g[1] == 0.0f);
    /* Below the threshold: untouched (torch's clamped coefficient is 1). */
    float h[2] = {0.3f, 0.4f};
    /* the norm of the floats nearest 0.3 and 0.4 (about 0.5 + 1.2e-8), to the double sum's
       and square root's rounding */
    const double nh = sqrt((double)h[0] * h[0] + (double)h[1] * h[1]);
    assert_true(fabs(df_clip_grad_norm(h, 2, 1.0) - nh) <= df_tol_gamma(3, DF_U64) * nh);
    assert_true(h[0] == 0.3f && h[1] == 0.4f);
    /* Non-finite: reported, grads untouched so the caller can skip the step. */
    float bad[3] = {1.0f, INFINITY, 2.0f};
    assert_true(isinf(df_clip_grad_norm(bad, 3, 1.0)));
    assert_true(bad[0] == 1.0f && bad[2] == 2.0f);
    bad[1] = NAN;
    assert_true(isnan(df_clip_grad_norm(bad, 3, 1.0)));
    assert_true(bad[0] == 1.0f);
    /* max_norm <= 0: measure only. */
    float k[2] = {30.0f, 40.0f};
    assert_true(df_clip_grad_norm(k, 2, 0.0) == 50.0 && k[0] == 30.0f); /* 2500, exact */
}

/* f = cos(a) coef + intercept in double against an expected value written in double:
   a = pi cycles 2 progress (four roundings, so cos moves by 4 u |a| plus its 1 ulp),
   coef and intercept (two roundings each), the product and the sum; the expected value
   its own few roundings. */
static double sched_tol(double a, double coef, double intercept, double want)
{
    return df_tol_gamma(4, DF_U64) * (2 + fabs(a)) * fabs(coef) +
           df_tol_gamma(4, DF_U64) * (fabs(intercept) + 2 * fabs(want));
}

static void test_schedules(void **state)
{
    (void)state;
    df_lr_schedule s = {DF_LR_CONSTANT, 10, 100, 0.0, 0.5};
    assert_true(df_lr_schedule_factor(&s, 0) == 0.0);
    assert_true(df_lr_schedule_factor(&s, 5) == 0.5); /* 5 / 10, exact */
    assert_true(df_lr_schedule_factor(&s, 10) == 1.0);
    assert_true(df_lr_schedule_factor(&s, 1000) == 1.0);
    s.warmup_steps = 0; /* no warmup: full lr from the first step */
    assert_true(df_lr_schedule_factor(&s, 0) == 1.0);

    /* Cosine: warmup 2, 12 steps, floor 0.1, half a cycle. */
    df_lr_schedule c = {DF_LR_COSINE, 2, 12, 0.1, 0.5};
    assert_true(df_lr_schedule_factor(&c, 1) == 0.5); /* 1 / 2, exact */
    assert_true(fabs(df_lr_schedule_factor(&c, 2) - 1.0) <= sched_tol(0, 0.45, 0.55, 1.0));
    assert_true(fabs(df_lr_schedule_factor(&c, 7) - 0.55) <= sched_tol(M_PI / 2, 0.45, 0.55, 0.55)); /* cos(pi/2) = 0 */
    assert_true(fabs(df_lr_schedule_factor(&c, 12) - 0.1) <= sched_tol(M_PI, 0.45, 0.55, 0.1)); /* cos(pi) = -1 */
    double f4 = 0.45 * cos(M_PI * 0.2) + 0.55;                        /* progress 0.2 */
    assert_true(fabs(df_lr_schedule_factor(&c, 4) - f4) <= sched_tol(0.2 * M_PI, 0.45, 0.55, f4));
    /* One full cycle comes back up. */
    df_lr_schedule w = {DF_LR_COSINE, 0, 10, 0.0, 1.0};
    assert_true(fabs(df_lr_schedule_factor(&w, 10) - 1.0) <= sched_tol(2 * M_PI, 0.5, 0.5, 1.0));
    assert_true(fabs(df_lr_schedule_factor(&w, 5)) <= sched_tol(M_PI, 0.5, 0.5, 0.0));

    /* WSD (verl's get_wsd_schedule_with_warmup): warmup 2, 22 steps, floor 0.1: of the 20 after
       warmup floor(0.9 x 20) = 18 stable (steps 2..19), 2 of decay (20, 21), then the floor. */
    df_lr_schedule d = {DF_LR_WSD, 2, 22, 0.1, 0.5};
    assert_true(df_lr_schedule_factor(&d, 1) == 0.5);
    assert_true(df_lr_schedule_factor(&d, 2) == 1.0 && df_lr_schedule_factor(&d, 19) == 1.0);
    assert_true(fabs(df_lr_schedule_factor(&d, 20) - 1.0) <= sched_tol(0, 0.45, 0.55, 1.0));
    assert_true(fabs(df_lr_schedule_factor(&d, 21) - 0.55) <= sched_tol(M_PI / 2, 0.45, 0.55, 0.55));
    assert_true(df_lr_schedule_factor(&d, 22) == 0.1 && df_lr_schedule_factor(&d, 500) == 0.1);
    /* floor(0.9 x 7) = 6 stable steps after a warmup of 0: steps 0..5 at the peak, 6 the decay's start */
    df_lr_schedule e = {DF_LR_WSD, 0, 7, 0.0, 0.5};
    assert_true(df_lr_schedule_factor(&e, 5) == 1.0);
    assert_true(fabs(df_lr_schedule_factor(&e, 6) - 1.0) <= sched_tol(0, 0.5, 0.5, 1.0));
    assert_true(df_lr_schedule_factor(&e, 7) == 0.0);

    df_lr_kind k;
    assert_int_equal(df_lr_kind_parse("cosine", &k), DF_OK);
    assert_int_equal(k, DF_LR_COSINE);
    assert_int_equal(df_lr_kind_parse("constant", &k), DF_OK);
    assert_int_equal(k, DF_LR_CONSTANT);
    assert_int_equal(df_lr_kind_parse("Cosine ", &k), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "\"Cosine \""));
    assert_int_equal(df_lr_kind_parse(NULL, &k), DF_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adamw_matches_torch),
        cmocka_unit_test(test_adamw_bits),
        cmocka_unit_test(test_adamw_config),
        cmocka_unit_test(test_clip_grad_norm),
        cmocka_unit_test(test_schedules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
