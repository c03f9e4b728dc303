/*
 * test_sft_chat_kwargs.c — verl's data.apply_chat_template_kwargs, data.ignore_input_ids_mismatch
 * and data.custom_cls (docs/sft.md, docs/chat_templates.md).
 *
 * A config map becomes typed JSON (df_config_map_json: `False` from a Hydra override is a bool, a
 * quoted "true" a string). The tokenizer's kwargs reach every render (Qwen3's template with
 * enable_thinking=false writes the empty think block after the generation prompt) and a call's
 * extra variables override them; apply_chat_template's own arguments are refused as kwargs.
 * Multi-turn SFT renders each message with the kwargs but finds the prefixes without them, as
 * verl: with a template whose generation prompt grows with a kwarg, the loss mask still starts
 * at the assistant's first content token. With ignore_input_ids_mismatch a conversation that
 * renders differently turn by turn is kept (counted) instead of failing. A data.custom_cls.path is
 * refused, a data.apply_chat_template_kwargs override of the train and sft configs is read, and
 * the RL trainer renders its prompts with it (a template that raises on the kwarg fails the run).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "distflow/reward.h"
#include "distflow/sft_config.h"
#include "distflow/train_config.h"
#include "distflow/worker.h"
#include "testutil.h"
#include "workers/sft/sft_chat.h"

#include <stdlib.h>
#include <string.h>

static df_tokenizer *qwen(void)
{
    df_tokenizer *t = NULL;
    assert_int_equal(df_tokenizer_load(DF_SHARED_DIR "/data/tokenizers/qwen2.5", &t), 0);
    return t;
}

static void expect_json(const char *map_text, const char *want)
{
    char *json = NULL;
    assert_int_equal(df_config_map_json(map_text, &json), 0);
    if (!want)
        assert_null(json);
    else
        assert_string_equal(json, want);
    free(json);
}

static void test_map_json(void **state)
{
    (void)state;
    expect_json("{enable_thinking: False, reasoning_effort: medium, n: 3, f: 0.5, q: \"true\", z: null, "
                "nested: {a: [1, x, yes]}, big: 1e400}",
                "{\"enable_thinking\":false,\"reasoning_effort\":\"medium\",\"n\":3,\"f\":0.5,\"q\":\"true\","
                "\"z\":null,\"nested\":{\"a\":[1,\"x\",true]},\"big\":\"1e400\"}");
    expect_json("{}", "{}");
    expect_json(NULL, NULL);
    char *json = (char *)1;
    assert_int_equal(df_config_map_json("[1, 2]", &json), DF_EINVAL);
    assert_null(json);
}

static char *render(const df_tokenizer *t, const char *extra)
{
    char *text = NULL;
    assert_int_equal(df_tokenizer_apply_chat_template_json(t, "[{\"role\": \"user\", \"content\": \"Hi\"}]", NULL,
                                                           true, extra, &text),
                     0);
    return text;
}

static bool ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && !strcmp(s + n - k, tail);
}

static void test_tokenizer_kwargs(void **state)
{
    (void)state;
    df_tokenizer *t = qwen();
    char *src = NULL;
    assert_int_equal(df_read_file(DF_SOURCE_DIR "/tests/fixtures/chat_templates/Qwen-Qwen3-0.6B.jinja", &src, NULL), 0);
    assert_int_equal(df_tokenizer_set_chat_template(t, src), 0);
    free(src);
    char *plain = render(t, NULL);
    assert_true(ends_with(plain, "<|im_start|>assistant\n"));
    assert_int_equal(df_tokenizer_set_chat_template_kwargs(t, "{\"enable_thinking\": false}"), 0);
    char *off = render(t, NULL), *on = render(t, "{\"enable_thinking\": true}");
    assert_true(ends_with(off, "<|im_start|>assistant\n<think>\n\n</think>\n\n"));
    assert_string_equal(on, plain); /* the call's variables win */
    /* refused: apply_chat_template's own arguments, non-objects; the previous kwargs stay */
    assert_int_equal(df_tokenizer_set_chat_template_kwargs(t, "{\"tools\": []}"), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "'tools' is an argument of apply_chat_template"));
    assert_int_equal(df_tokenizer_set_chat_template_kwargs(t, "{\"continue_final_message\": true}"), DF_EINVAL);
    assert_int_equal(df_tokenizer_set_chat_template_kwargs(t, "[1]"), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "must be a JSON object"));
    assert_int_equal(df_tokenizer_set_chat_template_kwargs(t, "{\"x\": "), DF_EINVAL);
    char *still = render(t, NULL);
    assert_string_equal(still, off);
    assert_int_equal(df_tokenizer_set_chat_template_kwargs(t, NULL), 0); /* cleared */
    char *again = render(t, NULL);
    assert_string_equal(again, plain);
    free(plain);
    free(off);
    free(on);
    free(still);
    free(again);
    df_tokenizer_free(t);
}

