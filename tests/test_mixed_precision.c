/*
 * Mixed precision in training (docs/mixed_precision.md): the bf16 copy of the weights is
 * refreshed by the optimizer step (the next forward sees the new weights: its log-probs are
 * those of fresh activations loaded from the updated model, to the bit, and not the old ones);
 * a reference stored in bf16 computes what one keeping its float32 weights computes while its
 * layers' float32 matmul pages and its embedding / head pages are given back; at step 0 the actor
 * and such a reference give the same log-probs to the bit (both look up a bf16 embedding: the KL
 * loss starts at exactly 0), and the reference gives its activations back after each pass; the
 * fsdp_config keys reach the actor (a bf16
 * setting moves the log-probs by bf16 roundings, fp32 gives the float32 path's bits) and wrong
 * dtypes are refused naming the key. The bf16 parts skip on a CPU without native bf16 kernels.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"

#include "distflow/train_config.h"
#include "engine/actor.h"
#include "engine/packing.h"
#include "engine/train_core.h"
#include "model/acts.h"
#include "model/ops.h"
#include "model/safetensors.h"
#include "util/pages.h"
#include "tolerance.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void skip_without_bf16(void)
{
    if (df_model_bf16_available() != DF_OK) {
        print_message("no native bf16 matmuls here: %s\n", df_last_error());
        skip();
    }
}


/* Whole-batch micro-batches, so a fresh df_acts on the packed batch runs the same shapes. */
static df_actor_params params(bool bf16)
{
    df_actor_params p = {.optim.lr = 1e-2, .optim.beta1 = 0.9, .optim.beta2 = 0.999, .optim.adam_eps = 1e-8,
                         .optim.grad_clip = 1e9, .micro_batch_size = 4, .logprob_micro_batch_size = 4,
                         .loss.ppo_epochs = 1, .loss.policy_loss = "vanilla", .loss.loss_agg_mode = "token-mean",
                         .loss.clip_ratio_low = 0.2, .loss.clip_ratio_high = 0.2, .loss.clip_ratio_c = 3.0,
                         .temperature = 0.8f, .bf16 = bf16};
    return p;
}

/* Log-probs of b's 6 response tokens from fresh activations on m (bf16: mixed precision). */
static void fresh_log_probs(const df_model *m, const df_batch *b, bool bf16, float *lp)
{
    df_packed pk = {0};
    df_acts *a = NULL;
    df_backend cpu = df_backend_cpu();
    assert_int_equal(df_pack_responses(&pk, b, 0, 4), 0);
    assert_int_equal(df_acts_create_ex(&cpu, &m->cfg, pk.sb.n_tokens, pk.sb.n_out, bf16 ? DF_ACTS_BF16 : 0, &a), 0);
    assert_int_equal(df_acts_load_weights(a, m), 0);
    assert_int_equal(df_model_forward(m, a, &pk.sb, 0.8f, lp, NULL), 0);
    df_acts_free(a);
    df_packed_free(&pk);
}

static void test_refresh_after_step(void **state)
{
    (void)state;
    skip_without_bf16();
    df_actor *a;
    df_actor_params p = params(true);
    assert_int_equal(df_actor_create(df_test_micro_model(3), &p, true, &a), 0);
    df_batch *b = df_test_small_batch();
    assert_int_equal(df_actor_compute_log_prob(a, b, "old_log_probs", NULL), 0);
    float fresh[6], *adv;
    const float *old = df_batch_column(b, "old_log_probs")->data;
    fresh_log_probs(df_actor_model(a), b, true, fresh);
    assert_memory_equal(old, fresh, sizeof fresh); /* the copy made at the first plan */
    assert_int_equal(df_batch_alloc_tok_f32_like(b, "advantages", "response_ids", &adv), 0);
    for (int j = 0; j < 6; j++)
        adv[j] = (float)(j % 3) - 0.8f;
    const df_train_core *c = (const df_train_core *)(const void *)a; /* df_actor begins with its core */
    assert_ptr_equal(c->model, df_actor_model(a));
    assert_int_equal(df_weights16_version(c->w16), 1);
    df_metrics *m = df_metrics_new();
    assert_int_equal(df_actor_update_policy(a, b, m), 0);
    assert_int_equal(df_weights16_version(c->w16), 2); /* one conversion per optimizer step */
    /* the next forward reads the updated weights' copy: a fresh load of them, not the old one */
    assert_int_equal(df_actor_compute_log_prob(a, b, "new", NULL), 0);
    const float *now = df_batch_column(b, "new")->data;
    fresh_log_probs(df_actor_model(a), b, true, fresh);
    assert_memory_equal(now, fresh, sizeof fresh);
    int moved = 0;
    for (int j = 0; j < 6; j++)
        moved += now[j] != old[j];
    assert_true(moved > 0);
    df_metrics_free(m);
    df_batch_free(b);
    df_actor_free(a);
}

