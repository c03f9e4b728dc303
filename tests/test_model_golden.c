/*
 * Whole-model test against PyTorch (tests/golden/gen_golden.py, float64
 * reference of HF modeling_qwen2.py): logits, log-probs and entropies at two
 * temperatures, the gradient of sum(c logp) + sum(d entropy) w.r.t. every
 * parameter, the clipped global norm and one AdamW step.
 *
 * Tolerances (relative L2 per output vector / gradient tensor): a whole model
 * is a deep computation, so they are the probabilistic bound of Higham & Mary
 * (df_tol_gamma_prob, lambda = 6: each output within it with probability
 * 1 - 3e-8 when the roundings are independent and mean-independent) over the
 * roundings on the longest path through the model (df_tol_decoder_*_chain:
 * the K of every GEMM, the keys of attention, H of each RMSNorm, V of the
 * log-softmax), plus the reference's rounding to F32 in the fixture (u) and
 * gamma_n of double for its own float64 computation: df_golden_tol.
 *
 * Can it fail? Unlike llm.c's CPU test it must: test_golden_detects_perturbation
 * moves a single weight by 1e-3 (its gradients move by 1e-3 relative, 70x the
 * gradient bound) and by 1e-2 (log-probs move by 9e-5, 9x the forward bound; the
 * 1e-3 change moves them by 9e-6, which a bound for a 725-rounding float32 chain
 * cannot tell from rounding), a single bias by 1e-2, and changes rope_theta to
 * check that position handling is visible; the same comparisons must then exceed
 * their bounds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "distflow/model.h"
#include "distflow/optim.h"
#include "model/acts.h"
#include "model/ops.h"
#include "model/safetensors.h"
#include "testbounds.h"
#include "testgolden.h"
#include "tolerance.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GOLDEN_DIR DF_SOURCE_DIR "/tests/golden"

typedef struct {
    df_model *m;
    df_golden_batch gb;
} golden;

#define FWD_TOL df_golden_tol(tb_logp_chain(&g->m->cfg, df_golden_max_len(&g->gb)))
#define LOGITS_TOL df_golden_tol(tb_head_chain(&g->m->cfg, df_golden_max_len(&g->gb)))
#define GRAD_TOL df_golden_tol(tb_grad_chain(&g->m->cfg, df_golden_max_len(&g->gb), g->gb.T))

static int load_golden(void **state)
{
    golden *g = calloc(1, sizeof *g);
    if (!g || df_model_load(GOLDEN_DIR "/tiny_qwen2", &g->m)) {
        fprintf(stderr, "golden fixtures: %s\n", df_last_error());
        return -1;
    }
    df_golden_batch_load(&g->gb, GOLDEN_DIR "/tiny_qwen2_expected.safetensors");
    *state = g;
    return 0;
}

static int free_golden(void **state)
{
    golden *g = *state;
    df_model_free(g->m);
    df_golden_batch_free(&g->gb);
    free(g);
    return 0;
}

/* Max relative L2 error of logp / entropy at both temperatures. */
static double forward_error(const df_model *m, const golden *g)
{
    df_acts *a;
    assert_int_equal(df_acts_create(&m->cfg, g->gb.T, g->gb.n_out, &a), DF_OK);
    float *lp = malloc(sizeof(float) * (size_t)g->gb.n_out), *en = malloc(sizeof(float) * (size_t)g->gb.n_out);
    double worst = 0;
    const char *names[2][2] = {{"logp.t1", "entropy.t1"}, {"logp.t07", "entropy.t07"}};
    const float temps[2] = {1.0f, 0.7f};
    for (int k = 0; k < 2; k++) {
        assert_int_equal(df_model_forward(m, a, &g->gb.b, temps[k], lp, en), DF_OK);
        float *el = df_golden_read_vec(g->gb.exp, names[k][0], NULL), *ee = df_golden_read_vec(g->gb.exp, names[k][1], NULL);
        double e1 = df_golden_rel_err(lp, el, g->gb.n_out), e2 = df_golden_rel_err(en, ee, g->gb.n_out);
        worst = fmax(worst, fmax(e1, e2));
        free(el), free(ee);
    }
    free(lp), free(en);
    df_acts_free(a);
    return worst;
}

