/*
 * Chat-template parity: the real templates of tests/fixtures/chat_templates
 * (and Qwen2.5's from ../shared) rendered by distflow's Jinja engine on the
 * conversations of tests/golden/chat/conversations.json must equal, byte for
 * byte, what @huggingface/jinja rendered (tests/golden/chat/expected/NAME.json,
 * made by gen_golden.mjs; docs/testing.md). Where the oracle raised, the engine
 * must fail too, with the template's own message when it is a
 * raise_exception. Then the same through the tokenizer: the Qwen2.5
 * tokenizer's df_tokenizer_apply_chat_template_json on the golden messages.
 */
/* rounding-free (scripts/test-variants.sh skips it): parsing, text and integers only */
#include "distflow/jinja.h"
#include "distflow/tokenizer.h"

#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define GOLDEN DF_SOURCE_DIR "/tests/golden/chat"
#define FIXTURES DF_SOURCE_DIR "/tests/fixtures/chat_templates"

/*
 * Cases where @huggingface/jinja and Python's Jinja2 (transformers) disagree, and
 * distflow follows Jinja2: a dict added to a string (DeepSeek's template on
 * dict-valued tool-call arguments) prints "[object Map]" in the oracle and
 * raises TypeError in Jinja2. The engine must raise here.
 */
static const struct {
    const char *tmpl, *name, *error;
} DIVERGENT[] = {
    {"deepseek-r1-distill", "tool_call_null_content", "unsupported operand type(s) for +: 'str' and 'dict'"},
};

static json_t *load_json(const char *path)
{
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    if (!j)
        print_error("%s:%d: %s\n", path, e.line, e.text);
    assert_non_null(j);
    return j;
}

/* The template text: a fixture file, or chat_template of a shared tokenizer_config.json. */
static char *template_text(const json_t *spec)
{
    char path[1024];
    const char *file = json_string_value(json_object_get(spec, "file"));
    if (file) {
        snprintf(path, sizeof path, "%s/%s", FIXTURES, file);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        rewind(f);
        char *s = malloc((size_t)n + 1);
        assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
        s[n] = '\0';
        fclose(f);
        return s;
    }
    snprintf(path, sizeof path, "%s/%s", DF_SHARED_DIR, json_string_value(json_object_get(spec, "shared")));
    json_t *cfg = json_load_file(path, 0, NULL);
    if (!cfg)
        return NULL;
    char *s = strdup(json_string_value(json_object_get(cfg, "chat_template")));
    json_decref(cfg);
    return s;
}

/* The cases of conversations.json that template `name` is rendered on: all but those whose
   "only" list names other templates (a feature of some templates, e.g. Gemma 3's content parts). */
static size_t cases_for(const json_t *spec, const char *name)
{
    size_t n = 0, i, j;
    json_t *c, *t;
    json_array_foreach(json_object_get(spec, "cases"), i, c)
    {
        json_t *only = json_object_get(c, "only");
        bool named = !only;
        json_array_foreach(only, j, t) named |= !strcmp(json_string_value(t), name);
        n += named;
    }
    return n;
}

static const char *divergent_error(const char *tmpl, const char *name)
{
    for (size_t i = 0; i < sizeof DIVERGENT / sizeof DIVERGENT[0]; i++)
        if (!strcmp(DIVERGENT[i].tmpl, tmpl) && !strcmp(DIVERGENT[i].name, name))
            return DIVERGENT[i].error;
    return NULL;
}

/* One case; returns 1 when it matched the oracle (or the documented divergence). */
static int check_case(const df_jinja_template *t, const char *src, const char *tmpl, const char *name,
                      json_t *c)
{
    char *ctx = json_dumps(json_object_get(c, "context"), JSON_COMPACT);
    char *out = NULL;
    int rc = df_jinja_render(t, ctx, NULL, &out);
    free(ctx);
    const char *want = json_string_value(json_object_get(c, "text"));
    const char *err = json_string_value(json_object_get(c, "error"));
    const char *div = divergent_error(tmpl, name);
    int ok;
    if (div)
        ok = rc == DF_EINVAL && strstr(df_last_error(), div) != NULL;
    else if (want)
        ok = rc == 0 && strcmp(out, want) == 0;
    else /* the oracle raised: so must we, with the template's message when it is its own */
        ok = rc == DF_EINVAL && (!strstr(src, err) || strstr(df_last_error(), err) != NULL);
    if (!ok)
        print_error("%s / %s: rc %d (%s)\n--- want%s:\n%s\n--- got:\n%s\n", tmpl, name, rc,
                    rc ? df_last_error() : "", want ? "" : " an error", want ? want : (div ? div : err),
                    out ? out : "");
    free(out);
    return ok;
}

