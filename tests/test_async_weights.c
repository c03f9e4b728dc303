/*
 * test_async_weights.c — the asynchronous runtime's weights on the wire (src/workers/dag/async.h
 * df_async_wire, async_weights.c): trainer rank 0 broadcasts, a rollout rank installs.
 *
 * mpi-test: np 2
 * (as a plain ctest, one rank: the sizes and the refusals only; the transfers need a receiver.)
 *
 * - Sizes: float32 sends every parameter; bf16 sends the engine's bf16 copy (layers' matmuls, LM
 *   head, embedding) and, in float32, only the norms and biases (counted by hand here).
 * - A header of another wire format or size is refused before anything is received.
 * - bf16, received in place: the rollout's model holds the trainer's norms and biases, and an
 *   engine sharing the received copy samples bit for bit what an engine converting the trainer's
 *   float32 weights itself samples (the path before the bf16 wire: the same round-to-nearest-even).
 * - bf16, staged (partial_rollout false): nothing changes until the install, then the new weights.
 *   The trainer sends the actor's current bf16 copy as is, and converts when the copy it is given
 *   is stale (a stale copy sent as is would be the previous weights).
 * - float32, in place and staged: the model's parameters equal the trainer's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testmpi.h"

#include "distflow/rollout.h"
#include "model/ops.h"
#include "workers/dag/async.h"

#include <string.h>

#define WIRE16 (DF_W16_LM_HEAD | DF_W16_EMBED)

static df_model_config config(bool tied)
{
    df_model_config c = df_test_micro_model_config(); /* qwen2: q/k/v biases */
    c.tie_word_embeddings = tied;
    return c;
}

/* The trainer's weights of update `seed` (norms and biases moved: every tensor carries signal). */
static df_model *weights(bool tied, uint64_t seed)
{
    df_model_config c = config(tied);
    return df_test_signal_model(&c, seed);
}

static void test_sizes(void **state)
{
    (void)state;
    for (int tied = 0; tied < 2; tied++) {
        df_model *m = weights(tied, 1);
        df_async_weights *x = NULL;
        assert_int_equal(df_async_weights_create(m, DF_ASYNC_WIRE_F32, &x), 0);
        assert_int_equal(df_async_weights_bytes(x), m->n_params * 4);
        df_async_weights_free(x);
        assert_int_equal(df_async_weights_create(m, DF_ASYNC_WIRE_BF16, &x), 0);
        /* float32: per layer ln1 16 + ln2 16 + bq 16 + bk 8 + bv 8, then the final norm 16 */
        const int64_t n32 = 2 * 64 + 16;
        assert_int_equal(df_async_weights_bytes(x), df_weights16_bytes_for(&m->cfg, WIRE16) + n32 * 4);
        df_async_weights_free(x);
        assert_int_equal(df_async_weights_create(m, (df_async_wire)7, &x), DF_EINVAL);
        df_model_free(m);
    }
}

static void test_mismatch_refused(void **state)
{
    (void)state;
    df_model *m = weights(false, 1);
    df_async_weights *f32 = NULL, *b16 = NULL;
    assert_int_equal(df_async_weights_create(m, DF_ASYNC_WIRE_F32, &f32), 0);
    assert_int_equal(df_async_weights_create(m, DF_ASYNC_WIRE_BF16, &b16), 0);
    df_async_header h = {.version = 1, .wire = DF_ASYNC_WIRE_BF16, .n_bf16 = 1, .n_params = 1};
    /* refused before any broadcast: no peer needed */
    assert_int_equal(df_async_weights_receive(f32, W, m, &h, false), DF_EINVAL);
    assert_last_error_mentions("sends the weights in bf16");
    assert_last_error_mentions("reads float32");
    h.n_bf16 = df_weights16_bytes_for(&m->cfg, WIRE16) / 2, h.n_params = 2 * 64 + 16 + 1;
    assert_int_equal(df_async_weights_receive(b16, W, m, &h, true), DF_EINVAL);
    assert_last_error_mentions("another model");
    df_async_weights_free(f32);
    df_async_weights_free(b16);
    df_model_free(m);
}

/* ---- transfers (2 ranks: 0 the trainer, 1 a rollout rank) -------------------------------- */

static const int64_t POFF[4] = {0, 3, 8, 9};
static const int32_t PTOK[9] = {5, 17, 2, 30, 11, 8, 1, 39, 23};

