/* Tests of free-form mapping keys (DF_CFG_MAP, include/distflow/config.h) and
 * of siiRL's trainer YAML (tests/fixtures/siirl_ppo_dag_trainer.yaml). */
/* rounding-free (scripts/test-variants.sh skips it): parsing, text and integers only */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "distflow/config.h"
#include "distflow/train_config.h"

#define FIXTURE DF_SOURCE_DIR "/tests/fixtures/siirl_ppo_dag_trainer.yaml"
#define OVR "actor_rollout_ref.model.override_config"
#define WRAP "actor_rollout_ref.actor.fsdp_config.wrap_policy"

static char g_path[512];

static const char *yaml_file(const char *name, const char *text)
{
    snprintf(g_path, sizeof g_path, "%s/test_config_map_%s.yaml", DF_BINARY_DIR, name);
    FILE *f = fopen(g_path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return g_path;
}

static df_config *load_ok(const char *path, const char *const *ov, int n)
{
    df_config *c = NULL;
    if (df_config_load(df_config_schema_train(), path, ov, n, &c))
        fail_msg("load failed: %s", df_last_error());
    return c;
}

static df_config *text_ok(const char *yaml, const char *const *ov, int n)
{
    df_config *c = NULL;
    if (df_config_load_text(df_config_schema_train(), yaml, "t.yaml", ov, n, &c))
        fail_msg("load failed: %s", df_last_error());
    return c;
}

static void text_fails(const char *yaml, const char *const *ov, int n, const char *msg)
{
    df_config *c = NULL;
    assert_int_equal(df_config_load_text(df_config_schema_train(), yaml, "t.yaml", ov, n, &c), DF_EINVAL);
    assert_null(c);
    assert_string_equal(df_last_error(), msg);
}

static char *dump_text(const df_config *c)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    assert_int_equal(df_config_dump(c, f), 0);
    fclose(f);
    return buf;
}

/* ---- tests ---- */

static void test_schema_and_defaults(void **state)
{
    (void)state;
    const df_config_schema *s = df_config_schema_train();
    assert_int_equal(df_config_schema_check(s), 0);
    assert_string_equal(df_config_type_name(DF_CFG_MAP), "map");
    const df_config_entry *e = df_config_schema_find(s, OVR);
    assert_non_null(e);
    assert_int_equal(e->type, DF_CFG_MAP);
    assert_true(e->nullable);
    df_config *c = load_ok(NULL, NULL, 0);
    assert_string_equal(df_config_map_text(c, OVR), "{}");
    assert_string_equal(df_config_map_text(c, WRAP), "{min_num_params: 0}");
    assert_string_equal(df_config_map_text(c, "actor_rollout_ref.rollout.engine_kwargs.vllm"),
                        "{swap_space: null, disable_mm_preprocessor_cache: null}");
    assert_true(df_config_is_null(c, "actor_rollout_ref.actor.optim.override_optimizer_config"));
    assert_null(df_config_map_text(c, "actor_rollout_ref.actor.optim.override_optimizer_config"));
    assert_string_equal(df_config_where(c, OVR), "default");
    df_config_free(c);
}