static void test_golden_forward(void **state)
{
    golden *g = *state;
    double err = forward_error(g->m, g);
    print_message("logp/entropy rel err %.2e, bound %.2e\n", err, FWD_TOL);
    assert_true(err <= FWD_TOL);

    /* Full logits of a few output rows: final-normed hidden rows times lm_head. */
    df_acts *a;
    assert_int_equal(df_acts_create(&g->m->cfg, g->gb.T, g->gb.n_out, &a), DF_OK);
    float *lp = malloc(sizeof(float) * (size_t)g->gb.n_out);
    assert_int_equal(df_model_forward(g->m, a, &g->gb.b, 1.0f, lp, NULL), DF_OK);
    int64_t nr, nl;
    float *rows = df_golden_read_vec(g->gb.exp, "logits.rows", &nr), *want = df_golden_read_vec(g->gb.exp, "logits", &nl);
    const int64_t V = g->m->cfg.vocab_size, H = g->m->cfg.hidden_size;
    assert_int_equal(nl, nr * V);
    float *got = malloc(sizeof(float) * (size_t)nl);
    for (int64_t r = 0; r < nr; r++)
        df_gemm_nt(1, V, H, 1.0f, a->xnf + (int64_t)rows[r] * H, g->m->w.lm_head, 0.0f,
                   got + r * V);
    double le = df_golden_rel_err(got, want, nl);
    print_message("logits rel err %.2e, bound %.2e\n", le, LOGITS_TOL);
    assert_true(le <= LOGITS_TOL);
    free(lp), free(rows), free(want), free(got);
    df_acts_free(a);
}

/*
 * df_model_forward_head's sum of p^2 (verl's sum_pi_squared) on the rows whose full logits the
 * fixture holds, against sum_v softmax(z)_v^2 of PyTorch's logits in double. Every logit is
 * within dz = LOGITS_TOL ||z|| of the fixture's (the relative L2 bound of all rows, a bound on
 * each entry too) and |d log S / d z_v| = 2 |p_v^2 / S - p_v| sums to <= 4, so log S moves by
 * <= 4 dz; plus the head's own roundings (each weight e^(z - m) relative w = u |z - m| + the
 * exp's error, squared 2 w + u, the sums gamma_V, s0 twice) and the float store. The log-probs are df_model_forward's bit for bit: the extra output changes nothing else.
 */
static void test_golden_sum_pi_squared(void **state)
{
    golden *g = *state;
    const int64_t n = g->gb.n_out, V = g->m->cfg.vocab_size;
    df_acts *a;
    assert_int_equal(df_acts_create(&g->m->cfg, g->gb.T, n, &a), DF_OK);
    float *lp = malloc(sizeof(float) * (size_t)n), *lp0 = malloc(sizeof(float) * (size_t)n);
    float *en = malloc(sizeof(float) * (size_t)n), *sq = malloc(sizeof(float) * (size_t)n);
    assert_int_equal(df_model_forward(g->m, a, &g->gb.b, 1.0f, lp0, NULL), DF_OK);
    const df_head_out out = {.logp = lp, .entropy = en, .sum_pi_sq = sq};
    assert_int_equal(df_model_forward_head(g->m, a, &g->gb.b, 1.0f, &out), DF_OK);
    assert_memory_equal(lp, lp0, (size_t)n * sizeof(float));
    int64_t nr, nl;
    float *rows = df_golden_read_vec(g->gb.exp, "logits.rows", &nr), *z = df_golden_read_vec(g->gb.exp, "logits", &nl);
    double norm = 0;
    for (int64_t k = 0; k < nl; k++)
        norm += (double)z[k] * z[k];
    const double dz = LOGITS_TOL * sqrt(norm), gv = df_tol_gamma((double)V, DF_U32);
    double worst = 0, rel = 0;
    for (int64_t r = 0; r < nr; r++) {
        const float *zr = z + r * V;
        double m = -INFINITY, lo = INFINITY, s = 0, s2 = 0;
        for (int64_t v = 0; v < V; v++)
            m = fmax(m, zr[v]), lo = fmin(lo, zr[v]);
        for (int64_t v = 0; v < V; v++) {
            double e = exp(zr[v] - m);
            s += e, s2 += e * e;
        }
        const double w = DF_U32 * (m - lo + 4 * dz) + DF_TOL_EXPF;
        const double rr = expm1(4 * dz) + 4 * w + 3 * gv + 2 * DF_U32;
        const double want = s2 / (s * s), got = sq[(int64_t)rows[r]];
        worst = fmax(worst, fabs(got - want) / (rr * want));
        rel = fmax(rel, rr);
        assert_true(fabs(got - want) <= rr * want);
    }
    print_message("sum_pi_squared worst error / bound %.3f (bound %.2e relative)\n", worst, rel);
    assert_true(rel < 1e-3); /* tighter than any formula slip (p instead of p^2, a missed rescale) */
    /* no entropy asked: the sums of p^2 unchanged */
    float *sq2 = malloc(sizeof(float) * (size_t)n);
    const df_head_out out2 = {.logp = lp, .sum_pi_sq = sq2};
    assert_int_equal(df_model_forward_head(g->m, a, &g->gb.b, 1.0f, &out2), DF_OK);
    assert_memory_equal(sq2, sq, (size_t)n * sizeof(float));
    assert_int_equal(df_model_forward_head(g->m, a, &g->gb.b, 1.0f, NULL), DF_EINVAL);
    free(lp), free(lp0), free(en), free(sq), free(sq2), free(rows), free(z);
    df_acts_free(a);
}