/* A model whose matmul weights and embedding span whole pages (so some are released). */
static df_model *paged_model_ex(bool tied)
{
    df_model_config c;
    df_model_config_defaults(&c);
    c.vocab_size = 40, c.hidden_size = 64, c.intermediate_size = 256, c.num_hidden_layers = 2;
    c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 16, c.max_position_embeddings = 64;
    c.tie_word_embeddings = tied;
    df_model *m;
    assert_int_equal(df_model_create(&c, &m), 0);
    assert_int_equal(df_model_init_random(m, 7), 0);
    return m;
}

static df_model *paged_model(void) { return paged_model_ex(false); }

static void test_reference_bf16_storage(void **state)
{
    (void)state;
    skip_without_bf16();
    df_actor *keep, *only;
    df_actor_params p = params(true), q = params(true);
    q.bf16_weights = true;
    assert_int_equal(df_actor_create(paged_model(), &p, false, &keep), 0);
    assert_int_equal(df_actor_create(paged_model(), &q, false, &only), 0);
    df_batch *b = df_test_small_batch();
    assert_int_equal(df_actor_compute_log_prob(keep, b, "keep", NULL), 0);
    assert_int_equal(df_actor_compute_log_prob(only, b, "only", NULL), 0);
    assert_memory_equal(df_batch_column(b, "keep")->data, df_batch_column(b, "only")->data, 6 * sizeof(float));
    /* the float32 gate projection's middle pages are gone (read as zeros), the kept model's not */
    const int64_t mid = 64 * 256 / 2;
    assert_true(df_actor_model(only)->w.layers[1].w_gate[mid] == 0.0f);
    assert_true(df_actor_model(keep)->w.layers[1].w_gate[mid] != 0.0f);
    /* and so are the embedding's and the (untied) head's: the copy holds both */
    assert_true(df_actor_model(only)->w.embed[40 * 64 / 2] == 0.0f);
    assert_true(df_actor_model(only)->w.lm_head[40 * 64 / 2] == 0.0f);
    assert_true(df_actor_model(keep)->w.embed[40 * 64 / 2] != 0.0f);
    /* a trainable model keeps float32 weights; bf16 storage needs bf16 compute */
    df_actor *bad = NULL;
    df_model *m = paged_model();
    assert_int_equal(df_actor_create(m, &q, true, &bad), DF_EINVAL);
    q.bf16 = false;
    assert_int_equal(df_actor_create(m, &q, false, &bad), DF_EINVAL);
    assert_null(bad);
    df_model_free(m);
    df_batch_free(b);
    df_actor_free(keep);
    df_actor_free(only);
}

/* This process's resident file-backed memory in KiB (/proc/self/status RssFile): where an
 * offloaded copy's mapped pages count (mincore would report the page cache instead). */
static int64_t rss_file_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        sscanf(line, "RssFile: %ld", &kib);
    if (f)
        fclose(f);
    return kib;
}

/* ref.fsdp_config.param_offload: the reference's bf16 copy moves to a file and is paged out after
 * every pass; the log-probs stay the bits of a resident reference, pass after pass (bf16-only
 * storage: its float32 weights are gone, the pages come back from the file), and the copy's
 * pages leave the process's resident set (RssFile). A missing directory and a float32 or
 * trainable core are refused. */
