/*
 * Tests of the typed configuration structs (distflow/train_config.h,
 * distflow/sft_config.h) and their resolver.
 *
 * Compile-time properties (no test can run them; the build is the check):
 *  - a field exists for every key of the table and only for those, so code
 *    that names a misspelt key (cfg.algorithm.gama) does not compile, where
 *    df_config_float(c, "algorithm.gama") returned 0 in a Release build;
 *  - the key string, the struct member and its offset come from one spelling
 *    (the member path is the dotted key), so a key cannot be bound to another
 *    key's field;
 *  - src/config/schema_*.c _Static_assert that every field's C type fits its
 *    key's schema type (CFG_KIND_FITS: an optional field only for a nullable
 *    key, strings for strings and maps, ...);
 *  - test_static_checks below repeats a few of these with _Static_assert.
 * At run time: every key, set to a value other than its default, reaches its
 * own field and changes no other byte of the struct (a resolver that read
 * the wrong slot or wrote the wrong offset fails); hand-written spot checks
 * through member access (an oracle independent of the bindings); a workflow
 * node's override reaches the struct resolved from the node's config. The
 * derived values: the actor's temperature from its workflow rollout node in
 * test_workflow.c (test_worker_actor_temperature; end to end, with the
 * log-probs, in test_e2e_grpo.c), the loss settings in test_workflow.c and
 * test_losses_train.c (test_worker_actor_params).
 */
/* rounding-free (scripts/test-variants.sh skips it): parsing, text and integers only */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "config/config_internal.h"
#include "distflow/config.h"
#include "distflow/sft_config.h"
#include "distflow/train_config.h"
#include "testutil.h"

static df_config *load_defaults(const df_config_schema *s)
{
    df_config *c = NULL;
    if (df_config_load(s, NULL, NULL, 0, &c))
        fail_msg("load: %s", df_last_error());
    return c;
}

static int resolve(const df_config_schema *s, const df_config *c, void *out)
{
    return s == df_config_schema_train() ? df_train_config_resolve(c, out) : df_sft_config_resolve(c, out);
}

/*
 * A YAML value for entry e other than its current value (read from the
 * resolved field f): into buf. Returns false when the key's domain has only
 * the one value (lora_rank: [0, 0]).
 */
static bool other_value(const df_config_entry *e, const cfg_binding *b, const char *f, int i, char *buf,
                        size_t cap)
{
    switch (b->ctype) {
    case CFG_C_BOOL: snprintf(buf, cap, "%s", *(const bool *)f ? "false" : "true"); return true;
    case CFG_C_OPT_BOOL:
        snprintf(buf, cap, "%s", ((const df_config_opt_bool *)f)->v ? "false" : "true");
        return true;
    case CFG_C_INT:
    case CFG_C_OPT_INT: {
        bool set = b->ctype == CFG_C_INT || ((const df_config_opt_int *)f)->set;
        int64_t cur = b->ctype == CFG_C_INT ? *(const int64_t *)f : ((const df_config_opt_int *)f)->v;
        int64_t v = !set ? (isfinite(e->min) ? (int64_t)e->min : 3) + 2 : cur + 1;
        if ((double)v > e->max)
            v = cur - 1;
        if ((double)v < e->min || (set && v == cur))
            return false;
        snprintf(buf, cap, "%lld", (long long)v);
        return true;
    }
    case CFG_C_FLOAT:
    case CFG_C_OPT_FLOAT: {
        bool set = b->ctype == CFG_C_FLOAT || ((const df_config_opt_float *)f)->set;
        double cur = b->ctype == CFG_C_FLOAT ? *(const double *)f : ((const df_config_opt_float *)f)->v;
        double v = !set ? (isfinite(e->min) ? e->min : 0) + 0.375 : cur + 0.125;
        if (v > e->max)
            v = cur - 0.125;
        if (v < e->min)
            return false;
        snprintf(buf, cap, "%.17g", v);
        return true;
    }
    case CFG_C_STR: {
        const char *cur = *(const char *const *)f;
        if (e->type == DF_CFG_MAP) {
            snprintf(buf, cap, "{typed_test_%d: 1}", i);
        } else if (e->choices) { /* the first choice that is not the current value */
            const char *p = e->choices;
            while (*p) {
                size_t n = strcspn(p, "|");
                if (!cur || strlen(cur) != n || strncmp(p, cur, n)) {
                    snprintf(buf, cap, "%.*s", (int)n, p);
                    return true;
                }
                p += n + (p[n] == '|');
            }
            return false;
        } else {
            snprintf(buf, cap, "typed_test_%d", i);
        }
        return true;
    }
    case CFG_C_STRS:
        if (e->choices)
            snprintf(buf, cap, "[%.*s]", (int)strcspn(e->choices, "|"), e->choices);
        else
            snprintf(buf, cap, "[typed_test_%d, b]", i);
        return true;
    case CFG_C_FLOATS: snprintf(buf, cap, "[0.25, 0.5]"); return true;
    case CFG_C_NONE: break;
    }
    return false;
}