/* ChatML whose assistant turns carry a kwarg's signature, and whose generation prompt grows with another. */
static const char SIGNED[] =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{% if m.role == 'assistant' and signature is defined %} -- {{ signature }}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% if think %}<think></think>{% endif %}"
    "{% endif %}";
static const char CHAT[] = "[{\"role\": \"user\", \"content\": \"Hello\"}, {\"role\": \"assistant\", \"content\": "
                           "\"Hi there\"}]";

static void test_multiturn_kwargs_mask(void **state)
{
    (void)state;
    df_tokenizer *t = qwen();
    assert_int_equal(df_tokenizer_set_chat_template(t, SIGNED), 0);
    df_sft_chat_prefix pre; /* found before the kwargs are set, as the trainer does */
    assert_int_equal(df_sft_chat_prefix_init(t, &pre), 0);
    assert_int_equal(pre.n_gen, 3); /* <|im_start|> assistant \n */
    assert_int_equal(df_tokenizer_set_chat_template_kwargs(t, "{\"signature\": \"bot\", \"think\": true}"), 0);
    int32_t *ids, *masked;
    uint8_t *mask;
    int64_t n, k = 0;
    assert_int_equal(df_sft_chat_encode(t, &pre, CHAT, NULL, -1, NULL, &ids, &mask, &n), 0);
    masked = malloc((size_t)n * sizeof *masked);
    for (int64_t i = 0; i < n; i++)
        if (mask[i])
            masked[k++] = ids[i];
    char *text = NULL;
    assert_int_equal(df_tokenizer_decode(t, masked, k, false, &text), 0);
    assert_string_equal(text, "Hi there -- bot<|im_end|>\n"); /* the kwarg rendered, no content token lost */
    free(text);
    free(masked);
    free(ids);
    free(mask);
    df_sft_chat_prefix_free(&pre);
    df_tokenizer_free(t);
}

/* Two tool responses in a row render as one user turn together, as two alone (test_sft_chat.c). */
static const char ROWS[] =
    "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}]}\n"
    "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"tool\", \"content\": \"1\"}, "
    "{\"role\": \"tool\", \"content\": \"2\"}, {\"role\": \"assistant\", \"content\": \"3\"}]}\n";

static int load(const df_tokenizer *t, bool ignore, df_sft_chat_stats *st)
{
    df_dataset *ds = NULL;
    df_dataset_opts o = {.reward_optional = true, .no_prompt = true};
    assert_int_equal(df_dataset_load_buffer(ROWS, strlen(ROWS), "rows.jsonl", &o, &ds), 0);
    df_sft_chat_keys k = {.messages_key = "messages", .tools_key = "tools", .enable_thinking_key = "enable_thinking",
                          .max_length = 4096, .truncation = "error", .ignore_input_ids_mismatch = ignore};
    df_sft_chat_prefix pre;
    assert_int_equal(df_sft_chat_prefix_init(t, &pre), 0);
    df_prompt_cache p = {0}, r = {0};
    float *mask = NULL;
    int rc = df_sft_chat_load(ds, t, &pre, &k, &p, &r, &mask, st);
    if (!rc)
        assert_int_equal(p.n, 2);
    df_prompt_cache_free(&p);
    df_prompt_cache_free(&r);
    free(mask);
    df_sft_chat_prefix_free(&pre);
    df_dataset_free(ds);
    return rc;
}

static void test_ignore_input_ids_mismatch(void **state)
{
    (void)state;
    df_tokenizer *t = qwen();
    df_sft_chat_stats st = {0};
    assert_int_equal(load(t, false, &st), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "rows.jsonl:2"));
    assert_int_equal(load(t, true, &st), 0);
    assert_int_equal(st.mismatched, 1);
    assert_int_equal(st.first_mismatched, 1);
    df_tokenizer_free(t);
}

