/*
 * The whole decoder on the CUDA backend (df_acts_create_on + df_backend_cuda): the same
 * src/model/forward.c / backward.c that train on the CPU, every operator on the GPU.
 *
 *   - the golden model of test_model_golden.c (PyTorch float64 reference of HF
 *     modeling_qwen2.py): log-probs and entropies at two temperatures, and the gradient of
 *     sum(c logp) + sum(d entropy) for every parameter, within the bounds that test derives
 *     (tests/testbounds.h chains: the bounds hold for any summation order, so for cuBLAS,
 *     the FlashAttention tiling and atomic embedding sums too);
 *   - accumulation (two passes give twice the gradient) and a weight change reaching the
 *     device through df_acts_load_weights (a 1e-3 move of one weight must break the gradient
 *     bound: the comparison can fail);
 *   - a random model at a shape that crosses the kernels' tile boundaries (GQA, biases,
 *     sequences of 1 .. 130 tokens) against the CPU backend: each within its bound of the
 *     exact result, so the two within twice it;
 *   - the value model (the PPO critic's head) against its golden reference;
 *   - the newer families (test_model_families.c's fixtures): Llama 3.1 and OLMo 2 (post-norm
 *     layers, full-width q/k norms; with and without biases), the sliding windows of Qwen3
 *     (windowed from layer 1) and Mistral (every layer), and Gemma 3 (sliding and full layers,
 *     (1 + w) norms, GeGLU) against PyTorch, Qwen3 and Gemma 3 against the CPU;
 *   - what the device backend refuses (weights not loaded, bf16 matmuls).
 * Exit 77 with a SKIP line where no GPU is present.
 */
#include "cuda_testutil.h"

#include "distflow/model.h"
#include "model/acts.h"
#include "model/safetensors.h"
#include "testbounds.h"
#include "testgolden.h"

typedef struct {
    df_model *m;
    df_golden_batch gb;
} golden;

static golden G;

#define FWD_TOL df_golden_tol(tb_logp_chain(&G.m->cfg, df_golden_max_len(&G.gb)))
#define GRAD_TOL df_golden_tol(tb_grad_chain(&G.m->cfg, df_golden_max_len(&G.gb), G.gb.T))

static int load_golden(void **state)
{
    (void)state;
    char dir[4096], exp[4096];
    dfct_golden_path(dir, sizeof dir, "tiny_qwen2");
    dfct_golden_path(exp, sizeof exp, "tiny_qwen2_expected.safetensors");
    if (df_model_load(dir, &G.m)) {
        fprintf(stderr, "golden fixtures: %s\n", df_last_error());
        return -1;
    }
    df_golden_batch_load(&G.gb, exp);
    return 0;
}

static int free_golden(void **state)
{
    (void)state;
    df_model_free(G.m);
    df_golden_batch_free(&G.gb);
    return 0;
}

/* NaN everywhere, so an element the device never wrote fails the comparison. */
static void poison(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = NAN;
}

static df_acts *cuda_acts(const df_model *m, int64_t T, int64_t n_out)
{
    df_backend be = df_backend_cuda(dfct_cu);
    df_acts *a = NULL;
    DFCT_OK(df_acts_create_on(&be, &m->cfg, T, n_out, &a));
    DFCT_OK(df_acts_load_weights(a, m));
    return a;
}

/* Forward then backward of sum(c logp) + sum(d entropy) at temperature t, `passes` times,
 * accumulating into a device gradient blob; the log-probs / entropies of the last pass and
 * the gradient on the host. */
static void run_model(const df_model *m, df_acts *a, const df_seq_batch *b, float t,
                      const float *c, const float *d, int passes, float *lp, float *en,
                      float *grads)
{
    float *d_g = dfct_alloc((size_t)m->n_params * sizeof(float));
    DFCT_OK(df_cuda_fill(dfct_cu, d_g, m->n_params, 0.0f));
    for (int p = 0; p < passes; p++) {
        DFCT_OK(df_model_forward(m, a, b, t, lp, en));
        if (grads)
            DFCT_OK(df_model_backward(m, a, b, t, c, d, d_g));
    }
    if (grads)
        DFCT_OK(df_cuda_download(dfct_cu, grads, d_g, (size_t)m->n_params * sizeof(float)));
    dfct_free(d_g);
}

static double worst_grad_error(const df_model *m, const float *grads, float scale,
                               const char **worst_name)
{
    return df_golden_worst_grad(m, G.gb.exp, grads, scale, worst_name);
}