static void test_reference_offload(void **state)
{
    (void)state;
    skip_without_bf16();
    char dir[] = "/tmp/df_offload_XXXXXX";
    assert_non_null(mkdtemp(dir));
    df_actor *keep, *off, *off2;
    df_actor_params p = params(true), q = params(true);
    p.bf16_weights = q.bf16_weights = true;
    q.offload_dir = dir;
    assert_int_equal(df_actor_create(paged_model(), &p, false, &keep), 0);
    assert_int_equal(df_actor_create(paged_model(), &q, false, &off), 0);
    df_batch *b = df_test_small_batch();
    assert_int_equal(df_actor_compute_log_prob(keep, b, "keep", NULL), 0);
    for (int pass = 0; pass < 2; pass++) { /* the second reads the pages back from the file */
        assert_int_equal(df_actor_compute_log_prob(off, b, "off", NULL), 0);
        assert_memory_equal(df_batch_column(b, "keep")->data, df_batch_column(b, "off")->data,
                            6 * sizeof(float));
    }
    assert_int_equal(df_actor_core(off)->offload_dir, dir);
    /* Keeping float32 weights too, the copy can be written again: its pages come and go. */
    q.bf16_weights = false;
    assert_int_equal(df_actor_create(paged_model(), &q, false, &off2), 0);
    assert_int_equal(df_actor_compute_log_prob(off2, b, "off2", NULL), 0);
    df_train_core *c = df_actor_core(off2);
    const int64_t kib = df_weights16_bytes_for(&c->model->cfg, DF_W16_LM_HEAD | DF_W16_EMBED) / 1024;
    const int64_t r0 = rss_file_kib();
    assert_int_equal(df_train_core_weights_changed(c), 0); /* rewrites every page of the copy */
    const int64_t r1 = rss_file_kib();
    df_train_core_page_out(c);
    const int64_t r2 = rss_file_kib();
    print_message("copy %lld KiB, RssFile %lld -> %lld (written) -> %lld (paged out) KiB\n",
                  (long long)kib, (long long)r0, (long long)r1, (long long)r2);
    assert_true(kib > 32);
    /* half of the copy at least: the kernel may unmap cold file pages itself (DAMON reclaim), a
       missing page-out leaves ~0 */
    assert_true(r1 - r0 >= kib / 2 && r1 - r2 >= kib / 2);
    assert_int_equal(df_actor_compute_log_prob(off2, b, "off2", NULL), 0);
    assert_memory_equal(df_batch_column(b, "keep")->data, df_batch_column(b, "off2")->data, 6 * sizeof(float));
    assert_true(rss_file_kib() - r2 < kib / 2); /* the pass read the copy in and paged it out */
    df_actor_free(off2);
    /* refused: trainable, float32 */
    df_actor *bad = NULL;
    df_model *m = paged_model();
    assert_int_equal(df_actor_create(m, &q, true, &bad), DF_EINVAL);
    q.bf16 = q.bf16_weights = false;
    assert_int_equal(df_actor_create(m, &q, false, &bad), DF_EINVAL);
    assert_null(bad);
    df_model_free(m);
    /* a directory that does not exist: the first pass fails naming it */
    q = params(true);
    q.bf16_weights = true;
    q.offload_dir = "/nonexistent/df-offload";
    assert_int_equal(df_actor_create(paged_model(), &q, false, &bad), 0);
    assert_int_equal(df_actor_compute_log_prob(bad, b, "bad", NULL), DF_EIO);
    assert_non_null(strstr(df_last_error(), "/nonexistent/df-offload"));
    df_actor_free(bad);
    df_batch_free(b);
    df_actor_free(keep);
    df_actor_free(off);
    assert_int_equal(rmdir(dir), 0); /* the file was unlinked at once: the directory is empty */
}

