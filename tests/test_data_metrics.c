/*
 * test_data_metrics.c — the step metrics of worker/data_metrics.h: critic/vf_explained_var from
 * sums (a hand-computed case, shards whose sums add up to the whole batch's, the cases that give
 * no number), multi-turn masks, verl's aborted responses, timing_per_token_ms, the MFU and the
 * memory metrics.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "distflow/backend.h"
#include "distflow/batch.h"
#include "distflow/model.h"
#include "distflow/common.h"
#include "testutil.h"
#include "tolerance.h"
#include "workers/common/data_metrics.h"

#include <stdlib.h>
#include <stdio.h>
#include <string.h>

/* Two responses of 2 and 1 tokens: returns r = [1, 2, 4], values v = [0.5, 2.5, 3]. */
static df_batch *batch(void)
{
    df_batch *b = df_batch_new(2);
    const int64_t off[] = {0, 2, 3};
    const int32_t ids[] = {5, 6, 7};
    const float r[] = {1, 2, 4}, v[] = {0.5f, 2.5f, 3};
    assert_int_equal(df_batch_set_tok_i32(b, "response_ids", off, ids), 0);
    assert_int_equal(df_batch_set_tok_f32(b, "returns", off, r), 0);
    assert_int_equal(df_batch_set_tok_f32(b, "values", off, v), 0);
    return b;
}

static void test_hand_computed(void **state)
{
    (void)state;
    df_batch *b = batch();
    double s[DF_EV_NSUMS] = {0}, ev = -1;
    df_explained_var_sums(b, s);
    /* d = r - v = [0.5, -0.5, 1] */
    assert_near(s[0], 3, 0);
    assert_near(s[1], 7, 0);
    assert_near(s[2], 21, 0);
    assert_near(s[3], 1, 0);
    assert_near(s[4], 1.5, 0);
    /* var(r) = ((4/3)^2 + (1/3)^2 + (5/3)^2) / 2 = 7/3; var(d) = (1/36 + 25/36 + 16/36) / 2 = 7/12.
       The sums are exact; each side then rounds about 6 double operations, the code's
       sxx - sx^2 / n amplifying them by (21 + 49/3) / (14/3) = 8 (var r) and (1.5 + 1/3) / (7/6)
       (var d): within gamma_24 of the ratio 0.25 and of 1 */
    assert_true(df_explained_var(s, &ev));
    assert_near(ev, 1.0 - (7.0 / 12) / (7.0 / 3 + 1e-5), df_tol_gamma(24, DF_U64));
    /* the 1e-5 in the denominator lowers 1 - 1/4 by 0.25 * 1e-5 / (7/3) to first order (and less) */
    assert_near(ev, 0.75, 0.25 * 1e-5 / (7.0 / 3) + df_tol_gamma(24, DF_U64));

    /* two shards (as two DP ranks): their summed sums are the whole batch's */
    df_batch *p0, *p1;
    assert_int_equal(df_batch_slice(b, 0, 1, &p0), 0);
    assert_int_equal(df_batch_slice(b, 1, 2, &p1), 0);
    double t[DF_EV_NSUMS] = {0}, u[DF_EV_NSUMS] = {0}, ev0 = -1, ev_sum = -1;
    df_explained_var_sums(p0, t);
    df_explained_var_sums(p1, u);
    assert_true(df_explained_var(t, &ev0)); /* 2 tokens: [1, 2] vs d [0.5, -0.5] */
    /* var(d) and var(r) are exact here (sxx - sx^2 / 2 of halves); the rest as above */
    assert_near(ev0, 1.0 - 0.5 / (0.5 + 1e-5), df_tol_gamma(8, DF_U64));
    for (int i = 0; i < DF_EV_NSUMS; i++)
        t[i] += u[i];
    assert_true(df_explained_var(t, &ev_sum));
    assert_near(ev_sum, ev, 0); /* the shards' sums are exact: the same inputs, the same bits */
    df_batch_free(p0);
    df_batch_free(p1);
    df_batch_free(b);
}