static void test_golden_forward_cuda(void **state)
{
    (void)state;
    const int64_t n = G.gb.n_out;
    df_acts *a = cuda_acts(G.m, G.gb.T, n);
    float *lp = malloc(sizeof(float) * (size_t)n), *en = malloc(sizeof(float) * (size_t)n);
    const char *names[2][2] = {{"logp.t1", "entropy.t1"}, {"logp.t07", "entropy.t07"}};
    const float temps[2] = {1.0f, 0.7f};
    for (int k = 0; k < 2; k++) {
        poison(lp, n), poison(en, n);
        run_model(G.m, a, &G.gb.b, temps[k], NULL, NULL, 1, lp, en, NULL);
        float *el = df_golden_read_vec(G.gb.exp, names[k][0], NULL);
        float *ee = df_golden_read_vec(G.gb.exp, names[k][1], NULL);
        double e1 = df_golden_rel_err(lp, el, n), e2 = df_golden_rel_err(en, ee, n);
        print_message("T=%.1f: logp rel err %.2e, entropy %.2e, bound %.2e\n", temps[k], e1, e2,
                      FWD_TOL);
        assert_true(e1 <= FWD_TOL && e2 <= FWD_TOL);
        free(el), free(ee);
    }
    free(lp), free(en);
    df_acts_free(a);
}

static void test_golden_backward_cuda(void **state)
{
    (void)state;
    const int64_t n = G.gb.n_out;
    /* larger than the batch, as the trainer's activations are */
    df_acts *a = cuda_acts(G.m, G.gb.T + 5, n + 2);
    float *c = df_golden_read_vec(G.gb.exp, "loss.c", NULL), *d = df_golden_read_vec(G.gb.exp, "loss.d", NULL);
    float *lp = malloc(sizeof(float) * (size_t)n), *en = malloc(sizeof(float) * (size_t)n);
    float *grads = malloc(sizeof(float) * (size_t)G.m->n_params);
    poison(grads, G.m->n_params);
    run_model(G.m, a, &G.gb.b, 0.7f, c, d, 1, lp, en, grads);
    const char *wn = "";
    double err = worst_grad_error(G.m, grads, 1.0f, &wn);
    print_message("worst gradient rel err %.2e (%s), bound %.2e\n", err, wn, GRAD_TOL);
    assert_true(err <= GRAD_TOL);
    /* backward accumulates */
    run_model(G.m, a, &G.gb.b, 0.7f, c, d, 2, lp, en, grads);
    err = worst_grad_error(G.m, grads, 2.0f, NULL);
    print_message("two passes: worst rel err against twice the gradient %.2e\n", err);
    assert_true(err <= GRAD_TOL);
    /* One q_proj weight of layer 1 moved by 1e-3, sent with df_acts_load_weights: its
     * gradients move by ~1e-3 relative, far above the bound. */
    df_model *m2;
    DFCT_OK(df_model_clone(G.m, &m2));
    m2->w.layers[1].wq[5] += 1e-3f;
    DFCT_OK(df_acts_load_weights(a, m2));
    run_model(m2, a, &G.gb.b, 0.7f, c, d, 1, lp, en, grads);
    err = worst_grad_error(m2, grads, 1.0f, NULL);
    print_message("perturbed wq by 1e-3: worst gradient rel err %.2e\n", err);
    assert_true(err > GRAD_TOL);
    df_model_free(m2);
    free(c), free(d), free(lp), free(en), free(grads);
    df_acts_free(a);
}

/* A random Qwen2 with GQA and biases; sequences of 1 .. 130 tokens (one, and across the
 * attention tiles' edges). Output rows: every row but each sequence's last, target the next
 * token. */
