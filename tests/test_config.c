/* Tests of the configuration layer (include/distflow/config.h). */
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
#include "config/yaml_guard.h"
#include "distflow/config.h"

#define ACTOR "actor_rollout_ref.actor."
#define ROLLOUT "actor_rollout_ref.rollout."

/* A parsed float is strtod of its YAML text: the same double as the C literal of that text
   (both correctly rounded), so compared exactly, as doubles (cmocka's assert_float_equal
   would compare float32 roundings). */
#define assert_exact(a, b)                                                                       \
    do {                                                                                         \
        double a_ = (double)(a), b_ = (double)(b);                                               \
        if (a_ != b_)                                                                            \
            fail_msg("%s = %.17g, expected %.17g", #a, a_, b_);                                  \
    } while (0)

/* ---- helpers ---- */

static char g_path[512];

/* Write `text` to <build>/test_config_<name>.yaml; returns the path (static). */
static const char *yaml_file(const char *name, const char *text)
{
    snprintf(g_path, sizeof g_path, "%s/test_config_%s.yaml", DF_BINARY_DIR, name);
    FILE *f = fopen(g_path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return g_path;
}

static df_config *load_ok(const df_config_schema *s, const char *path, const char *const *ov, int n)
{
    df_config *c = NULL;
    int rc = df_config_load(s, path, ov, n, &c);
    if (rc)
        fail_msg("load failed (%d): %s", rc, df_last_error());
    assert_non_null(c);
    return c;
}

/* Load must fail with DF_EINVAL and exactly `want` as the message. */
static void load_fails(const char *path, const char *const *ov, int n, const char *want)
{
    df_config *c = (df_config *)1;
    int rc = df_config_load(df_config_schema_train(), path, ov, n, &c);
    assert_int_equal(rc, DF_EINVAL);
    assert_null(c);
    assert_string_equal(df_last_error(), want);
}

static void override_fails(const char *arg, const char *want)
{
    const char *ov[] = {arg};
    load_fails(NULL, ov, 1, want);
}

/* ---- schema ---- */

static void test_schema_tables_check(void **state)
{
    (void)state;
    const df_config_schema *t = df_config_schema_train(), *s = df_config_schema_sft();
    assert_int_equal(df_config_schema_check(t), DF_OK);
    assert_int_equal(df_config_schema_check(s), DF_OK);
    assert_string_equal(df_config_schema_name(t), "train");
    assert_string_equal(df_config_schema_name(s), "sft");
    assert_true(df_config_schema_count(t) > 150);
    assert_true(df_config_schema_count(s) > 50);
    const df_config_entry *e = df_config_schema_find(t, ACTOR "clip_ratio_low");
    assert_non_null(e);
    assert_int_equal(e->type, DF_CFG_FLOAT);
    assert_true(e->nullable);
    assert_string_equal(e->null_from, ACTOR "clip_ratio");
    assert_null(df_config_schema_find(t, "data"));
    assert_null(df_config_schema_at(t, -1));
    assert_string_equal(df_config_schema_at(t, 0)->key, "data.tokenizer");
    assert_string_equal(df_config_type_name(DF_CFG_FLOAT_LIST), "list[float]");
}

static void test_schema_check_catches_bad_tables(void **state)
{
    (void)state;
    static const df_config_entry dup[] = {KI("a.b", "1", 0, INF, "x"), KI("a.b", "2", 0, INF, "y")};
    static const df_config_entry group[] = {KI("a.b", "1", 0, INF, "x"), KI("a.b.c", "2", 0, INF, "y")};
    static const df_config_entry bad_default[] = {KI("a.b", "abc", 0, INF, "x")};
    static const df_config_entry out_of_range[] = {KI("a.b", "-1", 0, INF, "x")};
    static const df_config_entry bad_from[] = {KF_FROM("a.b", "a.c", 0, INF, "x"), KI("a.c", "1", 0, INF, "y")};
    static const df_config_entry bad_key[] = {KI("a..b", "1", 0, INF, "x")};
    /* an open group's "g.*" entry: only a map, and '*' only as its last component */
    static const df_config_entry open_int[] = {KI("a.*", "1", 0, INF, "x")};
    static const df_config_entry star_inside[] = {{"a.*.b", DF_CFG_MAP, false, "{}", -INF, INF, 0, NULL, NULL, "x"}};
    const df_config_schema cases[] = {{"dup", dup, 2, NULL, 0, NULL},           {"group", group, 2, NULL, 0, NULL},
                                      {"bad_default", bad_default, 1, NULL, 0, NULL}, {"range", out_of_range, 1, NULL, 0, NULL},
                                      {"from", bad_from, 2, NULL, 0, NULL},     {"key", bad_key, 1, NULL, 0, NULL},
                                      {"open", open_int, 1, NULL, 0, NULL},     {"star", star_inside, 1, NULL, 0, NULL}};
    const char *want[] = {"duplicate key a.b", "a key cannot also be a group",
                          "expected an integer, got \"abc\"", "must be >= 0, got -1",
                          "null_from 'a.c' must name another key of the same type", "malformed key 'a..b'",
                          "a.*: an open group's entry must be a map", "malformed key 'a.*.b'"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(df_config_schema_check(&cases[i]), DF_EINTERNAL);
        if (!strstr(df_last_error(), want[i]))
            fail_msg("case %zu: '%s' lacks '%s'", i, df_last_error(), want[i]);
    }
}

static void test_schema_print(void **state)
{
    (void)state;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_int_equal(df_config_schema_print(df_config_schema_train(), "data", f), DF_OK);
    fclose(f);
    assert_non_null(strstr(buf, "data.train_batch_size  int  default: 1024  >= 1\n"
                                "    prompts per training step (before rollout.n)\n"));
    assert_non_null(strstr(buf, "data.truncation  str  default: error  one of: error|left|right|middle\n"));
    assert_non_null(strstr(buf, "data.val_batch_size  int or null  default: null  >= 1\n"));
    assert_null(strstr(buf, "\ntrainer.")); /* only under the prefix */
    assert_non_null(strstr(buf, "data.seed  int or null  default: null  (null: value of trainer.seed)\n"));
    free(buf);
    f = open_memstream(&buf, &len);
    assert_int_equal(df_config_schema_print(df_config_schema_train(), "algorithm.kl_ctr", f), DF_ENOTFOUND);
    fclose(f);
    free(buf);
    assert_string_equal(df_last_error(),
                        "no train config key under 'algorithm.kl_ctr' (did you mean 'algorithm.kl_ctrl'?)");
}

/* ---- defaults and derived defaults ---- */

static void test_defaults(void **state)
{
    (void)state;
    df_config *c = load_ok(df_config_schema_train(), NULL, NULL, 0);
    assert_int_equal(df_config_int(c, "data.train_batch_size"), 1024);
    assert_int_equal(df_config_int(c, "data.max_prompt_length"), 512);
    assert_true(df_config_is_null(c, "data.val_batch_size"));
    assert_null(df_config_str(c, "data.tokenizer"));
    assert_int_equal(df_config_list_len(c, "data.train_files"), 1);
    assert_string_equal(df_config_list_at(c, "data.train_files", 0), "~/data/rlhf/gsm8k/train.parquet");
    assert_exact(df_config_float(c, ACTOR "clip_ratio"), 0.2);
    assert_exact(df_config_float(c, ACTOR "clip_ratio_low"), 0.2);
    assert_exact(df_config_float(c, ACTOR "optim.lr"), 1e-6);
    assert_int_equal(df_config_list_len(c, ACTOR "optim.betas"), 2);
    assert_exact(df_config_list_float_at(c, ACTOR "optim.betas", 1), 0.999);
    assert_exact(df_config_float(c, "trainer.total_epochs"), 30.0); /* int read as float */
    assert_int_equal(df_config_int(c, ROLLOUT "response_length"), 512);
    assert_int_equal(df_config_int(c, "data.seed"), 1);
    assert_string_equal(df_config_str(c, "algorithm.adv_estimator"), "gae");
    assert_string_equal(df_config_str(c, "trainer.default_local_dir"), "checkpoints/distflow_examples/gsm8k");
    assert_string_equal(df_config_where(c, "data.train_batch_size"), "default");
    assert_string_equal(df_config_where(c, ROLLOUT "prompt_length"), "derived from data.max_prompt_length");
    df_config_free(c);

    c = load_ok(df_config_schema_sft(), NULL, NULL, 0);
    assert_int_equal(df_config_int(c, "data.micro_batch_size_per_gpu"), 4);
    assert_exact(df_config_list_float_at(c, "optim.betas", 1), 0.95);
    assert_string_equal(df_config_str(c, "trainer.default_local_dir"), "checkpoints/gsm8k-sft/test");
    assert_int_equal(df_config_list_len(c, "trainer.checkpoint.load_contents"), 3);
    assert_string_equal(df_config_list_at(c, "trainer.checkpoint.load_contents", 2), "extra");
    assert_true(df_config_is_null(c, "data.prompt_dict_keys"));
    assert_int_equal(df_config_list_len(c, "data.prompt_dict_keys"), 0);
    df_config_free(c);
}

static void test_null_and_derived(void **state)
{
    (void)state;
    const char *p = yaml_file("derived", "data:\n"
                                         "  max_response_length: 300\n"
                                         "  val_batch_size: ~\n"
                                         "  tokenizer: 'null'\n"
                                         "actor_rollout_ref:\n"
                                         "  actor:\n"
                                         "    clip_ratio_high: 0.28\n"
                                         "  rollout:\n"
                                         "    prompt_length: 100\n"
                                         "    response_length: null\n");
    const char *ov[] = {ACTOR "clip_ratio=0.3"};
    df_config *c = load_ok(df_config_schema_train(), p, ov, 1);
    assert_int_equal(df_config_int(c, ROLLOUT "response_length"), 300);
    assert_int_equal(df_config_int(c, ROLLOUT "prompt_length"), 100);
    assert_exact(df_config_float(c, ACTOR "clip_ratio_low"), 0.3);
    assert_exact(df_config_float(c, ACTOR "clip_ratio_high"), 0.28);
    assert_true(df_config_is_null(c, "data.val_batch_size"));
    assert_string_equal(df_config_str(c, "data.tokenizer"), "null"); /* quoted: a string */
    assert_string_equal(df_config_where(c, ROLLOUT "response_length"), "derived from data.max_response_length");
    df_config_free(c);

    p = yaml_file("notnull", "data:\n  train_batch_size: null\n");
    char want[700];
    snprintf(want, sizeof want, "%s:2: data.train_batch_size: may not be null", p);
    load_fails(p, NULL, 0, want);
}

/* ---- YAML structure ---- */

static void test_nested_lists_and_where(void **state)
{
    (void)state;
    const char *p = yaml_file("nested", "# a comment\n"
                                        "data:\n"
                                        "  train_files: /d/train.parquet\n"
                                        "  val_files:\n"
                                        "    - /d/a.parquet\n"
                                        "    - \"/d/b c.parquet\"\n"
                                        "  train_batch_size: 64\n"
                                        "actor_rollout_ref:\n"
                                        "  actor.optim.lr: 2e-6\n"
                                        "  rollout: {n: 8, temperature: 0.7}\n"
                                        "trainer:\n"
                                        "  logger: ['console', file]\n"
                                        "critic:\n");
    df_config *c = load_ok(df_config_schema_train(), p, NULL, 0);
    assert_int_equal(df_config_list_len(c, "data.train_files"), 1);
    assert_string_equal(df_config_list_at(c, "data.train_files", 0), "/d/train.parquet");
    assert_int_equal(df_config_list_len(c, "data.val_files"), 2);
    assert_string_equal(df_config_list_at(c, "data.val_files", 1), "/d/b c.parquet");
    assert_int_equal(df_config_int(c, "data.train_batch_size"), 64);
    assert_exact(df_config_float(c, ACTOR "optim.lr"), 2e-6);
    assert_int_equal(df_config_int(c, ROLLOUT "n"), 8);
    assert_exact(df_config_float(c, ROLLOUT "temperature"), 0.7);
    assert_string_equal(df_config_list_at(c, "trainer.logger", 0), "console");
    assert_string_equal(df_config_list_at(c, "trainer.logger", 1), "file");
    char want[600];
    snprintf(want, sizeof want, "%s:7", p);
    assert_string_equal(df_config_where(c, "data.train_batch_size"), want);
    snprintf(want, sizeof want, "%s:10", p);
    assert_string_equal(df_config_where(c, ROLLOUT "n"), want);
    assert_string_equal(df_config_where(c, "data.shuffle"), "default");
    df_config_free(c);
}

static void test_anchors_aliases_merge(void **state)
{
    (void)state;
    const char *p = yaml_file("anchors", "actor_rollout_ref:\n"
                                         "  actor:\n"
                                         "    optim: &opt\n"
                                         "      lr: 3e-6\n"
                                         "      weight_decay: 0.05\n"
                                         "      betas: &b [0.8, 0.9]\n"
                                         "critic:\n"
                                         "  optim:\n"
                                         "    <<: *opt\n"
                                         "    lr: 1e-5\n"
                                         "data:\n"
                                         "  max_prompt_length: &len 256\n"
                                         "  max_response_length: *len\n"
                                         "algorithm:\n"
                                         "  _target_: verl.trainer.config.AlgoConfig\n"
                                         "  gamma: 0.99\n");
    df_config *c = load_ok(df_config_schema_train(), p, NULL, 0);
    assert_exact(df_config_float(c, ACTOR "optim.lr"), 3e-6);
    assert_exact(df_config_float(c, "critic.optim.lr"), 1e-5); /* explicit key beats the merge */
    assert_exact(df_config_float(c, "critic.optim.weight_decay"), 0.05);
    assert_exact(df_config_list_float_at(c, "critic.optim.betas", 0), 0.8);
    assert_int_equal(df_config_int(c, "data.max_response_length"), 256);
    assert_int_equal(df_config_int(c, ROLLOUT "response_length"), 256);
    assert_exact(df_config_float(c, "algorithm.gamma"), 0.99);
    df_config_free(c);

    p = yaml_file("alias_cfg", "data: &d\n  train_batch_size: 8\ncritic: *d\n");
    char want[600];
    snprintf(want, sizeof want,
             "%s:2: unknown key 'critic.train_batch_size' (did you mean 'data.train_batch_size'?)", p);
    load_fails(p, NULL, 0, want);
}

static void test_file_structure_errors(void **state)
{
    (void)state;
    char want[700];
    const char *p = yaml_file("dup", "data:\n  train_batch_size: 3\n  train_batch_size: 4\n");
    snprintf(want, sizeof want, "%s:3: duplicate key 'data.train_batch_size' (first set at line 2)", p);
    load_fails(p, NULL, 0, want);

    p = yaml_file("map_for_scalar", "data:\n  train_batch_size:\n    a: 1\n");
    snprintf(want, sizeof want, "%s:3: data.train_batch_size: expected an integer, got a mapping", p);
    load_fails(p, NULL, 0, want);

    p = yaml_file("list_for_scalar", "trainer:\n  seed: [1, 2]\n");
    snprintf(want, sizeof want, "%s:2: trainer.seed: expected an integer, got a list", p);
    load_fails(p, NULL, 0, want);

    p = yaml_file("scalar_for_group", "data:\n  train_batch_size: 1\nactor_rollout_ref: 5\n");
    snprintf(want, sizeof want,
             "%s:3: 'actor_rollout_ref' is a group of settings: expected a mapping, got a scalar", p);
    load_fails(p, NULL, 0, want);

    p = yaml_file("nested_item", "trainer:\n  logger:\n    - console\n    - {a: 1}\n");
    snprintf(want, sizeof want, "%s:4: trainer.logger[1]: expected a string, got a mapping", p);
    load_fails(p, NULL, 0, want);

    p = yaml_file("two_docs", "data:\n  shuffle: true\n---\ndata:\n  shuffle: false\n");
    snprintf(want, sizeof want, "%s:4: only one YAML document is allowed", p);
    load_fails(p, NULL, 0, want);

    p = yaml_file("top_list", "- a\n- b\n");
    snprintf(want, sizeof want, "%s:1: the top level must be a mapping of settings, got a list", p);
    load_fails(p, NULL, 0, want);

    df_config *c = NULL;
    assert_int_equal(df_config_load(df_config_schema_train(), DF_BINARY_DIR "/no/such.yaml", NULL, 0, &c),
                     DF_ENOTFOUND);
    assert_null(c);
    assert_non_null(strstr(df_last_error(), "config: " DF_BINARY_DIR "/no/such.yaml: cannot open"));

    c = load_ok(df_config_schema_train(), yaml_file("empty", ""), NULL, 0);
    assert_int_equal(df_config_int(c, "data.train_batch_size"), 1024);
    df_config_free(c);
}

static void test_malformed_yaml_line_col(void **state)
{
    (void)state;
    char want[700];
    const char *p = yaml_file("bad_indent", "data:\n  train_batch_size: 64\n  shuffle: true\n   prompt_key: x\n");
    snprintf(want, sizeof want, "%s:4:14: mapping values are not allowed in this context", p);
    load_fails(p, NULL, 0, want);

    p = yaml_file("bad_flow", "data:\n  train_files: [a, b\n  shuffle: true\n");
    snprintf(want, sizeof want,
             "%s:3:10: did not find expected ',' or ']' (while parsing a flow sequence at line 2)", p);
    load_fails(p, NULL, 0, want);

    p = yaml_file("tab", "data:\n\ttrain_batch_size: 3\n");
    snprintf(want, sizeof want,
             "%s:2:1: found character that cannot start any token (while scanning for the next token at line 2)",
             p);
    load_fails(p, NULL, 0, want);

    p = yaml_file("bad_alias", "data:\n  seed: *nope\n");
    snprintf(want, sizeof want, "%s:2:9: found undefined alias", p);
    load_fails(p, NULL, 0, want);
}

/* Text that would make libyaml's scanner quadratic, or that no config needs, is refused before it
   parses: flow collections nested past 64 levels (100k levels took minutes), a file over 16 MiB.
   Brackets inside quoted scalars and comments, and an apostrophe in a plain scalar, are not nesting. */
static void test_yaml_limits(void **state)
{
    (void)state;
    const size_t deep = 100000;
    char *text = malloc(2 * deep + 64), want[700];
    assert_non_null(text);
    size_t n = (size_t)sprintf(text, "data:\n  seed: ");
    for (size_t i = 0; i < deep; i++)
        text[n++] = '[';
    for (size_t i = 0; i < deep; i++)
        text[n++] = ']';
    text[n] = '\0';
    const char *p = yaml_file("deep_flow", text);
    snprintf(want, sizeof want, "%s:2: flow collections ([ ] / { }) nested deeper than 64 levels", p);
    load_fails(p, NULL, 0, want);
    free(text);

    char ok[1024];
    snprintf(ok, sizeof ok,
             "trainer:\n  project_name: \"%s\" # [[[[{{{{\n  experiment_name: '%s'\n"
             "  # [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\n"
             "data: {prompt_key: don't}\n",
             "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
             "{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{");
    df_config_free(load_ok(df_config_schema_train(), yaml_file("quoted_brackets", ok), NULL, 0));

    size_t big = DF_YAML_MAX_BYTES + 1;
    text = malloc(big + 1);
    assert_non_null(text);
    memset(text, ' ', big);
    text[big] = '\0';
    p = yaml_file("huge", text);
    snprintf(want, sizeof want, "%s: %zu bytes, more than the %zu a YAML file may have", p, big, big - 1);
    load_fails(p, NULL, 0, want);
    free(text);
}

/* ---- typing ---- */

static void test_type_coercion(void **state)
{
    (void)state;
    const char *p = yaml_file("coerce", "actor_rollout_ref:\n"
                                        "  actor:\n"
                                        "    clip_ratio: 1\n"           /* int for a float: fine */
                                        "    ppo_mini_batch_size: \"64\"\n" /* quoted int: fine */
                                        "    ppo_max_token_len_per_gpu: 0x4000\n"
                                        "    use_kl_loss: yes\n"
                                        "    optim:\n"
                                        "      lr: 1e-6\n"
                                        "      betas: [0, 0.5]\n"
                                        "trainer:\n"
                                        "  experiment_name: 123\n"
                                        "  total_epochs: 1_000\n"
                                        "  val_before_train: False\n");
    df_config *c = load_ok(df_config_schema_train(), p, NULL, 0);
    assert_exact(df_config_float(c, ACTOR "clip_ratio"), 1.0);
    assert_int_equal(df_config_int(c, ACTOR "ppo_mini_batch_size"), 64);
    assert_int_equal(df_config_int(c, ACTOR "ppo_max_token_len_per_gpu"), 16384);
    assert_true(df_config_bool(c, ACTOR "use_kl_loss"));
    assert_exact(df_config_float(c, ACTOR "optim.lr"), 1e-6);
    assert_exact(df_config_list_float_at(c, ACTOR "optim.betas", 0), 0.0);
    assert_exact(df_config_list_float_at(c, ACTOR "optim.betas", 1), 0.5);
    assert_string_equal(df_config_str(c, "trainer.experiment_name"), "123");
    assert_int_equal(df_config_int(c, "trainer.total_epochs"), 1000);
    assert_false(df_config_bool(c, "trainer.val_before_train"));
    df_config_free(c);
}

static void test_wrong_type_range_enum(void **state)
{
    (void)state;
    char want[700];
    const char *p = yaml_file("wrong_type", "data:\n"
                                            "  prompt_key: question\n"
                                            "  reward_fn_key: data_source\n"
                                            "  max_prompt_length: 10\n"
                                            "  max_response_length: 10\n"
                                            "  shuffle: true\n"
                                            "  train_batch_size: abc\n");
    snprintf(want, sizeof want, "%s:7: data.train_batch_size: expected an integer, got \"abc\"", p);
    load_fails(p, NULL, 0, want);

    override_fails("data.train_batch_size=1.5", "command line: 'data.train_batch_size=1.5': "
                                                "data.train_batch_size: expected an integer, got \"1.5\"");
    override_fails("data.train_batch_size=0",
                   "command line: 'data.train_batch_size=0': data.train_batch_size: must be >= 1, got 0");
    override_fails(ROLLOUT "top_p=1.5", "command line: '" ROLLOUT "top_p=1.5': " ROLLOUT
                                        "top_p: must be in [0.0, 1.0], got 1.5");
    override_fails("data.shuffle=maybe", "command line: 'data.shuffle=maybe': data.shuffle: expected a "
                                         "boolean (true/false), got \"maybe\"");
    override_fails("trainer.seed=9223372036854775808",
                   "command line: 'trainer.seed=9223372036854775808': trainer.seed: "
                   "\"9223372036854775808\" does not fit in a 64-bit integer");
    override_fails(ACTOR "optim.betas=[0.9]", "command line: '" ACTOR "optim.betas=[0.9]': " ACTOR
                                              "optim.betas: expected a list of 2 items, got 1");
    override_fails(ACTOR "clip_ratio=.nan",
                   "command line: '" ACTOR "clip_ratio=.nan': " ACTOR "clip_ratio: expected a number, got .nan");
    /* enums */
    override_fails("data.truncation=lft", "command line: 'data.truncation=lft': data.truncation: expected one "
                                          "of error|left|right|middle, got \"lft\" (did you mean 'left'?)");
    override_fails("algorithm.kl_penalty=zzz", "command line: 'algorithm.kl_penalty=zzz': algorithm.kl_penalty: "
                                               "expected one of kl|k1|abs|mse|k2|low_var_kl|k3|full, got \"zzz\"");
    const char *ov[] = {"data.truncation=middle", "algorithm.kl_penalty=low_var_kl"};
    df_config *c = load_ok(df_config_schema_train(), NULL, ov, 2);
    assert_string_equal(df_config_str(c, "data.truncation"), "middle");
    assert_string_equal(df_config_str(c, "algorithm.kl_penalty"), "low_var_kl");
    df_config_free(c);
    /* list items are checked against choices too */
    const char *sov[] = {"trainer.checkpoint.save_contents=[model, hf_modle]"};
    assert_int_equal(df_config_load(df_config_schema_sft(), NULL, sov, 1, &c), DF_EINVAL);
    assert_string_equal(df_last_error(), "command line: 'trainer.checkpoint.save_contents=[model, hf_modle]': "
                                         "trainer.checkpoint.save_contents[1]: expected one of "
                                         "model|optimizer|extra|hf_model, got \"hf_modle\" (did you mean 'hf_model'?)");
}

static void test_unknown_key_hints(void **state)
{
    (void)state;
    char want[700];
    const char *p = yaml_file("unknown", "data:\n"
                                         "  train_batch_size: 8\n"
                                         "actor_rollout_ref:\n"
                                         "  actor:\n"
                                         "    clip_ratoi: 0.3\n");
    snprintf(want, sizeof want,
             "%s:5: unknown key 'actor_rollout_ref.actor.clip_ratoi' "
             "(did you mean 'actor_rollout_ref.actor.clip_ratio'?)",
             p);
    load_fails(p, NULL, 0, want);

    p = yaml_file("unknown_nohint", "data:\n  train_batch_size: 8\nfoo:\n  bar: 1\n");
    snprintf(want, sizeof want, "%s:3: unknown key 'foo'", p); /* reported at the unknown group */
    load_fails(p, NULL, 0, want);

    /* a key in the wrong group: the leaf name matches */
    override_fails("trainer.clip_ratio_c=2", "command line: 'trainer.clip_ratio_c=2': unknown key "
                                             "'trainer.clip_ratio_c' (did you mean 'actor_rollout_ref.actor.clip_ratio_c'?)");
    /* a misspelt group */
    override_fails("actor_rollout_ref.actr.ppo_epochs=2",
                   "command line: 'actor_rollout_ref.actr.ppo_epochs=2': unknown key "
                   "'actor_rollout_ref.actr.ppo_epochs' (did you mean 'actor_rollout_ref.actor.ppo_epochs'?)");
    override_fails("zzz=1", "command line: 'zzz=1': unknown key 'zzz'");

    char hint[128];
    assert_true(cfg_suggest_key(df_config_schema_train(), "data.max_prompt_lenght", hint, sizeof hint));
    assert_string_equal(hint, "data.max_prompt_length");
    assert_false(cfg_suggest_key(df_config_schema_train(), "completely.different", hint, sizeof hint));
}

/* ---- overrides ---- */

static void test_overrides_beat_file(void **state)
{
    (void)state;
    const char *p = yaml_file("ov", "data:\n  train_batch_size: 64\n  train_files: [a, b]\n"
                                    "trainer:\n  project_name: proj\n");
    const char *ov[] = {"data.train_batch_size=32",
                        "+data.train_batch_size=16", /* later wins; Hydra's + is accepted */
                        "data.train_files=['/x/one.parquet', /x/two.parquet]",
                        "++trainer.experiment_name=exp 1",
                        ACTOR "optim={lr: 5e-7, weight_decay: 0}",
                        "data.val_batch_size=null",
                        "data.tokenizer=",
                        "trainer.logger=console"};
    df_config *c = load_ok(df_config_schema_train(), p, ov, 8);
    assert_int_equal(df_config_int(c, "data.train_batch_size"), 16);
    assert_string_equal(df_config_where(c, "data.train_batch_size"), "command line");
    assert_int_equal(df_config_list_len(c, "data.train_files"), 2);
    assert_string_equal(df_config_list_at(c, "data.train_files", 0), "/x/one.parquet");
    assert_string_equal(df_config_str(c, "trainer.experiment_name"), "exp 1");
    assert_exact(df_config_float(c, ACTOR "optim.lr"), 5e-7);
    assert_exact(df_config_float(c, ACTOR "optim.weight_decay"), 0.0);
    assert_true(df_config_is_null(c, "data.val_batch_size"));
    assert_string_equal(df_config_str(c, "data.tokenizer"), ""); /* `key=` is "" as in Hydra */
    assert_int_equal(df_config_list_len(c, "trainer.logger"), 1);
    assert_string_equal(df_config_str(c, "trainer.default_local_dir"), "checkpoints/proj/exp 1");
    df_config_free(c);
}

static void test_bad_override_syntax(void **state)
{
    (void)state;
    override_fails("data.train_batch_size", "command line: 'data.train_batch_size': expected key=value");
    override_fails("=3", "command line: '=3': missing key before '='");
    override_fails("~trainer.seed", "command line: '~trainer.seed': deleting a key (~key) is not supported");
    override_fails("data. seed=3", "command line: 'data. seed=3': a key cannot contain spaces");
    override_fails("data.train_files=[a,b", "command line: 'data.train_files=[a,b': did not find expected ',' "
                                            "or ']' at the end of the value (while parsing a flow sequence at line 1)");
    override_fails("data=3", "command line: 'data=3': 'data' is a group of settings: expected a mapping, got a scalar");
    override_fails("data.seed=@x", "command line: 'data.seed=@x': found character that cannot start any token "
                                   "at column 1 (while scanning for the next token at line 1)");
}

/* ---- interpolation ---- */

static void test_interpolation(void **state)
{
    (void)state;
    const char *p = yaml_file("interp", "trainer:\n"
                                        "  project_name: p\n"
                                        "  default_local_dir: /ckpt/${trainer.project_name}-${.seed}\n"
                                        "critic:\n"
                                        "  ppo_mini_batch_size: ${actor_rollout_ref.actor.ppo_mini_batch_size}\n"
                                        "  optim:\n"
                                        "    betas: ${actor_rollout_ref.actor.optim.betas}\n");
    const char *ov[] = {ACTOR "ppo_mini_batch_size=32", "trainer.seed=7"};
    df_config *c = load_ok(df_config_schema_train(), p, ov, 2);
    assert_string_equal(df_config_str(c, "trainer.default_local_dir"), "/ckpt/p-7");
    assert_int_equal(df_config_int(c, "critic.ppo_mini_batch_size"), 32);
    assert_exact(df_config_list_float_at(c, "critic.optim.betas", 1), 0.999);
    df_config_free(c);

    const char *sov[] = {"trainer.checkpoint.save_contents=[model]"};
    c = load_ok(df_config_schema_sft(), NULL, sov, 1);
    assert_int_equal(df_config_list_len(c, "trainer.checkpoint.load_contents"), 1);
    df_config_free(c);

    override_fails("data.seed=${data.seed}", "command line: data.seed: interpolation cycle through this key");
    override_fails("data.seed=${oc.env:HOME}",
                   "command line: data.seed: resolvers such as '${oc.env:HOME}' are not supported");
    override_fails("trainer.default_local_dir=${trainer.projct_name}/x",
                   "command line: trainer.default_local_dir: '${trainer.projct_name}' names an unknown key "
                   "'trainer.projct_name' (did you mean 'trainer.project_name'?)");
    override_fails("data.seed=x${trainer.seed}", "command line: 'data.seed=x${trainer.seed}': data.seed: keys of "
                                                 "type int take an interpolation only as the whole value ('${key}')");
    override_fails("data.train_batch_size=${data.prompt_key}",
                   "command line: data.train_batch_size: expected an integer, got \"prompt\"");
}

/* ---- set, where, dump ---- */

static void test_set_and_where(void **state)
{
    (void)state;
    const char *p = yaml_file("where", "data:\n  train_batch_size: 64\n");
    const char *ov[] = {ROLLOUT "n=4"};
    df_config *c = load_ok(df_config_schema_train(), p, ov, 1);
    char want[600];
    snprintf(want, sizeof want, "%s:2", p);
    assert_string_equal(df_config_where(c, "data.train_batch_size"), want);
    assert_string_equal(df_config_where(c, ROLLOUT "n"), "command line");
    assert_string_equal(df_config_where(c, "data.shuffle"), "default");
    assert_string_equal(df_config_where(c, "critic.rollout_n"), "derived from " ROLLOUT "n");
    assert_int_equal(df_config_int(c, "critic.rollout_n"), 4);

    assert_int_equal(df_config_set(c, ACTOR "optim.lr", "2e-6"), DF_OK);
    assert_exact(df_config_float(c, ACTOR "optim.lr"), 2e-6);
    assert_string_equal(df_config_where(c, ACTOR "optim.lr"), "set by program");
    assert_int_equal(df_config_set(c, "critic.optim", "{lr: 3e-5, weight_decay: 0.1}"), DF_OK);
    assert_exact(df_config_float(c, "critic.optim.weight_decay"), 0.1);
    assert_int_equal(df_config_set(c, ROLLOUT "response_length", "null"), DF_OK); /* re-derives itself */
    assert_int_equal(df_config_int(c, ROLLOUT "response_length"), 512);

    /* failures leave everything unchanged, including earlier keys of a mapping */
    assert_int_equal(df_config_set(c, "critic.optim", "{lr: 1e-4, weight_decay: -1}"), DF_EINVAL);
    assert_string_equal(df_last_error(), "df_config_set: 'critic.optim={lr: 1e-4, weight_decay: -1}': "
                                         "critic.optim.weight_decay: must be >= 0.0, got -1.0");
    assert_exact(df_config_float(c, "critic.optim.lr"), 3e-5);
    assert_int_equal(df_config_set(c, "data.train_batch_size", "many"), DF_EINVAL);
    assert_int_equal(df_config_int(c, "data.train_batch_size"), 64);
    assert_int_equal(df_config_set(c, "data.train_batch_sise", "1"), DF_EINVAL);
    assert_string_equal(df_last_error(), "df_config_set: 'data.train_batch_sise=1': unknown key "
                                         "'data.train_batch_sise' (did you mean 'data.train_batch_size'?)");
    df_config_free(c);
}

static void assert_same_config(const df_config *a, const df_config *b)
{
    const df_config_schema *s = df_config_get_schema(a);
    for (int i = 0; i < df_config_schema_count(s); i++) {
        const df_config_entry *e = df_config_schema_at(s, i);
        const char *k = e->key;
        assert_int_equal(df_config_is_null(a, k), df_config_is_null(b, k));
        if (df_config_is_null(a, k))
            continue;
        switch (e->type) {
        case DF_CFG_BOOL: assert_int_equal(df_config_bool(a, k), df_config_bool(b, k)); break;
        case DF_CFG_INT: assert_int_equal(df_config_int(a, k), df_config_int(b, k)); break;
        case DF_CFG_FLOAT:
            if (df_config_float(a, k) != df_config_float(b, k))
                fail_msg("%s: %.17g != %.17g", k, df_config_float(a, k), df_config_float(b, k));
            break;
        case DF_CFG_STR: assert_string_equal(df_config_str(a, k), df_config_str(b, k)); break;
        case DF_CFG_MAP: assert_string_equal(df_config_map_text(a, k), df_config_map_text(b, k)); break;
        case DF_CFG_STR_LIST:
        case DF_CFG_FLOAT_LIST:
            assert_int_equal(df_config_list_len(a, k), df_config_list_len(b, k));
            for (int j = 0; j < df_config_list_len(a, k); j++) {
                if (e->type == DF_CFG_STR_LIST)
                    assert_string_equal(df_config_list_at(a, k, j), df_config_list_at(b, k, j));
                else
                    assert_true(df_config_list_float_at(a, k, j) == df_config_list_float_at(b, k, j));
            }
            break;
        }
    }
}

static void dump_reload(const df_config_schema *s, const char *const *ov, int n)
{
    df_config *a = load_ok(s, NULL, ov, n);
    char path[512];
    snprintf(path, sizeof path, "%s/test_config_dump_%s.yaml", DF_BINARY_DIR, df_config_schema_name(s));
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(df_config_dump(a, f), DF_OK);
    fclose(f);
    df_config *b = load_ok(s, path, NULL, 0);
    assert_same_config(a, b);
    df_config_free(a);
    df_config_free(b);
}

static void test_dump_reloads(void **state)
{
    (void)state;
    const char *ov[] = {"trainer.experiment_name='my run: #1'",
                        "trainer.project_name='null'",
                        "data.prompt_key=yes",
                        "data.tokenizer=\"tab\\there \\\"q\\\" back\\\\slash\\nnew\"",
                        "custom_reward_function.name=sc\xc3\xb6re",
                        "trainer.logger=[console, '-dash', 'a,b', '', '123', ' lead']",
                        "data.train_files=['[x]']",
                        ACTOR "optim.lr=0.30000000000000004",
                        ACTOR "clip_ratio_c=1e300",
                        "critic.grad_clip=.inf",
                        "algorithm.gamma=0.1",
                        "data.val_batch_size=7",
                        "trainer.seed=-9223372036854775808"};
    dump_reload(df_config_schema_train(), ov, (int)(sizeof ov / sizeof ov[0]));
    const char *sov[] = {"optim.betas=[0.5, 0.25]", "data.prompt_dict_keys=[q, 'a b']"};
    dump_reload(df_config_schema_sft(), sov, 2);
    dump_reload(df_config_schema_train(), NULL, 0);

    const char *p = yaml_file("dump_src", "data:\n  train_batch_size: 64\n");
    df_config *c = load_ok(df_config_schema_train(), p, NULL, 0);
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    assert_int_equal(df_config_dump(c, m), DF_OK);
    fclose(m);
    char want[700];
    snprintf(want, sizeof want, "\ndata:\n  tokenizer: null\n");
    assert_non_null(strstr(buf, want));
    snprintf(want, sizeof want, "  train_batch_size: 64  # %s:2\n", p);
    assert_non_null(strstr(buf, want));
    assert_non_null(strstr(buf, "\nactor_rollout_ref:\n  hybrid_engine: true\n  model:\n    path: "));
    assert_non_null(strstr(buf, "      betas: [0.9, 0.999]\n"));
    assert_non_null(strstr(buf, "    horizon: 1000.0\n"));
    assert_non_null(strstr(buf, "    response_length: 512  # derived from data.max_response_length\n"));
    free(buf);
    df_config_free(c);
}

/* ---- scalar primitives ---- */

static void test_scalar_primitives(void **state)
{
    (void)state;
    int64_t i;
    double x;
    bool b;
    assert_int_equal(cfg_parse_int("-9223372036854775808", &i), 0);
    assert_true(i == INT64_MIN);
    assert_int_equal(cfg_parse_int("9223372036854775808", &i), -2);
    assert_int_equal(cfg_parse_int("0x1F", &i), 0);
    assert_int_equal(i, 31);
    assert_int_equal(cfg_parse_int("0o17", &i), 0);
    assert_int_equal(i, 15);
    assert_int_equal(cfg_parse_int("1_000_000", &i), 0);
    assert_int_equal(i, 1000000);
    assert_int_equal(cfg_parse_int("_1", &i), -1);
    assert_int_equal(cfg_parse_int("1e3", &i), -1);
    assert_int_equal(cfg_parse_int("", &i), -1);
    assert_int_equal(cfg_parse_float("1e-6", &x), 0);
    assert_true(x == 1e-6);
    assert_int_equal(cfg_parse_float(".5", &x), 0);
    assert_true(x == 0.5);
    assert_int_equal(cfg_parse_float("-.inf", &x), 0);
    assert_true(isinf(x) && x < 0);
    assert_int_equal(cfg_parse_float("1.", &x), 0);
    assert_int_equal(cfg_parse_float("e5", &x), -1);
    assert_int_equal(cfg_parse_float("1e", &x), -1);
    assert_int_equal(cfg_parse_float("nan", &x), -1);
    assert_int_equal(cfg_parse_float("0x10", &x), -1);
    assert_int_equal(cfg_parse_bool("On", &b), 0);
    assert_true(b);
    assert_int_equal(cfg_parse_bool("1", &b), -1);
    assert_true(cfg_is_null_text("~", true));
    assert_false(cfg_is_null_text("~", false));
    assert_false(cfg_is_null_text("nul", true));

    const double vals[] = {0.1, 1e-6, 1000.0, 0.30000000000000004, 123456.789, 1e300, -2.5e-300, 5e-324, 0.0};
    const char *text[] = {"0.1", "1e-06", "1000.0", "0.30000000000000004", "123456.789", "1e+300", "-2.5e-300",
                          "5e-324", "0.0"};
    char buf[48];
    for (size_t k = 0; k < sizeof vals / sizeof vals[0]; k++) {
        cfg_format_float(vals[k], buf, sizeof buf);
        assert_string_equal(buf, text[k]);
        assert_int_equal(cfg_parse_float(buf, &x), 0);
        assert_true(x == vals[k]);
    }
    assert_int_equal(cfg_edit_distance("clip_ratoi", 10, "clip_ratio", 10), 1);
    assert_int_equal(cfg_edit_distance("kitten", 6, "sitting", 7), 3);
    assert_int_equal(cfg_edit_distance("", 0, "abc", 3), 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_schema_tables_check),
        cmocka_unit_test(test_schema_check_catches_bad_tables),
        cmocka_unit_test(test_schema_print),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_null_and_derived),
        cmocka_unit_test(test_nested_lists_and_where),
        cmocka_unit_test(test_anchors_aliases_merge),
        cmocka_unit_test(test_file_structure_errors),
        cmocka_unit_test(test_malformed_yaml_line_col),
        cmocka_unit_test(test_yaml_limits),
        cmocka_unit_test(test_type_coercion),
        cmocka_unit_test(test_wrong_type_range_enum),
        cmocka_unit_test(test_unknown_key_hints),
        cmocka_unit_test(test_overrides_beat_file),
        cmocka_unit_test(test_bad_override_syntax),
        cmocka_unit_test(test_interpolation),
        cmocka_unit_test(test_set_and_where),
        cmocka_unit_test(test_dump_reloads),
        cmocka_unit_test(test_scalar_primitives),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