static df_rollout_result generate(df_rollout_engine *e, const df_model *m)
{
    df_rollout_request q = {3, POFF, PTOK, 3, 77, NULL, NULL};
    df_sampling_params sp;
    df_sampling_params_defaults(&sp);
    sp.max_new_tokens = 10;
    sp.ignore_eos = true;
    df_rollout_result r;
    if (df_rollout_generate(e, m, &q, &sp, &r, NULL, NULL))
        fail_msg("generate: %s", df_last_error());
    return r;
}

static df_rollout_engine *engine(const df_model_config *c, df_rollout_dtype dt)
{
    df_rollout_options o = {.max_num_seqs = 4, .max_seq_len = 20, .dtype = dt};
    df_rollout_engine *e = NULL;
    assert_int_equal(df_rollout_engine_create_ex(c, &o, &e), 0);
    return e;
}

/* What the engine converting m's float32 weights itself samples (the float32 wire's path). */
static df_rollout_result converted(const df_model *m)
{
    df_rollout_engine *e = engine(&m->cfg, DF_ROLLOUT_BF16);
    assert_int_equal(df_rollout_engine_load_weights(e, m), 0);
    df_rollout_result r = generate(e, m);
    df_rollout_engine_free(e);
    return r;
}

static void assert_same(const df_rollout_result *a, const df_rollout_result *b)
{
    assert_int_equal(a->n_seqs, b->n_seqs);
    assert_memory_equal(a->offsets, b->offsets, (size_t)(a->n_seqs + 1) * sizeof *a->offsets);
    const size_t n = (size_t)a->offsets[a->n_seqs];
    assert_memory_equal(a->tokens, b->tokens, n * sizeof *a->tokens);
    assert_memory_equal(a->log_probs, b->log_probs, n * sizeof *a->log_probs);
}

static bool differ(const df_rollout_result *a, const df_rollout_result *b)
{
    const int64_t n = a->offsets[a->n_seqs];
    return n != b->offsets[b->n_seqs] || memcmp(a->tokens, b->tokens, (size_t)n * 4) ||
           memcmp(a->log_probs, b->log_probs, (size_t)n * 4);
}

/* The norms and biases of got equal want's (the tensors a bf16 engine reads in float32). */
static void assert_vectors_equal(const df_model *got, const df_model *want)
{
    int n = 0;
    for (int t = 0; t < want->n_tensors; t++) {
        const df_param_desc *d = &want->tensors[t];
        if (d->ndim != 1)
            continue;
        assert_memory_equal(got->params + d->offset, want->params + d->offset, (size_t)d->numel * 4);
        n++;
    }
    assert_int_equal(n, 2 * 5 + 1);
}

/* Rank 1: the next header (posted as the rollout ranks do: a non-blocking broadcast). */
static df_async_header header(void)
{
    df_async_header h;
    df_comm_request *req = NULL;
    assert_int_equal(df_comm_ibroadcast(W, &h, (int64_t)sizeof h, 0, &req), 0);
    assert_int_equal(df_comm_wait(&req), 0);
    return h;
}

static bool two_ranks_bf16(void)
{
    if (N != 2)
        return false;
    double ok = df_model_bf16_available() == DF_OK;
    df_clear_error();
    return df_test_all_max(ok) > 0; /* the machine's answer: the same on both ranks */
}