static void test_parity_with_huggingface_jinja(void **state)
{
    (void)state;
    json_t *spec = load_json(GOLDEN "/conversations.json");
    json_t *templates = json_object_get(spec, "templates");
    size_t n_cases = json_array_size(json_object_get(spec, "cases"));
    assert_true(json_array_size(templates) >= 8 && n_cases >= 10);
    int compared = 0, failed = 0, texts = 0;
    size_t i;
    json_t *ts;
    json_array_foreach(templates, i, ts)
    {
        const char *name = json_string_value(json_object_get(ts, "name"));
        char *src = template_text(ts);
        if (!src) { /* only the shared Qwen2.5 config can be missing */
            print_message("skipping %s: %s not found\n", name,
                          json_string_value(json_object_get(ts, "shared")));
            continue;
        }
        char path[1024];
        snprintf(path, sizeof path, "%s/expected/%s.json", GOLDEN, name);
        json_t *golden = load_json(path);
        json_t *cases = json_object_get(golden, "cases");
        /* regenerate after editing conversations.json */
        assert_int_equal(json_object_size(cases), cases_for(spec, name));
        df_jinja_template *t;
        if (df_jinja_parse(src, name, &t) != 0) {
            print_error("%s: %s\n", name, df_last_error());
            fail();
        }
        const char *cname;
        json_t *c;
        json_object_foreach(cases, cname, c)
        {
            int ok = check_case(t, src, name, cname, c);
            failed += !ok;
            compared++;
            texts += json_object_get(c, "text") != NULL;
        }
        df_jinja_free(t);
        json_decref(golden);
        free(src);
    }
    print_message("%d cases compared (%d rendered texts), %d differ\n", compared, texts, failed);
    assert_int_equal(failed, 0);
    assert_true(compared >= 7 * (int)cases_for(spec, "qwen3"));
    json_decref(spec);
}

/*
 * Llama 3.2 dates its system header with strftime_now("%d %b %Y") when no date_string is given
 * (the goldens pass one, so they do not depend on the day): the clock of df_jinja_options.
 */
static void test_llama32_strftime_now(void **state)
{
    (void)state;
    json_t *spec = load_json(GOLDEN "/conversations.json");
    json_t *t = NULL, *ts;
    size_t i;
    json_array_foreach(json_object_get(spec, "templates"), i,
                       ts) if (!strcmp(json_string_value(json_object_get(ts, "name")), "llama3.2")) t = ts;
    assert_non_null(t);
    char *src = template_text(t);
    df_jinja_template *tp;
    assert_int_equal(df_jinja_parse(src, "llama3.2", &tp), 0);
    setenv("TZ", "UTC", 1);
    df_jinja_options o = {.now = 1741089600}; /* 2025-03-04 12:00 UTC */
    char *out;
    assert_int_equal(df_jinja_render(tp,
                                     "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], "
                                     "\"bos_token\": \"<|begin_of_text|>\", \"add_generation_prompt\": true}",
                                     &o, &out),
                     0);
    assert_string_equal(out, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
                             "Cutting Knowledge Date: December 2023\nToday Date: 04 Mar 2025\n\n<|eot_id|>"
                             "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                             "<|start_header_id|>assistant<|end_header_id|>\n\n");
    free(out);
    df_jinja_free(tp);
    free(src);
    json_decref(spec);
}

/* The tokenizer API on the golden Qwen2.5 conversations: messages, tools and extra variables. */
static void test_tokenizer_apply_matches_golden(void **state)
{
    (void)state;
    df_tokenizer *tok;
    if (df_tokenizer_load(DF_SHARED_DIR "/data/tokenizers/qwen2.5", &tok) != 0) {
        print_message("skipping: %s\n", df_last_error());
        skip();
    }
    json_t *golden = load_json(GOLDEN "/expected/qwen2.5.json");
    const char *cname;
    json_t *c;
    int n = 0;
    json_object_foreach(json_object_get(golden, "cases"), cname, c)
    {
        json_t *ctx = json_object_get(c, "context");
        char *msgs = json_dumps(json_object_get(ctx, "messages"), JSON_COMPACT);
        json_t *tools = json_object_get(ctx, "tools");
        char *tl = tools ? json_dumps(tools, JSON_COMPACT) : NULL;
        json_t *extra = json_pack("{s:O}", "date_string", json_object_get(ctx, "date_string"));
        char *ex = json_dumps(extra, JSON_COMPACT);
        char *out = NULL;
        int rc = df_tokenizer_apply_chat_template_json(
            tok, msgs, tl, json_is_true(json_object_get(ctx, "add_generation_prompt")), ex, &out);
        if (rc != 0 || strcmp(out, json_string_value(json_object_get(c, "text"))) != 0) {
            print_error("%s: rc %d %s\n%s\n", cname, rc, rc ? df_last_error() : "", out ? out : "");
            fail();
        }
        n++;
        free(out);
        free(msgs);
        free(tl);
        free(ex);
        json_decref(extra);
    }
    assert_true(n >= 10);
    json_decref(golden);
    df_tokenizer_free(tok);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parity_with_huggingface_jinja),
        cmocka_unit_test(test_llama32_strftime_now),
        cmocka_unit_test(test_tokenizer_apply_matches_golden),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