static void test_no_number(void **state)
{
    (void)state;
    double s[DF_EV_NSUMS] = {0}, ev = -7;
    assert_false(df_explained_var(s, &ev)); /* no tokens */
    df_batch *b = batch(), *one;
    assert_int_equal(df_batch_slice(b, 1, 2, &one), 0);
    df_explained_var_sums(one, s);
    assert_near(s[0], 1, 0);
    assert_false(df_explained_var(s, &ev)); /* one token: no unbiased variance */
    assert_near(ev, -7, 0);

    /* values equal to returns explain everything; a constant return gives 1 - var(d) / 1e-5 */
    const int64_t off[] = {0, 2, 3};
    const float r[] = {1, 2, 4}, c[] = {3, 3, 3};
    df_batch *e = df_batch_new(2);
    assert_int_equal(df_batch_set_tok_f32(e, "returns", off, r), 0);
    assert_int_equal(df_batch_set_tok_f32(e, "values", off, r), 0);
    double se[DF_EV_NSUMS] = {0};
    df_explained_var_sums(e, se);
    assert_true(df_explained_var(se, &ev));
    assert_near(ev, 1.0, 0); /* d = 0 exactly: var(d) = 0 */
    df_batch_free(e);
    e = df_batch_new(2);
    assert_int_equal(df_batch_set_tok_f32(e, "returns", off, c), 0);
    assert_int_equal(df_batch_set_tok_f32(e, "values", off, c), 0);
    memset(se, 0, sizeof se);
    df_explained_var_sums(e, se);
    assert_true(df_explained_var(se, &ev));
    assert_near(ev, 1.0, 0); /* var(d) = var(r) = 0 */
    df_batch_free(e);

    /* without values (no critic) or with another layout: nothing is added */
    double z[DF_EV_NSUMS] = {0};
    df_batch_drop(b, "values");
    df_explained_var_sums(b, z);
    const int64_t off2[] = {0, 1, 3};
    assert_int_equal(df_batch_set_tok_f32(b, "values", off2, r), 0);
    df_explained_var_sums(b, z);
    for (int i = 0; i < DF_EV_NSUMS; i++)
        assert_near(z[i], 0, 0);
    df_batch_free(one);
    df_batch_free(b);
}

/* The step metrics leave vf_explained_var to the worker (it is global) but keep the values' stats. */
static void test_data_metrics_leave_it_to_the_worker(void **state)
{
    (void)state;
    df_batch *b = batch();
    df_metrics *m = df_metrics_new();
    assert_non_null(m);
    assert_int_equal(df_compute_data_metrics(b, 10, 10, m), 0);
    assert_false(df_metrics_has(m, "critic/vf_explained_var"));
    assert_near(df_metrics_get(m, "critic/values/mean", 0), 2.0, 0); /* (0.5 + 2.5 + 3) / 3, exact */
    assert_near(df_metrics_get(m, "critic/returns/max", 0), 4.0, 0);
    df_metrics_free(m);
    df_batch_free(b);
}

/* A multi-turn batch: token statistics over the model's tokens (response_mask), num_turns. */
static void test_multi_turn(void **state)
{
    (void)state;
    df_batch *b = batch();
    const int64_t off[] = {0, 2, 3}, turns[] = {3, 1};
    const int32_t mask[] = {1, 0, 1};
    assert_int_equal(df_batch_set_tok_i32(b, "response_mask", off, mask), 0);
    assert_int_equal(df_batch_set_i64(b, "num_turns", turns), 0);
    df_metrics *m = df_metrics_new();
    assert_int_equal(df_compute_data_metrics(b, 10, 10, m), 0);
    assert_near(df_metrics_get(m, "critic/values/mean", 0), 1.75, 0); /* (0.5 + 3) / 2 */
    assert_near(df_metrics_get(m, "critic/returns/min", 0), 1.0, 0);
    assert_near(df_metrics_get(m, "num_turns/mean", 0), 2.0, 0);
    assert_near(df_metrics_get(m, "num_turns/max", 0), 3.0, 0);
    double s[DF_EV_NSUMS] = {0};
    df_explained_var_sums(b, s);
    assert_near(s[0], 2, 0); /* returns [1, 4] */
    assert_near(s[1], 5, 0);
    df_metrics_free(m);
    df_batch_free(b);
}