static void test_random_model_matches_cpu(void **state)
{
    (void)state;
    df_model_config cfg;
    df_model_config_defaults(&cfg);
    cfg.vocab_size = 3001, cfg.hidden_size = 128, cfg.intermediate_size = 344;
    cfg.num_hidden_layers = 3, cfg.num_attention_heads = 4, cfg.num_key_value_heads = 2;
    cfg.head_dim = 32, cfg.max_position_embeddings = 256, cfg.initializer_range = 0.1;
    df_model *m;
    DFCT_OK(df_model_create(&cfg, &m));
    DFCT_OK(df_model_init_random(m, 7));
    /* biases and norm weights away from their init (0, 1), so their paths are exercised */
    df_rng r;
    df_rng_seed(&r, 11);
    for (int64_t l = 0; l < cfg.num_hidden_layers; l++)
        for (int64_t j = 0; j < cfg.hidden_size; j++) {
            m->w.layers[l].ln1[j] = 0.5f + (float)df_rng_uniform(&r);
            if (j < cfg.num_key_value_heads * cfg.head_dim)
                m->w.layers[l].bk[j] = (float)df_rng_uniform(&r) - 0.5f;
        }
    const int64_t lens[] = {1, 7, 64, 65, 130, 33}, S = 6;
    int64_t off[7] = {0};
    for (int64_t s = 0; s < S; s++)
        off[s + 1] = off[s] + lens[s];
    const int64_t T = off[S];
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)T), *tgt = malloc(sizeof(int32_t) * (size_t)T);
    int64_t *rows = malloc(sizeof(int64_t) * (size_t)T), n = 0;
    for (int64_t t = 0; t < T; t++)
        tok[t] = (int32_t)(df_rng_u64(&r) % (uint64_t)cfg.vocab_size);
    for (int64_t s = 0; s < S; s++)
        for (int64_t t = off[s]; t + 1 < off[s + 1]; t++)
            rows[n] = t, tgt[n++] = tok[t + 1];
    df_seq_batch b = {T, tok, S, off, n, rows, tgt, NULL, NULL};
    float *c = malloc(sizeof(float) * (size_t)n), *d = malloc(sizeof(float) * (size_t)n);
    for (int64_t j = 0; j < n; j++)
        c[j] = (float)df_rng_uniform(&r) - 0.5f, d[j] = 0.1f * ((float)df_rng_uniform(&r) - 0.5f);

    /* CPU */
    float *lp0 = malloc(sizeof(float) * (size_t)n), *en0 = malloc(sizeof(float) * (size_t)n);
    float *g0 = calloc((size_t)m->n_params, sizeof(float));
    df_acts *a0;
    DFCT_OK(df_acts_create(&cfg, T, n, &a0));
    DFCT_OK(df_model_forward(m, a0, &b, 0.8f, lp0, en0));
    DFCT_OK(df_model_backward(m, a0, &b, 0.8f, c, d, g0));
    df_acts_free(a0);
    /* GPU */
    float *lp1 = malloc(sizeof(float) * (size_t)n), *en1 = malloc(sizeof(float) * (size_t)n);
    float *g1 = malloc(sizeof(float) * (size_t)m->n_params);
    poison(lp1, n), poison(en1, n), poison(g1, m->n_params);
    df_acts *a1 = cuda_acts(m, T, n);
    run_model(m, a1, &b, 0.8f, c, d, 1, lp1, en1, g1);
    df_acts_free(a1);

    const int64_t L = 130;
    const double ftol = 2 * df_golden_tol(tb_logp_chain(&cfg, L));
    const double gtol = 2 * df_golden_tol(tb_grad_chain(&cfg, L, T));
    double el = df_golden_rel_err(lp1, lp0, n), ee = df_golden_rel_err(en1, en0, n), eg = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const df_param_desc *t = &m->tensors[i];
        double e = df_golden_rel_err(g1 + t->offset, g0 + t->offset, t->numel);
        if (!(e <= gtol))
            fail_msg("gradient of %s: GPU vs CPU rel err %.3g above %.3g", t->name, e, gtol);
        eg = fmax(eg, e);
    }
    print_message("random model, %lld tokens: logp %.2e, entropy %.2e (bound %.2e), worst "
                  "gradient %.2e (bound %.2e)\n", (long long)T, el, ee, ftol, eg, gtol);
    assert_true(el <= ftol && ee <= ftol);
    free(tok), free(tgt), free(rows), free(c), free(d), free(lp0), free(en0), free(g0);
    free(lp1), free(en1), free(g1);
    df_model_free(m);
}

/* The value model (the PPO critic) on the GPU against gen_golden.py's reference: values and the
 * gradient of sum(c values), within test_value_head.c's bounds (its head is a GEMM here). */