/* df_pages_to_file: the bytes survive the move and a release; the pointer stays; pages go. */
static void test_pages_to_file(void **state)
{
    (void)state;
    char dir[] = "/tmp/df_offload_XXXXXX";
    assert_non_null(mkdtemp(dir));
    const size_t n = 1 << 20;
    unsigned char *buf = malloc(n);
    assert_non_null(buf);
    for (size_t i = 0; i < n; i++)
        buf[i] = (unsigned char)(i * 131 + 7);
    int64_t moved = 0;
    assert_int_equal(df_pages_to_file(buf, n, dir, &moved), 0);
    assert_true(moved >= (int64_t)n - 2 * 4096 && moved <= (int64_t)n);
    for (int round = 0; round < 2; round++) { /* read in from the file, then after a release */
        for (size_t i = 0; i < n; i++)
            if (buf[i] != (unsigned char)(i * 131 + 7))
                fail_msg("byte %zu lost (round %d)", i, round);
        const int64_t r0 = rss_file_kib();
        assert_true(df_pages_release(buf, n) >= moved);
        /* out of the resident set: at least half (the kernel may unmap cold file pages itself at
           any time, e.g. DAMON reclaim: a missing release leaves ~0 of it) */
        assert_true(r0 - rss_file_kib() >= moved / 2048);
    }
    buf[4096 * 3] = 1; /* still writable */
    assert_int_equal(buf[4096 * 3], 1);
    free(buf);
    assert_int_equal(df_pages_to_file(&moved, sizeof moved, "/nonexistent", NULL), 0); /* no whole page */
    unsigned char *b2 = malloc(n);
    assert_int_equal(df_pages_to_file(b2, n, "/nonexistent/x", NULL), DF_EIO);
    assert_non_null(strstr(df_last_error(), "/nonexistent/x"));
    free(b2);
    assert_int_equal(rmdir(dir), 0);
}

/*
 * Step 0 of a GRPO / PPO run in mixed precision: the actor and a reference computing and stored in
 * bf16 (the defaults), made from the same weights, give the same log-probs to the bit, so the KL
 * loss is exactly 0 at the first step. Both read the embedding from their bf16 copies (the
 * reference's float32 embedding is gone), so the test fails if only one of them rounds it; tied
 * and untied embeddings.
 */
static void test_actor_reference_step0(void **state)
{
    (void)state;
    skip_without_bf16();
    for (int tied = 0; tied < 2; tied++) {
        df_model *m = paged_model_ex(tied), *r = NULL;
        assert_int_equal(df_model_clone(m, &r), 0);
        df_actor *actor, *ref;
        df_actor_params p = params(true), q = params(true);
        q.bf16_weights = true;
        assert_int_equal(df_actor_create(m, &p, true, &actor), 0);
        assert_int_equal(df_actor_create(r, &q, false, &ref), 0);
        df_batch *b = df_test_small_batch();
        assert_int_equal(df_actor_compute_log_prob(actor, b, "old_log_probs", NULL), 0);
        assert_int_equal(df_actor_compute_log_prob(ref, b, "ref_log_prob", NULL), 0);
        const float *old = df_batch_column(b, "old_log_probs")->data;
        const float *rlp = df_batch_column(b, "ref_log_prob")->data;
        assert_memory_equal(old, rlp, 6 * sizeof(float));
        /* the reference holds no activations between passes (the actor's update runs then);
         * the next pass makes them again and gives the same bits */
        const df_train_core *rc = (const df_train_core *)(const void *)ref;
        assert_null(rc->acts);
        assert_non_null(((const df_train_core *)(const void *)actor)->acts);
        assert_int_equal(df_actor_compute_log_prob(ref, b, "ref_again", NULL), 0);
        assert_null(rc->acts);
        assert_memory_equal(rlp, df_batch_column(b, "ref_again")->data, 6 * sizeof(float));
        /* the reference reads no float32 embedding (its pages read as zeros now) */
        assert_true(df_actor_model(ref)->w.embed[40 * 64 / 2] == 0.0f);
        assert_true(df_actor_model(actor)->w.embed[40 * 64 / 2] != 0.0f);
        /* and the actor does round it: its bf16 log-probs are those of a model whose
         * embedding is already bf16-exact */
        df_model *e = NULL;
        assert_int_equal(df_model_clone(df_actor_model(actor), &e), 0);
        for (int64_t i = 0; i < 40 * 64; i++)
            e->w.embed[i] = df_bf16_to_f32(df_f32_to_bf16(e->w.embed[i]));
        float fresh[6], plain[6];
        fresh_log_probs(e, b, true, fresh);
        assert_memory_equal(old, fresh, sizeof fresh);
        fresh_log_probs(df_actor_model(actor), b, false, plain);
        fresh_log_probs(e, b, false, fresh);
        assert_true(memcmp(plain, fresh, sizeof fresh) != 0); /* the rounding moves float32 */
        df_model_free(e);
        df_batch_free(b);
        df_actor_free(actor);
        df_actor_free(ref);
    }
}