static void test_siirl_trainer_yaml_loads(void **state)
{
    (void)state;
    df_config *c = load_ok(FIXTURE, NULL, 0);
    assert_string_equal(df_config_map_text(c, OVR),
                        "{attention_dropout: 0.0, rope_scaling: {type: linear, factor: 2}}");
    assert_string_equal(df_config_where(c, OVR), FIXTURE ":47");
    assert_string_equal(df_config_map_text(c, "critic.model.override_config"), "{}");
    assert_string_equal(df_config_map_text(c, WRAP), "{min_num_params: 0}");
    assert_string_equal(df_config_map_text(c, "actor_rollout_ref.rollout.engine_kwargs.vllm"),
                        "{swap_space: 16, disable_mm_preprocessor_cache: null}");
    assert_string_equal(df_config_map_text(c, "hydra"), "{run: {dir: /tmp/siirl}, output_subdir: null}");
    assert_string_equal(df_config_map_text(c, "ray_init"), "{num_cpus: null, timeline_json_file: null}");
    assert_string_equal(df_config_map_text(c, "data.processor"),
                        "{image_max_pixels: 409600, image_min_pixels: 1024, video_max_pixels: 65536, "
                        "video_min_pixels: 256, video_fps: 1.5, video_maxlen: 64}");
    const char *prof = df_config_map_text(c, "profiler");
    assert_non_null(strstr(prof, "save_path: ./prof_data, level: level1,"));
    assert_non_null(strstr(prof, "roles: [generate, compute_reward], all_ranks: False, ranks: [0]"));
    /* megatron blocks: kept whole; `${...}` inside a map stays literal text */
    const char *meg = df_config_map_text(c, "actor_rollout_ref.actor.megatron");
    assert_non_null(strstr(meg, "{tensor_model_parallel_size: 2, pipeline_model_parallel_size: 2, "));
    assert_non_null(strstr(meg, "override_transformer_config: {}, override_ddp_config: {}, "
                                "use_dist_checkpointing: False, dist_checkpointing_path: \"\""));
    assert_non_null(strstr(df_config_map_text(c, "critic.megatron"),
                           "override_transformer_config: "
                           "\"${actor_rollout_ref.actor.megatron.override_transformer_config}\"}"));
    /* the shared optimizer block: critic min_lr_ratio null, actor's set */
    assert_true(df_config_is_null(c, "critic.optim.min_lr_ratio"));
    assert_true(df_config_float(c, "actor_rollout_ref.actor.optim.min_lr_ratio") == 0.1);
    /* ordinary keys and interpolations of the same file */
    assert_int_equal(df_config_int(c, "critic.rollout_n"), 4);
    assert_int_equal(df_config_int(c, "critic.ppo_mini_batch_size"), 32);
    assert_string_equal(df_config_str(c, "reward_model.model.input_tokenizer"), "~/models/Qwen2.5-0.5B-Instruct");
    assert_string_equal(df_config_str(c, "trainer.default_local_dir"), "checkpoints/siirl_examples/gsm8k_grpo");
    assert_int_equal(df_config_list_len(c, "trainer.logger"), 2);
    assert_null(df_config_str(c, "actor_rollout_ref.rollout.agent.custom_async_server.path"));
    /* siiRL's file logs to wandb, which distflow has not: refused, never ignored; without it the file
     * is valid, on GPUs too (whether the build has the CUDA backend is df_train_check's). Its
     * override_config (a linear rope_scaling) is the model loader's to refuse (test_model_override). */
    assert_string_equal(df_config_str(c, "trainer.device"), "cuda");
    assert_int_equal(df_config_validate_train(c, 8), DF_EUNSUPPORTED);
    assert_non_null(strstr(df_last_error(), "logger 'wandb' is not available in distflow"));
    df_config_free(c);
    const char *ours[] = {"trainer.logger=[console,file]"};
    c = load_ok(FIXTURE, ours, 1);
    assert_int_equal(df_config_validate_train(c, 8), 0);
    df_config_free(c);
}

static void test_dump_round_trip(void **state)
{
    (void)state;
    df_config *a = load_ok(FIXTURE, NULL, 0);
    char *text = dump_text(a);
    assert_non_null(strstr(text, "\n    override_config: {attention_dropout: 0.0, rope_scaling: {type: linear, "
                                 "factor: 2}}  # " FIXTURE ":47\n"));
    assert_non_null(strstr(text, "\nhydra: {run: {dir: /tmp/siirl}, output_subdir: null}  # " FIXTURE ":"));
    assert_non_null(strstr(text, "\n    gradient_checkpointing_kwargs: {}\n"));
    df_config *b = load_ok(yaml_file("dump", text), NULL, 0);
    const df_config_schema *s = df_config_get_schema(a);
    int maps = 0;
    for (int i = 0; i < df_config_schema_count(s); i++) {
        const df_config_entry *e = df_config_schema_at(s, i);
        if (e->type != DF_CFG_MAP)
            continue;
        maps++;
        assert_int_equal(df_config_is_null(a, e->key), df_config_is_null(b, e->key));
        if (!df_config_is_null(a, e->key))
            assert_string_equal(df_config_map_text(a, e->key), df_config_map_text(b, e->key));
    }
    assert_true(maps >= 20);
    char *again = dump_text(b);
    /* same values; only the `# where` comments name the dump file instead */
    assert_non_null(strstr(again, "\n    override_config: {attention_dropout: 0.0, rope_scaling: {type: linear, "
                                  "factor: 2}}  # "));
    free(again);
    free(text);
    df_config_free(a);
    df_config_free(b);
}