static void test_golden_value_head_cuda(void **state)
{
    (void)state;
    char dir[4096], exp[4096];
    dfct_golden_path(dir, sizeof dir, "tiny_qwen2_value");
    dfct_golden_path(exp, sizeof exp, "tiny_qwen2_value_expected.safetensors");
    df_model *m;
    DFCT_OK(df_model_load(dir, &m));
    df_golden_batch g;
    df_golden_batch_load(&g, exp);
    const double ftol = df_golden_tol(tb_head_chain(&m->cfg, df_golden_max_len(&g)));
    const double gtol = df_golden_tol(tb_grad_chain(&m->cfg, df_golden_max_len(&g), g.T));
    df_acts *a = cuda_acts(m, g.T, g.n_out);
    float *v = malloc(sizeof(float) * (size_t)g.n_out), *c = df_golden_read_vec(g.exp, "loss.c", NULL);
    float *grads = malloc(sizeof(float) * (size_t)m->n_params);
    float *d_g = dfct_alloc((size_t)m->n_params * sizeof(float));
    poison(v, g.n_out), poison(grads, m->n_params);
    DFCT_OK(df_cuda_fill(dfct_cu, d_g, m->n_params, 0.0f));
    DFCT_OK(df_model_forward_values(m, a, &g.b, v));
    DFCT_OK(df_model_backward_values(m, a, &g.b, c, d_g));
    DFCT_OK(df_cuda_download(dfct_cu, grads, d_g, (size_t)m->n_params * sizeof(float)));
    float *want = df_golden_read_vec(g.exp, "values", NULL);
    const char *wn = "";
    double fe = df_golden_rel_err(v, want, g.n_out), worst = df_golden_worst_grad(m, g.exp, grads, 1.0f, &wn);
    print_message("values rel err %.2e (bound %.2e), worst gradient %.2e (%s, bound %.2e)\n", fe,
                  ftol, worst, wn, gtol);
    assert_true(fe <= ftol);
    assert_true(worst <= gtol);
    dfct_free(d_g);
    free(v), free(c), free(grads), free(want);
    df_acts_free(a);
    df_golden_batch_free(&g);
    df_model_free(m);
}

/* One fixture of tests/test_model_families.c: its model and batch. */
static df_model *family_model(const char *name, df_golden_batch *g)
{
    char dir[4096], exp[4096], leaf[256];
    dfct_golden_path(dir, sizeof dir, name);
    snprintf(leaf, sizeof leaf, "%s_expected.safetensors", name);
    dfct_golden_path(exp, sizeof exp, leaf);
    df_model *m;
    DFCT_OK(df_model_load(dir, &m));
    df_golden_batch_load(g, exp);
    return m;
}

/* Fixture `name` of test_model_families.c on the device against its PyTorch reference at
 * temperature 0.7: log-probs and every gradient, within that test's bounds. */
static void family_vs_golden(const char *name)
{
    df_golden_batch g;
    df_model *m = family_model(name, &g);
    const int64_t n = g.n_out;
    double ftol = df_golden_tol(tb_logp_chain(&m->cfg, df_golden_max_len(&g)));
    double gtol = df_golden_tol(tb_grad_chain(&m->cfg, df_golden_max_len(&g), g.T));
    float *c = df_golden_read_vec(g.exp, "loss.c", NULL), *d = df_golden_read_vec(g.exp, "loss.d", NULL);
    float *lp = malloc(sizeof(float) * (size_t)n), *en = malloc(sizeof(float) * (size_t)n);
    float *grads = malloc(sizeof(float) * (size_t)m->n_params);
    df_acts *a = cuda_acts(m, g.T, n);
    poison(lp, n), poison(grads, m->n_params);
    run_model(m, a, &g.b, 0.7f, c, d, 1, lp, en, grads);
    float *want = df_golden_read_vec(g.exp, "logp.t07", NULL);
    const char *wn = "";
    double fe = df_golden_rel_err(lp, want, n), ge = df_golden_worst_grad(m, g.exp, grads, 1.0f, &wn);
    print_message("%s: logp rel err %.2e (bound %.2e), worst gradient %.2e (%s, bound %.2e)\n", name,
                  fe, ftol, ge, wn, gtol);
    assert_true(fe <= ftol && ge <= gtol);
    free(want), free(c), free(d), free(lp), free(en), free(grads);
    df_acts_free(a);
    df_golden_batch_free(&g);
    df_model_free(m);
}

/* Fixture `name` (with its sliding window) on the device against the CPU at temperature 0.7:
 * log-probs and every gradient, each within the bound of the exact result, so the two within
 * twice it. */