/* Gradient of the golden loss; returns a malloc'd blob. */
static float *golden_grads(const df_model *m, const golden *g, int passes)
{
    df_acts *a;
    assert_int_equal(df_acts_create(&m->cfg, g->gb.T + 5, g->gb.n_out + 2, &a), DF_OK);
    float *lp = malloc(sizeof(float) * (size_t)g->gb.n_out), *en = malloc(sizeof(float) * (size_t)g->gb.n_out);
    float *c = df_golden_read_vec(g->gb.exp, "loss.c", NULL), *d = df_golden_read_vec(g->gb.exp, "loss.d", NULL);
    float *grads = calloc((size_t)m->n_params, sizeof(float));
    for (int p = 0; p < passes; p++) {
        assert_int_equal(df_model_forward(m, a, &g->gb.b, 0.7f, lp, en), DF_OK);
        assert_int_equal(df_model_backward(m, a, &g->gb.b, 0.7f, c, d, grads), DF_OK);
    }
    free(lp), free(en), free(c), free(d);
    df_acts_free(a);
    return grads;
}

static double worst_grad_error(const df_model *m, const golden *g, const float *grads,
                               float scale, const char **worst_name)
{
    return df_golden_worst_grad(m, g->gb.exp, grads, scale, worst_name);
}

static void test_golden_backward(void **state)
{
    golden *g = *state;
    float *grads = golden_grads(g->m, g, 1);
    const char *wn = "";
    double err = worst_grad_error(g->m, g, grads, 1.0f, &wn);
    print_message("worst gradient rel err %.2e (%s), bound %.2e\n", err, wn, GRAD_TOL);
    assert_true(err <= GRAD_TOL);
    free(grads);
    /* Backward accumulates: two forward/backward passes give twice the gradient (the
       second pass's accumulating GEMMs add one rounding to the chain). */
    grads = golden_grads(g->m, g, 2);
    assert_true(worst_grad_error(g->m, g, grads, 2.0f, NULL) <= GRAD_TOL);
    free(grads);
}