static void test_canonical_text(void **state)
{
    (void)state;
    df_config *c = text_ok("actor_rollout_ref:\n"
                           "  model:\n"
                           "    override_config:\n"
                           "      a: \"1\"\n"            /* quoted number: stays a string */
                           "      b: 1e-6\n"
                           "      c: 'x y'\n"
                           "      d: \"plain\"\n"
                           "      e: ~\n"
                           "      f: [1, {g: h}]\n"
                           "      \"k:1\": v\n"
                           "      i: a, b\n"              /* plain with a flow indicator */
                           "      j: |\n"
                           "        line\n"
                           "      base: &b {x: 1}\n"
                           "      copy: *b\n"
                           "      l:\n"
                           "        - p\n"
                           "        - {}\n"
                           "critic:\n"
                           "  model:\n"
                           "    override_config: ${actor_rollout_ref.model.override_config}\n",
                           NULL, 0);
    const char *want = "{a: \"1\", b: 1e-6, c: \"x y\", d: plain, e: null, f: [1, {g: h}], \"k:1\": v, "
                       "i: \"a, b\", j: \"line\\n\", base: {x: 1}, copy: {x: 1}, l: [p, {}]}";
    assert_string_equal(df_config_map_text(c, OVR), want);
    assert_string_equal(df_config_map_text(c, "critic.model.override_config"), want); /* whole-value ${} */
    assert_string_equal(df_config_where(c, "critic.model.override_config"), "t.yaml:21");
    df_config_free(c);
    /* the canonical text parses back to itself */
    const char *ov[] = {"actor_rollout_ref.model.override_config={a: \"1\", b: 1e-6, c: \"x y\", d: plain, "
                        "e: null, f: [1, {g: h}], \"k:1\": v, i: \"a, b\", j: \"line\\n\", base: {x: 1}, "
                        "copy: {x: 1}, l: [p, {}]}"};
    c = text_ok(NULL, ov, 1);
    assert_string_equal(df_config_map_text(c, OVR), want);
    assert_string_equal(df_config_where(c, OVR), "command line");
    df_config_free(c);
}

static void test_type_errors(void **state)
{
    (void)state;
    text_fails("actor_rollout_ref:\n  model:\n    override_config: abc\n", NULL, 0,
               "t.yaml:3: actor_rollout_ref.model.override_config: expected a mapping (or null), got a "
               "scalar \"abc\"");
    text_fails("actor_rollout_ref:\n  model:\n    override_config: \"{}\"\n", NULL, 0,
               "t.yaml:3: actor_rollout_ref.model.override_config: expected a mapping (or null), got a "
               "scalar \"{}\"");
    text_fails("ray_init:\n  - 1\n  - 2\n", NULL, 0, "t.yaml:2: ray_init: expected a mapping (or null), got a list");
    text_fails("data:\n  seed: 1\n  train_batch_size: {a: 1}\n", NULL, 0,
               "t.yaml:3: data.train_batch_size: expected an integer, got a mapping");
    text_fails("profiler:\n  {a: 1}: 2\n", NULL, 0,
               "t.yaml:2: a key inside a mapping value must be a scalar, got a mapping");
    const char *ov1[] = {"hydra=8"};
    text_fails(NULL, ov1, 1, "command line: 'hydra=8': hydra: expected a mapping (or null), got a scalar \"8\"");
    const char *ov2[] = {"trainer.project_name={a: 1}"};
    text_fails(NULL, ov2, 1,
               "command line: 'trainer.project_name={a: 1}': trainer.project_name: expected a string, got a "
               "mapping");
    const char *ov3[] = {"critic.model.override_config=${trainer.project_name}"};
    text_fails(NULL, ov3, 1,
               "command line: critic.model.override_config: expected a mapping (or null), got a scalar "
               "\"distflow_examples\"");
    /* null is accepted; a typo next to a map key still gets a hint */
    df_config *c = text_ok("ray_init: null\nhydra:\n", NULL, 0);
    assert_true(df_config_is_null(c, "ray_init"));
    assert_null(df_config_map_text(c, "ray_init"));
    assert_true(df_config_is_null(c, "hydra"));
    df_config_free(c);
    text_fails("actor_rollout_ref:\n  model:\n    overide_config: {}\n", NULL, 0,
               "t.yaml:3: unknown key 'actor_rollout_ref.model.overide_config' (did you mean "
               "'actor_rollout_ref.model.override_config'?)");
}