static void family_vs_cpu(const char *name)
{
    df_golden_batch g;
    df_model *m = family_model(name, &g);
    assert_true(m->cfg.sliding_window > 0); /* the comparison runs the window */
    df_acts *a;
    const int64_t n = g.n_out;
    const double ftol = df_golden_tol(tb_logp_chain(&m->cfg, df_golden_max_len(&g)));
    const double gtol = df_golden_tol(tb_grad_chain(&m->cfg, df_golden_max_len(&g), g.T));
    float *c = df_golden_read_vec(g.exp, "loss.c", NULL), *d = df_golden_read_vec(g.exp, "loss.d", NULL);
    float *lp = malloc(sizeof(float) * (size_t)n), *en = malloc(sizeof(float) * (size_t)n);
    float *lc = malloc(sizeof(float) * (size_t)n), *ec = malloc(sizeof(float) * (size_t)n);
    float *grads = malloc(sizeof(float) * (size_t)m->n_params);
    float *gc = calloc((size_t)m->n_params, sizeof(float));
    a = cuda_acts(m, g.T, n);
    run_model(m, a, &g.b, 0.7f, c, d, 1, lp, en, grads);
    df_acts *ac;
    DFCT_OK(df_acts_create(&m->cfg, g.T, n, &ac));
    DFCT_OK(df_model_forward(m, ac, &g.b, 0.7f, lc, ec));
    DFCT_OK(df_model_backward(m, ac, &g.b, 0.7f, c, d, gc));
    const double fe = df_golden_rel_err(lp, lc, n);
    double ge = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const df_param_desc *t = &m->tensors[i];
        ge = fmax(ge, df_golden_rel_err(grads + t->offset, gc + t->offset, t->numel));
    }
    print_message("%s: logp vs cpu %.2e (bound %.2e), worst gradient %.2e (bound %.2e)\n", name,
                  fe, 2 * ftol, ge, 2 * gtol);
    assert_true(fe <= 2 * ftol && ge <= 2 * gtol);
    df_acts_free(ac);
    df_acts_free(a);
    free(c), free(d), free(lp), free(en), free(lc), free(ec), free(grads), free(gc);
    df_golden_batch_free(&g);
    df_model_free(m);
}

/*
 * The newer families through the same seam (no new device operator: llama3 RoPE is a table,
 * the o_proj bias a rank-1 GEMM, the q/k norms the RMSNorm over rows of head_dim or of the
 * whole projection, OLMo 2's post-norms RMSNorms and one-row column sums as the residual adds,
 * Gemma 3's 1 + w a copy and a one-row column sum, its q and embedding scales `scale`, GeGLU
 * its operator):
 *   - Llama 3.1 (llama3 RoPE, q/k/v/o biases, tied head), Qwen3 with YaRN (tiny_qwen3_yarn: the
 *     blended frequencies and the attention factor, a table as any RoPE), OLMo 2 (tiny_olmo2, and
 *     tiny_olmo2_bias with its biases and tied head), the windowed attention of Qwen3 and
 *     Mistral (a window of 4 positions under sequences longer than it) and Gemma 3 (sliding and
 *     full layers, each with its RoPE) and Gemma 2 (Gemma 3's layer with tanh soft-caps on the
 *     attention scores and the final logits: the attention and LM-head kernels' caps) against
 *     their PyTorch references (family_vs_golden);
 *   - Qwen3 (q/k norms, head_dim != hidden / heads, its window), Gemma 3 and Gemma 2 against the
 *     CPU (family_vs_cpu).
 */
static void test_families_cuda(void **state)
{
    (void)state;
    family_vs_golden("tiny_llama31");
    family_vs_golden("tiny_olmo2");
    family_vs_golden("tiny_olmo2_bias");
    family_vs_golden("tiny_qwen3");
    family_vs_golden("tiny_qwen3_yarn");
    family_vs_golden("tiny_mistral");
    family_vs_golden("tiny_gemma3");
    family_vs_golden("tiny_gemma2");
    family_vs_cpu("tiny_qwen3");
    family_vs_cpu("tiny_gemma3");
    family_vs_cpu("tiny_gemma2");
}

static void test_cuda_acts_refusals(void **state)
{
    (void)state;
    df_backend be = df_backend_cuda(dfct_cu);
    df_acts *a;
    DFCT_OK(df_acts_create_on(&be, &G.m->cfg, G.gb.T, G.gb.n_out, &a));
    float *lp = malloc(sizeof(float) * (size_t)G.gb.n_out);
    /* weights never loaded */
    assert_int_equal(df_model_forward(G.m, a, &G.gb.b, 1.0f, lp, NULL), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "df_acts_load_weights"));
    assert_int_equal(df_acts_set_bf16_matmul(a, true), DF_EUNSUPPORTED);
    df_acts_free(a);
    free(lp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_forward_cuda),
        cmocka_unit_test(test_golden_backward_cuda),
        cmocka_unit_test(test_random_model_matches_cpu),
        cmocka_unit_test(test_golden_value_head_cuda),
        cmocka_unit_test(test_cuda_acts_refusals),
        cmocka_unit_test(test_families_cuda),
    };
    if (load_golden(NULL))
        return 1;
    int rc = dfct_main("test_cuda_model", tests, sizeof tests / sizeof tests[0]);
    free_golden(NULL);
    return rc;
}