static void test_golden_adamw(void **state)
{
    golden *g = *state;
    /* Clipping the model's own gradient: its norm is off by at most the gradient bound
     * (||dg|| <= GRAD_TOL ||g|| tensor by tensor), the fixture's F32 rounding and the double
     * sum of squares; after clipping, the norm is norm / (norm + 1e-6) up to the float
     * coefficient and products (2 u) and that double sum. */
    float *grads = golden_grads(g->m, g, 1);
    float *want_norm = df_golden_read_vec(g->gb.exp, "grad_norm", NULL);
    const int64_t np = g->m->n_params;
    double norm = df_clip_grad_norm(grads, np, 1.0);
    assert_true(want_norm[0] > 1.0); /* the clipping path */
    assert_true(fabs(norm - want_norm[0]) <= (GRAD_TOL + DF_U32 + df_tol_gamma(np, DF_U64)) * want_norm[0]);
    assert_true(fabs(df_grad_norm(grads, np) - norm / (norm + 1e-6)) <=
                2 * DF_U32 + df_tol_gamma(np, DF_U64));
    free(grads);
    /*
     * One AdamW step. Its update lr m / (sqrt(v) + eps) = lr g / (|g| + eps) at step 1 is
     * scale-invariant, so an error dg of the gradient moves it by lr eps dg / (|g| + eps)^2,
     * up to 2 lr where |g| is near rounding noise: the model's gradient (off by up to
     * GRAD_TOL of its tensor's norm) would leave no useful bound. So the step starts from
     * the reference's own gradient (F32 in the fixture: u relative, which moves the update
     * by at most lr u / 4), clipped here (the norm and the float coefficient: a few u more).
     * Per entry: p (1 - lr wd) with the rounded factor (2 u |p|), the update's eleven float
     * operations (gamma_12 lr |m / (sqrt(v) + eps)|), the input's lr u, the rounding of the
     * new value and the fixture's (2 u |p_new|).
     */
    grads = calloc((size_t)np, sizeof(float));
    for (int i = 0; i < g->m->n_tensors; i++) {
        const df_param_desc *t = &g->m->tensors[i];
        char name[128];
        snprintf(name, sizeof name, "grad.%s", t->name);
        float *gw = df_golden_read_vec(g->gb.exp, name, NULL);
        memcpy(grads + t->offset, gw, sizeof(float) * (size_t)t->numel);
        free(gw);
    }
    norm = df_clip_grad_norm(grads, np, 1.0);
    const double coef = 1.0 / (norm + 1e-6);
    df_adamw_config oc;
    df_adamw_config_defaults(&oc);
    oc.weight_decay = 0.01;
    const double lr = 1e-3;
    df_adamw *opt;
    assert_int_equal(df_adamw_create(&oc, np, &opt), DF_OK);
    df_model *m2;
    assert_int_equal(df_model_clone(g->m, &m2), DF_OK);
    assert_int_equal(df_adamw_step(opt, m2->params, grads, lr), DF_OK);
    assert_int_equal(opt->step, 1);
    /* Compare the update (new - old: exact, the two are within a factor 2) so the large
     * unchanged part cannot hide errors. */
    double worst = 0;
    for (int i = 0; i < m2->n_tensors; i++) {
        const df_param_desc *t = &m2->tensors[i];
        char name[128];
        snprintf(name, sizeof name, "adamw.%s", t->name);
        float *want = df_golden_read_vec(g->gb.exp, name, NULL);
        snprintf(name, sizeof name, "grad.%s", t->name);
        float *gw = df_golden_read_vec(g->gb.exp, name, NULL);
        double e2 = 0, b2 = 0, w2 = 0;
        for (int64_t j = 0; j < t->numel; j++) {
            double old = g->m->params[t->offset + j], gj = coef * gw[j];
            double got = (double)m2->params[t->offset + j] - old, upd = (double)want[j] - old;
            double phi = fabs(gj) / (fabs(gj) + oc.eps);
            double b = df_tol_gamma(2, DF_U32) * fabs(old) + lr * (df_tol_gamma(12, DF_U32) * phi + DF_U32) +
                       2 * DF_U32 * fabs((double)want[j]);
            e2 += (got - upd) * (got - upd), b2 += b * b, w2 += upd * upd;
        }
        double rel = sqrt(e2 / w2), bound = sqrt(b2 / w2);
        if (!(rel <= bound))
            fail_msg("AdamW update of %s: rel err %.3g above its bound %.3g", t->name, rel, bound);
        worst = fmax(worst, rel / bound);
        free(want), free(gw);
    }
    print_message("AdamW update: worst rel err / bound %.3f\n", worst);
    df_model_free(m2);
    df_adamw_free(opt);
    free(grads), free(want_norm);
}