static void test_bf16_transfer(void **state)
{
    (void)state;
    if (!two_ranks_bf16()) {
        skip();
        return;
    }
    df_model *m = weights(false, 11); /* rank 0: the trainer's; rank 1: its own, other weights */
    if (R == 1)
        assert_int_equal(df_model_init_random(m, 99), 0);
    df_async_weights *x = NULL;
    assert_int_equal(df_async_weights_create(m, DF_ASYNC_WIRE_BF16, &x), 0);
    df_weights16 *actor16 = NULL; /* rank 0: a mixed-precision actor's copy */
    assert_int_equal(df_weights16_create_ex(&m->cfg, WIRE16, &actor16), 0);
    if (R == 0) {
        df_async_header h = {.version = 1};
        assert_int_equal(df_async_weights_send(x, W, m, NULL, &h), 0); /* converted here */
        assert_int_equal(h.wire, DF_ASYNC_WIRE_BF16);
        df_model *next = weights(false, 12); /* update 2: the actor's current copy, sent as is */
        memcpy(m->params, next->params, (size_t)m->n_params * 4);
        df_model_weights_changed(m);
        assert_int_equal(df_weights16_refresh_model(actor16, m), 0);
        h.version = 2;
        assert_int_equal(df_async_weights_send(x, W, m, actor16, &h), 0);
        df_model_free(next);
        next = weights(false, 13); /* update 3: the actor's copy is stale, converted here */
        memcpy(m->params, next->params, (size_t)m->n_params * 4);
        df_model_weights_changed(m);
        h.version = 3;
        assert_int_equal(df_async_weights_send(x, W, m, actor16, &h), 0);
        df_model_free(next);
    } else {
        df_rollout_engine *e = engine(&m->cfg, DF_ROLLOUT_BF16);
        df_model *want = weights(false, 11);
        /* update 1, in place */
        df_async_header h = header();
        assert_int_equal(h.version, 1);
        const int64_t v0 = m->version;
        assert_int_equal(df_async_weights_receive(x, W, m, &h, false), 0);
        assert_int_equal(df_async_weights_install(x, m, e, false), 0);
        assert_true(m->version != v0);
        assert_vectors_equal(m, want);
        df_rollout_result got1 = generate(e, m), ref1 = converted(want);
        assert_same(&got1, &ref1);
        /* update 2, staged: the engine samples version 1 until the install */
        h = header();
        assert_int_equal(df_async_weights_receive(x, W, m, &h, true), 0);
        df_rollout_result still = generate(e, m);
        assert_same(&still, &ref1);
        assert_int_equal(df_async_weights_install(x, m, e, true), 0);
        df_model_free(want);
        want = weights(false, 12);
        assert_vectors_equal(m, want);
        df_rollout_result got2 = generate(e, m), ref2 = converted(want);
        assert_same(&got2, &ref2);
        assert_true(differ(&got2, &got1));
        /* update 3, in place again (into the copy that was staged) */
        h = header();
        assert_int_equal(df_async_weights_receive(x, W, m, &h, false), 0);
        assert_int_equal(df_async_weights_install(x, m, e, false), 0);
        df_model_free(want);
        want = weights(false, 13);
        df_rollout_result got3 = generate(e, m), ref3 = converted(want);
        assert_same(&got3, &ref3);
        df_rollout_result *all[] = {&got1, &ref1, &still, &got2, &ref2, &got3, &ref3};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++)
            df_rollout_result_free(all[i]);
        df_model_free(want);
        df_rollout_engine_free(e);
    }
    df_weights16_free(actor16);
    df_async_weights_free(x);
    df_model_free(m);
}

static void test_f32_transfer(void **state)
{
    (void)state;
    if (N != 2) {
        skip();
        return;
    }
    df_model *m = weights(true, 21);
    if (R == 1)
        assert_int_equal(df_model_init_random(m, 98), 0);
    df_async_weights *x = NULL;
    assert_int_equal(df_async_weights_create(m, DF_ASYNC_WIRE_F32, &x), 0);
    df_rollout_engine *e = R == 1 ? engine(&m->cfg, DF_ROLLOUT_F32) : NULL;
    for (int64_t v = 1; v <= 2; v++) {
        df_model *want = weights(true, 20 + (uint64_t)v);
        bool staged = v == 2;
        if (R == 0) {
            memcpy(m->params, want->params, (size_t)m->n_params * 4);
            df_async_header h = {.version = v};
            assert_int_equal(df_async_weights_send(x, W, m, NULL, &h), 0);
            assert_int_equal(h.wire, DF_ASYNC_WIRE_F32);
            assert_int_equal(h.n_params, m->n_params);
        } else {
            df_async_header h = header();
            assert_int_equal(h.version, v);
            assert_int_equal(df_async_weights_receive(x, W, m, &h, staged), 0);
            if (staged) /* nothing changes until the install */
                assert_true(memcmp(m->params, want->params, (size_t)m->n_params * 4) != 0);
            const int64_t v0 = m->version;
            assert_int_equal(df_async_weights_install(x, m, e, staged), 0);
            assert_true(m->version != v0);
            assert_memory_equal(m->params, want->params, (size_t)m->n_params * 4);
        }
        df_model_free(want);
    }
    df_rollout_engine_free(e);
    df_async_weights_free(x);
    df_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_mismatch_refused),
        cmocka_unit_test(test_bf16_transfer),
        cmocka_unit_test(test_f32_transfer),
    };
    return cmocka_run_group_tests(tests, df_test_world_setup, df_test_world_teardown);
}