static void test_config_keys(void **state)
{
    (void)state;
    const char *ov[] = {"+data.apply_chat_template_kwargs.enable_thinking=False"};
    df_config *c = NULL;
    assert_int_equal(df_config_load(df_config_schema_sft(), NULL, ov, 1, &c), 0);
    df_sft_config s;
    assert_int_equal(df_sft_config_resolve(c, &s), 0);
    char *json = NULL;
    assert_int_equal(df_config_map_json(s.data.apply_chat_template_kwargs, &json), 0);
    assert_string_equal(json, "{\"enable_thinking\":false}");
    assert_false(s.data.ignore_input_ids_mismatch);
    free(json);
    df_config_free(c);
    assert_int_equal(df_config_load(df_config_schema_train(), NULL, ov, 1, &c), 0);
    df_train_config tr;
    assert_int_equal(df_train_config_resolve(c, &tr), 0);
    assert_int_equal(df_config_map_json(tr.data.apply_chat_template_kwargs, &json), 0);
    assert_string_equal(json, "{\"enable_thinking\":false}");
    free(json);
    df_config_free(c);
    /* a Python dataset class has no meaning here: refused before the run */
    const char *cls[] = {"data.custom_cls.path=my_dataset.py", "data.custom_cls.name=MyDataset"};
    assert_int_equal(df_config_load(df_config_schema_sft(), NULL, cls, 2, &c), 0);
    assert_int_not_equal(df_config_check_compat(c, NULL, NULL), 0);
    assert_non_null(strstr(df_last_error(), "data.custom_cls.path"));
    df_config_free(c);
}

/* The RL side: the policy tokenizer gets the kwargs before the prompts are rendered. */
static void test_rl_prompts_get_kwargs(void **state)
{
    (void)state;
    char dir[] = "/tmp/df_kwargs_XXXXXX", model[64], yaml[1024];
    assert_non_null(mkdtemp(dir));
    assert_int_equal(df_reward_register("test/digits", df_test_digit_share), 0);
    df_test_digits_inputs(dir, "train.jsonl", 8, "test/digits", true);
    snprintf(model, sizeof model, "%s/model", dir);
    df_tokenizer *t = NULL;
    assert_int_equal(df_tokenizer_load(model, &t), 0);
    assert_int_equal(df_tokenizer_set_chat_template(t, "{% if boom %}{{ raise_exception('the kwargs reached the "
                                                       "prompt') }}{% endif %}{{ messages[0].content }}"),
                     0);
    assert_int_equal(df_tokenizer_save(t, model), 0);
    df_tokenizer_free(t);
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/train.jsonl], val_files: [], train_batch_size: 4, max_prompt_length: 64,\n"
             "       max_response_length: 4}\n"
             "actor_rollout_ref: {model: {path: %s}, actor: {ppo_mini_batch_size: 4}, rollout: {n: 2}}\n"
             "algorithm: {adv_estimator: grpo}\n"
             "trainer: {total_training_steps: 1, logger: [], default_local_dir: %s/out}\n",
             dir, model, dir);
    for (int boom = 0; boom < 2; boom++) {
        const char *ov[] = {boom ? "+data.apply_chat_template_kwargs.boom=true" : "data.apply_chat_template_kwargs={}"};
        df_config *cfg = df_test_config(yaml, "kwargs.yaml", ov, 1);
        df_dag_worker *w = NULL;
        int rc = df_dag_worker_create(cfg, NULL, &w);
        if (boom) {
            assert_int_equal(rc, DF_EINVAL);
            assert_non_null(strstr(df_last_error(), "the kwargs reached the prompt"));
        } else if (rc) {
            fail_msg("%s", df_last_error());
        }
        df_dag_worker_free(w);
        df_config_free(cfg);
    }
    df_test_remove_tree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_map_json),
        cmocka_unit_test(test_tokenizer_kwargs),
        cmocka_unit_test(test_multiturn_kwargs_mask),
        cmocka_unit_test(test_ignore_input_ids_mismatch),
        cmocka_unit_test(test_config_keys),
        cmocka_unit_test(test_rl_prompts_get_kwargs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