static void test_golden_detects_perturbation(void **state)
{
    golden *g = *state;
    df_model *m2;
    /* One q_proj weight of layer 1 moved by 1e-3: every gradient tensor that depends on it
     * moves by far more than its bound. Its effect on the log-probs (9e-6 relative) is at the
     * forward bound of a 725-rounding float32 chain, so the forward check moves it by 1e-2. */
    assert_int_equal(df_model_clone(g->m, &m2), DF_OK);
    m2->w.layers[1].wq[5] += 1e-3f;
    float *grads = golden_grads(m2, g, 1);
    double ge = worst_grad_error(m2, g, grads, 1.0f, NULL);
    double fe = forward_error(m2, g);
    print_message("perturbed wq by 1e-3: forward %.2e, grad %.2e (bound %.2e)\n", fe, ge, GRAD_TOL);
    assert_true(ge > GRAD_TOL);
    free(grads);
    m2->w.layers[1].wq[5] += 9e-3f;
    fe = forward_error(m2, g);
    print_message("perturbed wq by 1e-2: forward %.2e (bound %.2e)\n", fe, FWD_TOL);
    assert_true(fe > FWD_TOL);
    df_model_free(m2);
    /* One v_proj bias of layer 0 moved by 1e-2. */
    assert_int_equal(df_model_clone(g->m, &m2), DF_OK);
    m2->w.layers[0].bv[3] += 1e-2f;
    fe = forward_error(m2, g);
    print_message("perturbed bv: forward %.2e\n", fe);
    assert_true(fe > FWD_TOL);
    df_model_free(m2);
    /* A different rope_theta changes every position > 0. */
    df_model_config c = g->m->cfg;
    c.rope_theta = 1e6;
    assert_int_equal(df_model_create(&c, &m2), DF_OK);
    memcpy(m2->params, g->m->params, sizeof(float) * (size_t)g->m->n_params);
    fe = forward_error(m2, g);
    print_message("rope_theta 1e6: forward %.2e\n", fe);
    assert_true(fe > FWD_TOL);
    df_model_free(m2);
}

/*
 * Tied embeddings: the LM-head gradient must land in the embedding gradient.
 * A tied model equals the untied one with lm_head := embed, so
 * grad_embed(tied) = grad_embed(untied) + grad_lm_head(untied).
 */
static void test_tied_embeddings(void **state)
{
    golden *g = *state;
    df_model_config c = g->m->cfg;
    c.tie_word_embeddings = true;
    df_model *tied, *untied;
    assert_int_equal(df_model_create(&c, &tied), DF_OK);
    assert_int_equal(df_model_clone(g->m, &untied), DF_OK);
    const int64_t VH = c.vocab_size * c.hidden_size;
    memcpy(untied->w.lm_head, untied->w.embed, sizeof(float) * (size_t)VH);
    /* Same tensors except lm_head: copy by name. */
    for (int i = 0; i < tied->n_tensors; i++) {
        const df_param_desc *d = df_model_find_tensor(untied, tied->tensors[i].name);
        assert_non_null(d);
        memcpy(tied->params + tied->tensors[i].offset, untied->params + d->offset,
               sizeof(float) * (size_t)d->numel);
    }
    assert_null(df_model_find_tensor(tied, "lm_head.weight"));
    float *gt = golden_grads(tied, g, 1), *gu = golden_grads(untied, g, 1);
    df_model_view vt = {.layers = calloc((size_t)c.num_hidden_layers, sizeof(df_layer_view))};
    df_model_view vu = {.layers = calloc((size_t)c.num_hidden_layers, sizeof(df_layer_view))};
    df_model_view_of(tied, gt, &vt);
    df_model_view_of(untied, gu, &vu);
    assert_ptr_equal(vt.lm_head, vt.embed);
    float *sum = malloc(sizeof(float) * (size_t)VH);
    double ne = 0, nl = 0, ns = 0;
    for (int64_t i = 0; i < VH; i++) {
        sum[i] = vu.embed[i] + vu.lm_head[i];
        ne += (double)vu.embed[i] * vu.embed[i], nl += (double)vu.lm_head[i] * vu.lm_head[i];
        ns += (double)sum[i] * sum[i];
    }
    /* Two float computations of the same gradients, each within GRAD_TOL of the exact ones
       tensor by tensor (the untied sum carries both of its terms' errors and one rounding). */
    const double gt_ = GRAD_TOL;
    assert_true(df_golden_rel_err(vt.embed, sum, VH) <= gt_ * (1 + (sqrt(ne) + sqrt(nl)) / sqrt(ns)) + DF_U32);
    assert_true(df_golden_rel_err(vt.layers[0].wq, vu.layers[0].wq,
                                  c.num_attention_heads * c.head_dim * c.hidden_size) <= 2 * gt_);
    free(sum), free(gt), free(gu), free(vt.layers), free(vu.layers);
    df_model_free(tied);
    df_model_free(untied);
}