static void test_overrides(void **state)
{
    (void)state;
    const char *ov[] = {OVR ".rope_scaling.factor=4",           /* inside an existing nested map */
                        "+" OVR ".new.deep=[1, \"a b\"]",         /* creates nested maps */
                        "++" OVR ".attention_dropout.x=null",     /* replaces a scalar on the way */
                        WRAP "={transformer_layer_cls_to_wrap: [Qwen2DecoderLayer]}",
                        "ray_init.num_cpus=8",
                        "hydra=null",
                        "hydra.run.dir=/tmp/x"};
    df_config *c = load_ok(FIXTURE, ov, 7);
    assert_string_equal(df_config_map_text(c, OVR),
                        "{attention_dropout: {x: null}, rope_scaling: {type: linear, factor: 4}, "
                        "new: {deep: [1, \"a b\"]}}");
    assert_string_equal(df_config_where(c, OVR), "command line");
    assert_string_equal(df_config_map_text(c, WRAP), "{transformer_layer_cls_to_wrap: [Qwen2DecoderLayer]}");
    assert_string_equal(df_config_map_text(c, "ray_init"), "{num_cpus: 8, timeline_json_file: null}");
    assert_string_equal(df_config_map_text(c, "hydra"), "{run: {dir: /tmp/x}}");
    /* df_config_set and per-node overrides take the same paths */
    assert_int_equal(df_config_set(c, "profiler.enable", "true"), 0);
    assert_non_null(strstr(df_config_map_text(c, "profiler"), "{enable: true, save_path: ./prof_data,"));
    assert_string_equal(df_config_where(c, "profiler"), "set by program");
    assert_int_equal(df_config_set(c, OVR ".", "1"), DF_EINVAL);
    assert_string_equal(df_last_error(), "df_config_set: '" OVR ".=1': empty key component in ''");
    assert_int_equal(df_config_set(c, OVR, "7"), DF_EINVAL);
    assert_string_equal(df_config_map_text(c, OVR), /* unchanged after a failed set */
                        "{attention_dropout: {x: null}, rope_scaling: {type: linear, factor: 4}, "
                        "new: {deep: [1, \"a b\"]}}");
    const char *k[] = {"critic.model.override_config.hidden_act"}, *v[] = {"gelu"};
    df_config *node = NULL;
    assert_int_equal(df_config_with_overrides(c, k, v, 1, "wf.yaml node 'critic'", &node), 0);
    assert_string_equal(df_config_map_text(node, "critic.model.override_config"), "{hidden_act: gelu}");
    assert_string_equal(df_config_where(node, "critic.model.override_config"), "wf.yaml node 'critic'");
    assert_string_equal(df_config_map_text(c, "critic.model.override_config"), "{}");
    df_config_free(node);
    /* min_lr_ratio: null where siiRL allows it, bounds still checked otherwise */
    assert_int_equal(df_config_set(c, "actor_rollout_ref.actor.optim.min_lr_ratio", "null"), 0);
    assert_true(df_config_is_null(c, "actor_rollout_ref.actor.optim.min_lr_ratio"));
    assert_int_equal(df_config_set(c, "critic.optim.min_lr_ratio", "1.5"), DF_EINVAL);
    df_config_free(c);
    /* an entry cannot be set inside a map that is still an interpolation */
    const char *ov4[] = {"critic.model.override_config.a=1"};
    text_fails("critic:\n  model:\n    override_config: ${actor_rollout_ref.model.override_config}\n", ov4, 1,
               "command line: 'critic.model.override_config.a=1': cannot set 'a' inside "
               "'critic.model.override_config' while that is the interpolation "
               "'${actor_rollout_ref.model.override_config}'");
}