/* verl's aborted responses (no tokens): out of the score and reward statistics and of
   response_length_non_aborted, counted by response/aborted_ratio. Rows: lengths 2, 0, 1, 0 of
   scores 1, 5, 3, 7 (the empty rows' scores are seen only if the rule is missing). */
static void test_aborted(void **state)
{
    (void)state;
    df_batch *b = df_batch_new(4);
    const int64_t off[] = {0, 2, 2, 3, 3}, scalar_off[] = {0, 1, 2, 3, 4}, poff[] = {0, 1, 2, 3, 4};
    const int32_t ids[] = {5, 6, 7}, pids[] = {1, 2, 3, 4};
    const float sc[] = {1, 5, 3, 7};
    assert_int_equal(df_batch_set_tok_i32(b, "response_ids", off, ids), 0);
    assert_int_equal(df_batch_set_tok_i32(b, "prompt_ids", poff, pids), 0);
    assert_int_equal(df_batch_set_tok_f32(b, "token_level_scores", scalar_off, sc), 0);
    df_metrics *m = df_metrics_new();
    assert_int_equal(df_compute_data_metrics(b, 2, 10, m), 0);
    assert_near(df_metrics_get(m, "critic/score/mean", 0), 2.0, 0); /* (1 + 3) / 2 */
    assert_near(df_metrics_get(m, "critic/score/max", 0), 3.0, 0);
    assert_near(df_metrics_get(m, "response/aborted_ratio", 0), 0.5, 0);
    assert_near(df_metrics_get(m, "response_length/mean", 0), 0.75, 0);
    assert_near(df_metrics_get(m, "response_length/clip_ratio", 0), 0.25, 0);
    assert_near(df_metrics_get(m, "response_length_non_aborted/mean", 0), 1.5, 0);
    assert_near(df_metrics_get(m, "response_length_non_aborted/min", 0), 1.0, 0);
    assert_near(df_metrics_get(m, "response_length_non_aborted/clip_ratio", 0), 0.5, 0);
    df_metrics_free(m);
    df_batch_free(b);
}

/* timing_per_token_ms: gen over the response tokens, the training stages over all; nothing for a
   stage without a time (old_log_prob has no per-token figure in verl). */
static void test_timing_per_token(void **state)
{
    (void)state;
    df_metrics *m = df_metrics_new();
    df_metrics_set(m, "timing_s/gen", 3.0);
    df_metrics_set(m, "timing_s/update_actor", 8.0);
    df_metrics_set(m, "timing_s/old_log_prob", 1.0);
    df_compute_timing_per_token(m, 1000, 3000);
    assert_near(df_metrics_get(m, "timing_per_token_ms/gen", 0), 1.0, 0);
    assert_near(df_metrics_get(m, "timing_per_token_ms/update_actor", 0), 2.0, 0);
    assert_false(df_metrics_has(m, "timing_per_token_ms/ref"));
    assert_false(df_metrics_has(m, "timing_per_token_ms/old_log_prob"));
    df_metrics_free(m);
}

/* verl's MFU: its _estimate_qwen2_flops on H 4, I 8, 2 layers, 2 heads of 2, 1 KV head, V 10 and
   sequences of 2 and 3 tokens gives 11664 (run on verl b178a3cd's function): per layer 3 H I = 96
   plus H (2 q + 2 kv) = 48, times 2, plus 2 V H = 80: N = 368; 6 N 5 = 11040 and 6 (4 + 9) 2 2 2 =
   624. The peak table's lookup order (H200 before H20, GB200 before B200), verl's CPU constant. */