/*
 * bf16 matmuls (opt-in): the same model within bf16 accuracy. Log-probs stay
 * close (the LM head is float32), every gradient tensor keeps its direction.
 * Bounds: each linear layer's GEMM rounds both operands to bf16 (u = 2^-8;
 * products exact, float sums), so a forward path carries 2 such roundings per
 * GEMM stage (q/k/v, o, gate/up, down: 8 per layer) and a backward 16 more per
 * layer (the dX and dW GEMMs): the probabilistic bound over those, plus the
 * float32 bound. A gradient tensor off by eps relative keeps cos >= sqrt(1 - eps^2).
 */
static void test_bf16_matmul_model(void **state)
{
    golden *g = *state;
    const df_model *m = g->m;
    df_acts *a;
    assert_int_equal(df_acts_create(&m->cfg, g->gb.T, g->gb.n_out, &a), DF_OK);
    int rc = df_acts_set_bf16_matmul(a, true);
    if (rc == DF_EUNSUPPORTED) {
        print_message("bf16 matmul unsupported here: %s\n", df_last_error());
        df_acts_free(a);
        skip();
    }
    assert_int_equal(rc, DF_OK);
    assert_int_equal(df_acts_load_weights(a, m), DF_OK);
    float *lp = malloc(sizeof(float) * (size_t)g->gb.n_out), *en = malloc(sizeof(float) * (size_t)g->gb.n_out);
    float *c = df_golden_read_vec(g->gb.exp, "loss.c", NULL), *d = df_golden_read_vec(g->gb.exp, "loss.d", NULL);
    float *grads = calloc((size_t)m->n_params, sizeof(float));
    assert_int_equal(df_model_forward(m, a, &g->gb.b, 0.7f, lp, en), DF_OK);
    assert_int_equal(df_model_backward(m, a, &g->gb.b, 0.7f, c, d, grads), DF_OK);
    assert_int_equal(df_mm_ctx_fallbacks(a->mm), 0);
    float *want = df_golden_read_vec(g->gb.exp, "logp.t07", NULL);
    double fe = df_golden_rel_err(lp, want, g->gb.n_out);
    /* Cosine similarity of each gradient tensor with the float64 reference. */
    double worst_cos = 1.0;
    for (int i = 0; i < m->n_tensors; i++) {
        const df_param_desc *t = &m->tensors[i];
        char name[128];
        snprintf(name, sizeof name, "grad.%s", t->name);
        float *gw = df_golden_read_vec(g->gb.exp, name, NULL);
        double dot = 0, n1 = 0, n2 = 0;
        for (int64_t j = 0; j < t->numel; j++) {
            dot += (double)grads[t->offset + j] * gw[j];
            n1 += (double)grads[t->offset + j] * grads[t->offset + j];
            n2 += (double)gw[j] * gw[j];
        }
        worst_cos = fmin(worst_cos, dot / (sqrt(n1 * n2) + 1e-30));
        free(gw);
    }
    const double L = (double)m->cfg.num_hidden_layers;
    /* 8 roundings per layer (4 GEMMs, both operands) and the head's 2; the gradients 24 per
     * layer (and 2 backward GEMMs per forward one) and the head's 6 */
    const double fb = df_tol_gamma_prob(8 * L + 2, DF_TOL_LAMBDA, DF_U_BF16) + FWD_TOL;
    const double gb = df_tol_gamma_prob(24 * L + 6, DF_TOL_LAMBDA, DF_U_BF16) + GRAD_TOL;
    print_message("bf16: logp rel err %.2e (bound %.2e), worst gradient cosine %.5f (bound %.5f)\n", fe,
                  fb, worst_cos, sqrt(1 - gb * gb));
    /* really bf16: its roundings (expected size ~u_bf16 = 4e-3 relative) do not all cancel
       down to the float32 bound (1e-5) */
    assert_true(fe > FWD_TOL);
    assert_true(fe <= fb);
    assert_true(gb < 1 && worst_cos >= sqrt(1 - gb * gb));
    /* Switching back gives float32 results again. */
    assert_int_equal(df_acts_set_bf16_matmul(a, false), DF_OK);
    assert_int_equal(df_model_forward(m, a, &g->gb.b, 0.7f, lp, en), DF_OK);
    assert_true(df_golden_rel_err(lp, want, g->gb.n_out) <= FWD_TOL);
    free(lp), free(en), free(c), free(d), free(grads), free(want);
    df_acts_free(a);
}