/* ---- the configuration keys -------------------------------------------------------------------- */

#define YAML "actor_rollout_ref: {model: {path: /nonexistent}, rollout: {n: 2}}\nalgorithm: {adv_estimator: grpo}\n"

/* df_config_validate_train of the defaults with one override: its status, the message in msg. */
static int validate_with(const char *ov, char *msg, size_t cap)
{
    df_config *cfg;
    int rc = df_config_load_text(df_config_schema_train(), YAML, "mp.yaml", &ov, 1, &cfg);
    if (!rc) {
        rc = df_config_validate_train(cfg, 1);
        df_config_free(cfg);
    }
    snprintf(msg, cap, "%s", rc ? df_last_error() : "");
    return rc;
}

static void test_config_keys(void **state)
{
    (void)state;
    char msg[1024];
    if (validate_with("actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32", msg, sizeof msg))
        fail_msg("%s", msg);
    assert_int_equal(validate_with("critic.model.fsdp_config.mixed_precision.param_dtype=bfloat16", msg, sizeof msg), 0);
    assert_int_equal(validate_with("actor_rollout_ref.ref.fsdp_config.model_dtype=bf16", msg, sizeof msg), 0);
    static const char *const refused[] = {
        "actor_rollout_ref.actor.fsdp_config.mixed_precision.reduce_dtype=bf16",
        "actor_rollout_ref.ref.fsdp_config.mixed_precision.buffer_dtype=bfloat16",
        "critic.model.fsdp_config.mixed_precision.reduce_dtype=bf16",
        "actor_rollout_ref.actor.fsdp_config.model_dtype=bf16",
        "critic.model.fsdp_config.model_dtype=bf16",
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        assert_int_equal(validate_with(refused[i], msg, sizeof msg), DF_EUNSUPPORTED);
        char key[160];
        snprintf(key, sizeof key, "%.*s", (int)(strchr(refused[i], '=') - refused[i]), refused[i]);
        if (!strstr(msg, key))
            fail_msg("%s: the message does not name the key: %s", refused[i], msg);
    }
    /* not a dtype at all: the schema names the key and the choices */
    assert_int_equal(validate_with("actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp16", msg, sizeof msg),
                     DF_EINVAL);
    assert_non_null(strstr(msg, "mixed_precision.param_dtype"));
    /* a bf16-stored reference computing in fp32 would have no weights to read */
    const char *two[] = {"actor_rollout_ref.ref.fsdp_config.model_dtype=bf16",
                         "actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype=fp32"};
    df_config *cfg;
    assert_int_equal(df_config_load_text(df_config_schema_train(), YAML, "mp.yaml", two, 2, &cfg), 0);
    assert_int_equal(df_config_validate_train(cfg, 1), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "ref.fsdp_config.model_dtype"));
    assert_non_null(strstr(df_last_error(), "ref.fsdp_config.mixed_precision.param_dtype"));
    df_config_free(cfg);
    /* the defaults are verl's: bf16 compute, fp32 reductions, buffers and trained weights */
    df_train_config t;
    assert_int_equal(df_config_load_text(df_config_schema_train(), YAML, "mp.yaml", NULL, 0, &cfg), 0);
    assert_int_equal(df_train_config_resolve(cfg, &t), 0);
    assert_string_equal(t.actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype, "bf16");
    assert_string_equal(t.actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype, "bf16");
    assert_string_equal(t.critic.model.fsdp_config.mixed_precision.param_dtype, "bf16");
    assert_string_equal(t.actor_rollout_ref.actor.fsdp_config.mixed_precision.reduce_dtype, "fp32");
    assert_null(t.actor_rollout_ref.ref.fsdp_config.model_dtype);
    assert_string_equal(t.critic.model.fsdp_config.model_dtype, "fp32");
    df_config_free(cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refresh_after_step),
        cmocka_unit_test(test_reference_bf16_storage),
        cmocka_unit_test(test_actor_reference_step0),
        cmocka_unit_test(test_reference_offload),
        cmocka_unit_test(test_pages_to_file),
        cmocka_unit_test(test_config_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