/* The field f holds the value that `text` (as set) denotes. */
static void field_holds(const df_config_entry *e, const cfg_binding *b, const char *f, const char *text)
{
    char got[512];
    switch (b->ctype) {
    case CFG_C_BOOL: snprintf(got, sizeof got, "%s", *(const bool *)f ? "true" : "false"); break;
    case CFG_C_OPT_BOOL:
        assert_true(((const df_config_opt_bool *)f)->set);
        snprintf(got, sizeof got, "%s", ((const df_config_opt_bool *)f)->v ? "true" : "false");
        break;
    case CFG_C_INT: snprintf(got, sizeof got, "%lld", (long long)*(const int64_t *)f); break;
    case CFG_C_OPT_INT:
        assert_true(((const df_config_opt_int *)f)->set);
        snprintf(got, sizeof got, "%lld", (long long)((const df_config_opt_int *)f)->v);
        break;
    case CFG_C_FLOAT: snprintf(got, sizeof got, "%.17g", *(const double *)f); break;
    case CFG_C_OPT_FLOAT:
        assert_true(((const df_config_opt_float *)f)->set);
        snprintf(got, sizeof got, "%.17g", ((const df_config_opt_float *)f)->v);
        break;
    case CFG_C_STR: snprintf(got, sizeof got, e->type == DF_CFG_MAP ? "%s" : "%s", *(const char *const *)f); break;
    case CFG_C_STRS: {
        const df_config_strs *l = (const df_config_strs *)f;
        assert_false(l->null);
        size_t n = (size_t)snprintf(got, sizeof got, "[");
        for (int k = 0; k < l->n; k++)
            n += (size_t)snprintf(got + n, sizeof got - n, "%s%s", k ? ", " : "", l->items[k]);
        snprintf(got + n, sizeof got - n, "]");
        break;
    }
    case CFG_C_FLOATS: {
        const df_config_floats *l = (const df_config_floats *)f;
        assert_int_equal(l->n, 2);
        snprintf(got, sizeof got, "[%g, %g]", l->items[0], l->items[1]);
        break;
    }
    case CFG_C_NONE: fail_msg("%s: no binding", e->key);
    }
    if (strcmp(got, text))
        fail_msg("%s: set to %s, its field holds %s", e->key, text, got);
}

/* Whether two resolutions hold the same value in a field: scalars bit for bit, strings and lists
   by content (each resolution points into its own config). */
static bool same_field(const cfg_binding *b, const char *x, const char *y)
{
    switch (b->ctype) {
    case CFG_C_STR: {
        const char *p = *(const char *const *)x, *q = *(const char *const *)y;
        return (!p && !q) || (p && q && !strcmp(p, q));
    }
    case CFG_C_STRS: {
        const df_config_strs *p = (const df_config_strs *)x, *q = (const df_config_strs *)y;
        if (p->n != q->n || p->null != q->null)
            return false;
        for (int k = 0; k < p->n; k++)
            if (strcmp(p->items[k], q->items[k]))
                return false;
        return true;
    }
    case CFG_C_FLOATS: {
        const df_config_floats *p = (const df_config_floats *)x, *q = (const df_config_floats *)y;
        return p->n == q->n && (!p->n || !memcmp(p->items, q->items, (size_t)p->n * sizeof *p->items));
    }
    default: return !memcmp(x, y, b->size); /* written member by member: padding stays zero */
    }
}