/*
 * The LM head runs in bf16 too: with every layer matmul weight zero the decoder's matmuls are
 * exact in either dtype, so a bf16 model differs from the float32 one only through the head
 * (h rounded for the logits; dlogits and h rounded in the gradients). Its log-probs must then
 * differ from float32 (a head silently left float32 gives the same bits) by at most one bf16
 * rounding of each of the logits' operands (the head's weight and h).
 */
static void test_bf16_head(void **state)
{
    golden *g = *state;
    df_model *m = NULL;
    assert_int_equal(df_model_clone(g->m, &m), DF_OK);
    const df_model_config *cf = &m->cfg;
    const int64_t H = cf->hidden_size, I = cf->intermediate_size;
    const int64_t qd = cf->num_attention_heads * cf->head_dim, kvd = cf->num_key_value_heads * cf->head_dim;
    for (int64_t l = 0; l < cf->num_hidden_layers; l++) {
        df_layer_view *w = &m->w.layers[l];
        memset(w->wq, 0, sizeof(float) * (size_t)(qd * H));
        memset(w->wk, 0, sizeof(float) * (size_t)(kvd * H));
        memset(w->wv, 0, sizeof(float) * (size_t)(kvd * H));
        memset(w->wo, 0, sizeof(float) * (size_t)(H * qd));
        memset(w->w_gate, 0, sizeof(float) * (size_t)(I * H));
        memset(w->w_up, 0, sizeof(float) * (size_t)(I * H));
        memset(w->w_down, 0, sizeof(float) * (size_t)(I * H));
    }
    const int64_t n = g->gb.n_out;
    df_acts *a32, *a16;
    assert_int_equal(df_acts_create(cf, g->gb.T, n, &a32), DF_OK);
    assert_int_equal(df_acts_create(cf, g->gb.T, n, &a16), DF_OK);
    int rc = df_acts_set_bf16_matmul(a16, true);
    if (rc == DF_EUNSUPPORTED) {
        print_message("bf16 matmul unsupported here: %s\n", df_last_error());
        df_acts_free(a32), df_acts_free(a16), df_model_free(m);
        skip();
    }
    assert_int_equal(rc, DF_OK);
    assert_int_equal(df_acts_load_weights(a16, m), DF_OK);
    float *lp32 = calloc((size_t)n, sizeof(float)), *lp16 = calloc((size_t)n, sizeof(float));
    float *c = df_golden_read_vec(g->gb.exp, "loss.c", NULL);
    float *g32 = calloc((size_t)m->n_params, sizeof(float)), *g16 = calloc((size_t)m->n_params, sizeof(float));
    assert_int_equal(df_model_forward(m, a32, &g->gb.b, 0.7f, lp32, NULL), DF_OK);
    assert_int_equal(df_model_forward(m, a16, &g->gb.b, 0.7f, lp16, NULL), DF_OK);
    assert_int_equal(df_model_backward(m, a32, &g->gb.b, 0.7f, c, NULL, g32), DF_OK);
    assert_int_equal(df_model_backward(m, a16, &g->gb.b, 0.7f, c, NULL, g16), DF_OK);
    const double fe = df_golden_rel_err(lp16, lp32, n);
    const double fb = df_tol_gamma_prob(2, DF_TOL_LAMBDA, DF_U_BF16) + FWD_TOL;
    print_message("bf16 head alone: logp rel err %.2e vs float32 (bound %.2e)\n", fe, fb);
    assert_true(memcmp(lp16, lp32, sizeof(float) * (size_t)n) != 0);
    assert_true(fe <= fb);
    assert_true(memcmp(g16, g32, sizeof(float) * (size_t)m->n_params) != 0);
    free(lp32), free(lp16), free(c), free(g32), free(g16);
    df_acts_free(a32), df_acts_free(a16), df_model_free(m);
}