static void test_mfu(void **state)
{
    (void)state;
    df_model_config c = {.hidden_size = 4, .intermediate_size = 8, .num_hidden_layers = 2,
                         .num_attention_heads = 2, .num_key_value_heads = 1, .head_dim = 2, .vocab_size = 10};
    assert_near(df_model_train_flops(&c, 5, 13), 11664, 0);
    /* verl's _estimate_gemma3_flops on the same shapes as gemma3_text with a window of 2 on layer 0
       (layer 1 full): the sliding layer's attention counts 2 2 + 3 2 = 10 instead of 13, so
       6 (13 + 10) 2 2 = 552 replaces 624: 11592. The qwen2 estimate ignores the window. */
    df_model_config g = c;
    snprintf(g.model_type, sizeof g.model_type, "gemma3_text");
    g.sliding_window = 2, g.full_layers[0] = 2;
    assert_near(df_model_train_flops_win(&g, 5, 13, 10), 11592, 0);
    snprintf(g.model_type, sizeof g.model_type, "qwen2");
    assert_near(df_model_train_flops_win(&g, 5, 13, 10), 11664, 0);
    assert_near(df_device_peak_flops("NVIDIA H200"), 989e12, 0);
    assert_near(df_device_peak_flops("NVIDIA H20"), 148e12, 0);
    assert_near(df_device_peak_flops("NVIDIA GB200"), 2.5e15, 0);
    assert_near(df_device_peak_flops("NVIDIA H100 80GB HBM3"), 989e12, 0);
    assert_near(df_device_peak_flops(NULL), 448e9, 0);
    assert_near(df_device_peak_flops("Tesla T4"), 0, 0);
    df_backend cpu = df_backend_cpu();
    assert_near(df_backend_peak_flops(&cpu), 448e9, 0);
    /* batch()'s responses of 2 and 1 tokens after prompts of 0 and 2: sequences of 2 and 3 tokens,
       the FLOPs above, 2 epochs, over 2 s at a peak of 11664 FLOP/s: exactly 1 */
    df_batch *b = batch();
    const int64_t po[] = {0, 0, 2};
    const int32_t p[] = {1, 2};
    assert_int_equal(df_batch_set_tok_i32(b, "prompt_ids", po, p), 0);
    df_metrics *m = df_metrics_new();
    df_record_mfu(m, "perf/mfu/actor", &c, b, 2, 2.0, 11664);
    assert_near(df_metrics_get(m, "perf/mfu/actor", 0), 1.0, 0);
    df_record_mfu(m, "perf/mfu/critic", &c, b, 1, 2.0, 0); /* unknown device: nothing */
    assert_false(df_metrics_has(m, "perf/mfu/critic"));
    df_metrics_free(m);
    df_batch_free(b);
}

static int64_t fake_peak(void *ctx)
{
    (void)ctx;
    return 3LL << 30;
}

static void test_memory(void **state)
{
    (void)state;
    df_metrics *m = df_metrics_new();
    df_record_memory(m, 3LL << 29, 5LL << 30); /* bytes: 1.5 GiB and 5 GiB */
    assert_near(df_metrics_get(m, "perf/max_memory_allocated_gb", 0), 1.5, 0);
    assert_near(df_metrics_get(m, "perf/max_memory_reserved_gb", 0), 1.5, 0);
    assert_near(df_metrics_get(m, "perf/cpu_memory_used_gb", 0), 5.0, 0);
    df_metrics_free(m);
    m = df_metrics_new();
    df_record_memory(m, -1, -1); /* unknown: nothing */
    assert_false(df_metrics_has(m, "perf/max_memory_allocated_gb") || df_metrics_has(m, "perf/cpu_memory_used_gb"));
    df_metrics_free(m);
    /* a backend that counts its memory is asked; the CPU's memory is the process's peak resident set,
       which holds at least the 64 MiB touched here */
    static const df_backend_ops ops = {.memory_peak = fake_peak};
    df_backend dev = {.ops = &ops}, cpu = df_backend_cpu();
    assert_int_equal(df_backend_memory_peak(&dev), 3LL << 30);
    size_t n = (size_t)64 << 20;
    char *buf = malloc(n);
    assert_non_null(buf);
    memset(buf, 1, n);
    int64_t rss = df_backend_memory_peak(&cpu);
    assert_true(rss >= (int64_t)n && buf[n - 1] == 1);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_computed),
        cmocka_unit_test(test_no_number),
        cmocka_unit_test(test_data_metrics_leave_it_to_the_worker),
        cmocka_unit_test(test_multi_turn),
        cmocka_unit_test(test_aborted),
        cmocka_unit_test(test_timing_per_token),
        cmocka_unit_test(test_mfu),
        cmocka_unit_test(test_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