/* An open group (DFK_OPEN: custom_reward_function.reward_kwargs) takes keys of any other name with
 * any value, in every spelling a key has; its typed keys keep their checks; other groups don't. */
#define RKW "custom_reward_function.reward_kwargs"
static void test_open_group(void **state)
{
    (void)state;
    const df_config_entry *e = df_config_schema_find(df_config_schema_train(), RKW ".*");
    assert_non_null(e);
    assert_int_equal(e->type, DF_CFG_MAP);
    char *help = NULL;
    size_t hlen = 0;
    FILE *hf = open_memstream(&help, &hlen);
    assert_int_equal(df_config_schema_print(df_config_schema_train(), RKW, hf), 0);
    fclose(hf);
    assert_non_null(strstr(help, "\n" RKW ".*  any other key: any YAML value\n    any other key, with any YAML"));
    assert_non_null(strstr(help, RKW ".format_score  float  default: 0.0"));
    free(help);
    /* nested, beside the typed keys: scalars, a list, a mapping; the typed key stays typed */
    const char *nested = "custom_reward_function:\n"
                         "  path: r.py\n"
                         "  reward_kwargs:\n"
                         "    format_score: 0.5\n"
                         "    bonus: 0.25\n"
                         "    tags: [a, \"b c\"]\n"
                         "    opts: {depth: 2, on: true}\n";
    df_config *c = text_ok(nested, NULL, 0);
    assert_true(df_config_float(c, RKW ".format_score") == 0.5);
    assert_string_equal(df_config_map_text(c, RKW ".*"), "{bonus: 0.25, tags: [a, \"b c\"], opts: {depth: 2, on: true}}");
    assert_string_equal(df_config_where(c, RKW ".bonus"), "t.yaml:5"); /* each name its own line */
    assert_string_equal(df_config_where(c, RKW ".opts.depth"), "t.yaml:7");
    assert_string_equal(df_config_where(c, RKW ".*"), "t.yaml:7");
    df_train_config t;
    assert_int_equal(df_train_config_resolve(c, &t), 0);
    assert_string_equal(t.custom_reward_function.reward_kwargs.extra, df_config_map_text(c, RKW ".*"));
    assert_true(t.custom_reward_function.reward_kwargs.format_score == 0.5);
    /* the dump writes them as keys of the group and reloads to the same config */
    char *text = dump_text(c);
    assert_non_null(strstr(text, "\n  reward_kwargs:\n    method: strict\n"));
    assert_non_null(strstr(text, "\n    strict_box_verify: false\n    bonus: 0.25  # t.yaml:5\n"
                                 "    tags: [a, \"b c\"]  # t.yaml:6\n    opts: {depth: 2, on: true}  # t.yaml:7\n"));
    df_config *d = load_ok(yaml_file("open", text), NULL, 0);
    assert_string_equal(df_config_map_text(d, RKW ".*"), df_config_map_text(c, RKW ".*"));
    assert_true(df_config_float(d, RKW ".format_score") == 0.5);
    char *again = dump_text(d);
    assert_non_null(strstr(again, "    bonus: 0.25  # "));
    free(again);
    df_config_free(d);
    free(text);
    /* dump_set: one line per key */
    char *set = NULL;
    size_t slen = 0;
    int n = 0;
    FILE *sf = open_memstream(&set, &slen);
    assert_int_equal(df_config_dump_set(c, "  ", sf, &n), 0);
    fclose(sf);
    assert_int_equal(n, 5); /* path, format_score and the three others */
    assert_non_null(strstr(set, "  " RKW ".format_score: 0.5  # t.yaml:4\n  " RKW ".bonus: 0.25  # t.yaml:5\n  "
                                RKW ".tags: [a, \"b c\"]  # t.yaml:6\n  " RKW ".opts: {depth: 2, on: true}  # t.yaml:7\n"));
    free(set);
    df_config_free(c);
    /* dotted in the file, into a mapping; then the command line, Hydra's + forms and a group mapping */
    const char *ov[] = {RKW ".my_threshold=0.3", "+" RKW ".flag=true", "++" RKW ".opts.width=[1, 2]",
                        RKW "={score: 2, name: x}"};
    c = text_ok(RKW ".opts.depth: 3\n" RKW ".opts.kind: deep\n" RKW ".keep: 1\n", ov, 4);
    assert_string_equal(df_config_map_text(c, RKW ".*"),
                        "{opts: {depth: 3, kind: deep, width: [1, 2]}, keep: 1, my_threshold: 0.3, flag: true, name: x}");
    assert_true(df_config_float(c, RKW ".score") == 2.0);
    assert_string_equal(df_config_where(c, RKW ".my_threshold"), "command line");
    assert_string_equal(df_config_where(c, RKW ".keep"), "t.yaml:3");
    assert_string_equal(df_config_where(c, RKW ".opts"), "command line"); /* its last change: width */
    df_config *copy = NULL; /* origins survive a copy and a failed df_config_set */
    assert_int_equal(df_config_copy(c, &copy), 0);
    assert_int_equal(df_config_set(copy, RKW ".method", "lenient"), DF_EINVAL);
    assert_string_equal(df_config_where(copy, RKW ".name"), "command line");
    df_config_free(copy);
    df_config *node = NULL;
    const char *k[] = {RKW ".bonus"}, *v[] = {"{a: 1}"};
    assert_int_equal(df_config_with_overrides(c, k, v, 1, "wf.yaml node 'reward'", &node), 0);
    assert_string_equal(df_config_map_text(node, RKW ".*"),
                        "{opts: {depth: 3, kind: deep, width: [1, 2]}, keep: 1, my_threshold: 0.3, flag: true, name: x, "
                        "bonus: {a: 1}}");
    df_config_free(node);
    df_config_free(c);
    /* the typed keys keep their checks; below one, and '*' itself, are not other keys */
    text_fails("custom_reward_function:\n  reward_kwargs: {method: lenient}\n", NULL, 0,
               "t.yaml:2: " RKW ".method: expected one of strict|flexible, got \"lenient\"");
    text_fails(RKW ".format_score: abc\n", NULL, 0, "t.yaml:1: " RKW ".format_score: expected a number, got \"abc\"");
    const char *ov1[] = {RKW ".method.x=1"};
    text_fails(NULL, ov1, 1,
               "command line: '" RKW ".method.x=1': unknown key '" RKW ".method.x' (did you mean '" RKW ".method'?)");
    const char *ov2[] = {RKW ".*={a: 1}"};
    text_fails(NULL, ov2, 1, "command line: '" RKW ".*={a: 1}': '" RKW ".*': '*' stands for the other keys of an "
                             "open group: set each by its name");
    /* other groups still refuse unknown keys, with a hint that is never the '*' entry */
    text_fails("custom_reward_function:\n  nme: f\n", NULL, 0,
               "t.yaml:2: unknown key 'custom_reward_function.nme' (did you mean 'custom_reward_function.name'?)");
    const char *ov3[] = {"reward_model.reward_kwargs_x=1"};
    text_fails(NULL, ov3, 1, "command line: 'reward_model.reward_kwargs_x=1': unknown key "
                             "'reward_model.reward_kwargs_x' (did you mean 'reward_model.reward_kwargs'?)");
    text_fails("data:\n  my_threshold: 0.3\n", NULL, 0, "t.yaml:2: unknown key 'data.my_threshold'");
}
#undef RKW

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_schema_and_defaults),
        cmocka_unit_test(test_siirl_trainer_yaml_loads),
        cmocka_unit_test(test_dump_round_trip),
        cmocka_unit_test(test_canonical_text),
        cmocka_unit_test(test_type_errors),
        cmocka_unit_test(test_overrides),
        cmocka_unit_test(test_open_group),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