/* Activations sized for more rows give the same results after a different batch. */
static void test_acts_reuse_and_errors(void **state)
{
    golden *g = *state;
    const df_model *m = g->m;
    df_acts *a;
    assert_int_equal(df_acts_create(&m->cfg, 64, 40, &a), DF_OK);
    float lp[64], en[64], lp2[64];
    int32_t toks[40];
    int64_t offs[3] = {0, 25, 40}, rows[40];
    for (int i = 0; i < 40; i++) {
        toks[i] = (i * 7 + 3) % (int32_t)m->cfg.vocab_size;
        rows[i] = i;
    }
    df_seq_batch big = {40, toks, 2, offs, 40, rows, toks, NULL, NULL};
    assert_int_equal(df_model_forward(m, a, &big, 1.0f, lp, en), DF_OK);
    assert_int_equal(df_model_forward(m, a, &g->gb.b, 1.0f, lp2, NULL), DF_OK);
    float *want = df_golden_read_vec(g->gb.exp, "logp.t1", NULL);
    assert_true(df_golden_rel_err(lp2, want, g->gb.n_out) <= FWD_TOL);
    free(want);

    /* Backward must match its forward's batch and temperature. */
    float *grads = calloc((size_t)m->n_params, sizeof(float));
    assert_int_equal(df_model_backward(m, a, &big, 1.0f, lp, NULL, grads), DF_EINVAL);
    assert_int_equal(df_model_backward(m, a, &g->gb.b, 0.5f, lp, NULL, grads), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "differs"));
    free(grads);

    /* Malformed batches are rejected with a reason. */
    df_seq_batch bad = big;
    bad.n_tokens = 65;
    assert_int_equal(df_model_forward(m, a, &bad, 1.0f, lp, en), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "65 tokens"));
    bad = big;
    toks[3] = (int32_t)m->cfg.vocab_size;
    assert_int_equal(df_model_forward(m, a, &bad, 1.0f, lp, en), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "outside the vocabulary"));
    toks[3] = 0;
    int64_t bad_offs[3] = {0, 41, 40};
    bad.seq_offsets = bad_offs;
    assert_int_equal(df_model_forward(m, a, &bad, 1.0f, lp, en), DF_EINVAL);
    bad = big;
    rows[7] = 40;
    assert_int_equal(df_model_forward(m, a, &bad, 1.0f, lp, en), DF_EINVAL);
    rows[7] = 7;
    assert_int_equal(df_model_forward(m, a, &big, 0.0f, lp, en), DF_EINVAL);
    assert_int_equal(df_model_forward(m, a, &big, 1.0f, NULL, en), DF_EINVAL);
    df_acts_free(a);

    df_acts *a2;
    assert_int_equal(df_acts_create(&m->cfg, 8, 9, &a2), DF_EINVAL);
    assert_int_equal(df_acts_create(&m->cfg, 0, 0, &a2), DF_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_forward),
        cmocka_unit_test(test_golden_sum_pi_squared),
        cmocka_unit_test(test_golden_backward),
        cmocka_unit_test(test_golden_adamw),
        cmocka_unit_test(test_golden_detects_perturbation),
        cmocka_unit_test(test_tied_embeddings),
        cmocka_unit_test(test_bf16_matmul_model),
        cmocka_unit_test(test_bf16_head),
        cmocka_unit_test(test_acts_reuse_and_errors),
    };
    return cmocka_run_group_tests(tests, load_golden, free_golden);
}