/* Every key of schema s: set alone to another value, it changes its own field, to that value, and no other field. */
static void walk_table(const df_config_schema *s)
{
    assert_non_null(s->bind);
    df_config *base = load_defaults(s);
    char *a = calloc(1, s->struct_size), *b = calloc(1, s->struct_size);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(resolve(s, base, a), DF_OK);
    int changed = 0;
    for (int i = 0; i < s->n; i++) {
        const df_config_entry *e = &s->entries[i];
        const cfg_binding *bd = &s->bind[i];
        assert_true(bd->offset + bd->size <= s->struct_size);
        /* a plain field on a nullable key only for a derived default (its null is replaced on load) */
        bool plain = bd->ctype == CFG_C_BOOL || bd->ctype == CFG_C_INT || bd->ctype == CFG_C_FLOAT;
        if (plain && e->nullable && !e->null_from)
            fail_msg("%s: nullable without null_from but a plain field", e->key);
        char text[256];
        if (!other_value(e, bd, a + bd->offset, i, text, sizeof text)) {
            assert_true(e->min == e->max); /* only a one-value domain may be skipped */
            continue;
        }
        df_config *c = NULL;
        assert_int_equal(df_config_copy(base, &c), DF_OK);
        /* an open group's "g.*" map is set through the group: a mapping of other names lands in it */
        size_t klen = strlen(e->key);
        bool open = klen > 2 && !strcmp(e->key + klen - 2, ".*");
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)(open ? klen - 2 : klen), e->key);
        if (df_config_set(c, key, text))
            fail_msg("%s=%s: %s", key, text, df_last_error());
        assert_int_equal(resolve(s, c, b), DF_OK);
        field_holds(e, bd, b + bd->offset, e->type == DF_CFG_FLOAT_LIST ? "[0.25, 0.5]" : text);
        for (int j = 0; j < s->n; j++)
            if (j != i && !same_field(&s->bind[j], a + s->bind[j].offset, b + s->bind[j].offset))
                fail_msg("setting %s changed the field of %s too", e->key, s->entries[j].key);
        if (same_field(bd, a + bd->offset, b + bd->offset))
            fail_msg("setting %s left its field unchanged", e->key);
        changed++;
        df_config_free(c);
    }
    assert_true(changed >= s->n - 2);
    free(a);
    free(b);
    df_config_free(base);
}

static void test_every_train_key(void **state)
{
    (void)state;
    walk_table(df_config_schema_train());
}

static void test_every_sft_key(void **state)
{
    (void)state;
    walk_table(df_config_schema_sft());
}

/* Spot checks through member access: an oracle that does not go through the bindings. */
static void test_spot_checks(void **state)
{
    (void)state;
    const char *ov[] = {"algorithm.gamma=0.25",
                        "algorithm.lam=0.5",
                        "actor_rollout_ref.actor.optim.lr=3e-6",
                        "critic.optim.lr=7e-6",
                        "actor_rollout_ref.actor.optim.betas=[0.5, 0.75]",
                        "actor_rollout_ref.rollout.temperature=0.625",
                        "actor_rollout_ref.rollout.val_kwargs.temperature=0.375",
                        "actor_rollout_ref.actor.clip_ratio=0.125",
                        "actor_rollout_ref.actor.clip_ratio_high=0.28",
                        "actor_rollout_ref.actor.loss_scale_factor=300",
                        "data.train_files=[a.parquet, b.parquet]",
                        "trainer.logger=[console, file]",
                        "algorithm.adv_estimator=grpo",
                        "critic.ppo_micro_batch_size_per_gpu=2"};
    df_config *c = NULL;
    assert_int_equal(df_config_load(df_config_schema_train(), NULL, ov, (int)(sizeof ov / sizeof *ov), &c), DF_OK);
    df_train_config t;
    assert_int_equal(df_train_config_resolve(c, &t), DF_OK);
    assert_true(t.algorithm.gamma == 0.25);
    assert_true(t.algorithm.lam == 0.5);
    assert_true(t.actor_rollout_ref.actor.optim.lr == 3e-6);
    assert_true(t.critic.optim.lr == 7e-6);
    assert_int_equal(t.actor_rollout_ref.actor.optim.betas.n, 2);
    assert_true(t.actor_rollout_ref.actor.optim.betas.items[1] == 0.75);
    assert_true(t.critic.optim.betas.items[1] == 0.999);
    assert_true(t.actor_rollout_ref.rollout.temperature == 0.625);
    assert_true(t.actor_rollout_ref.rollout.val_kwargs.temperature == 0.375);
    assert_true(t.actor_rollout_ref.actor.clip_ratio_low == 0.125); /* derived: null -> clip_ratio */
    assert_true(t.actor_rollout_ref.actor.clip_ratio_high == 0.28);
    assert_true(t.actor_rollout_ref.actor.loss_scale_factor.set);
    assert_int_equal(t.actor_rollout_ref.actor.loss_scale_factor.v, 300);
    assert_int_equal(t.data.train_files.n, 2);
    assert_string_equal(t.data.train_files.items[1], "b.parquet");
    assert_string_equal(t.trainer.logger.items[1], "file");
    assert_string_equal(t.algorithm.adv_estimator, "grpo");
    assert_null(t.data.tokenizer);                  /* nullable string, null */
    assert_false(t.data.val_batch_size.set);        /* nullable int, null */
    assert_int_equal(t.data.gen_batch_size, 1024);  /* derived from data.train_batch_size */
    assert_int_equal(t.actor_rollout_ref.rollout.response_length, 512);
    assert_true(t.critic.forward_micro_batch_size_per_gpu.set); /* from ppo_micro_batch_size_per_gpu */
    assert_int_equal(t.critic.forward_micro_batch_size_per_gpu.v, 2);
    assert_false(t.actor_rollout_ref.actor.optim.min_lr_ratio.set == false); /* default 0.0, set */
    assert_string_equal(t.ray_init, "{num_cpus: null, timeline_json_file: null}");
    df_config_free(c);
}

/* A workflow node's `config:` is a df_config_with_overrides copy (src/workers/common/node_config.c); its
   typed struct carries the override, the global one does not. */
static void test_node_override(void **state)
{
    (void)state;
    df_config *g = load_defaults(df_config_schema_train()), *n = NULL;
    const char *k[] = {"actor_rollout_ref.rollout.temperature", "actor_rollout_ref.actor.entropy_coeff"};
    const char *v[] = {"0.5", "0.01"};
    assert_int_equal(df_config_with_overrides(g, k, v, 2, "wf.yaml node 'rollout_actor'", &n), DF_OK);
    df_train_config tg, tn;
    assert_int_equal(df_train_config_resolve(g, &tg), DF_OK);
    assert_int_equal(df_train_config_resolve(n, &tn), DF_OK);
    assert_true(tg.actor_rollout_ref.rollout.temperature == 1.0);
    assert_true(tn.actor_rollout_ref.rollout.temperature == 0.5);
    assert_true(tn.actor_rollout_ref.actor.entropy_coeff == 0.01);
    assert_true(tn.actor_rollout_ref.actor.optim.lr == tg.actor_rollout_ref.actor.optim.lr);
    df_config_free(n);
    df_config_free(g);
}

/* A null in a derived-default key, whose field is plain, is refused naming the key. The loader
   and df_config_with_overrides re-derive such a null, so the slot is nulled by hand here: the
   resolver's guard against a future path that leaves one. */
static void test_null_in_plain_field(void **state)
{
    (void)state;
    df_config *g = load_defaults(df_config_schema_train());
    int i = cfg_find(df_config_schema_train(), "actor_rollout_ref.actor.clip_ratio_low");
    assert_true(i >= 0);
    g->slots[i].v.is_null = true;
    df_train_config t;
    assert_int_equal(df_train_config_resolve(g, &t), DF_EINVAL);
    assert_last_error_mentions("actor_rollout_ref.actor.clip_ratio_low=null");
    df_config_free(g);
}

static void test_wrong_schema(void **state)
{
    (void)state;
    df_config *c = load_defaults(df_config_schema_sft());
    df_train_config t;
    assert_int_equal(df_train_config_resolve(c, &t), DF_EINVAL);
    assert_last_error_mentions("not loaded with the train schema");
    df_config_free(c);
}

/* Properties the compiler checks: field types, and that the two optimizer blocks share one type. */
static void test_static_checks(void **state)
{
    (void)state;
    df_train_config t;
    _Static_assert(_Generic(t.algorithm.gamma, double: 1, default: 0), "float keys are doubles");
    _Static_assert(_Generic(t.actor_rollout_ref.rollout.n, int64_t: 1, default: 0), "int keys are int64_t");
    _Static_assert(_Generic(t.data.val_batch_size, df_config_opt_int: 1, default: 0), "nullable ints are optional");
    _Static_assert(_Generic(t.actor_rollout_ref.actor.clip_ratio_low, double: 1, default: 0),
                   "a derived default with a non-null source is plain");
    _Static_assert(_Generic(&t.critic.optim, struct df_train_optim *: 1, default: 0), "one optimizer type");
    _Static_assert(_Generic(&t.actor_rollout_ref.actor.optim, struct df_train_optim *: 1, default: 0),
                   "one optimizer type");
    (void)t;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_train_key), cmocka_unit_test(test_every_sft_key),
        cmocka_unit_test(test_spot_checks),     cmocka_unit_test(test_node_override),
        cmocka_unit_test(test_null_in_plain_field), cmocka_unit_test(test_wrong_schema),
        cmocka_unit_test(test_static_checks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
