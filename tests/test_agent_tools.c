/*
 * Tools and interactions (distflow/agent.h): the calculator's exact arithmetic against values
 * computed with Python's integers / fractions; verl's GSM8K tool (calc_gsm8k_reward: flexible
 * scoring after "#### ", the -0.05 shaping for an answer that does not improve) and interaction
 * ("Your response is correct!" and stop, or a retry); tool sets and interaction sets from verl's
 * YAML, with errors naming the file, the entry and the problem; sessions turning malformed calls
 * and tool failures into answers for the model.
 */
#include "distflow/agent.h"

#include "agent/agent_internal.h"
#include "util/utf8.h"

#include "testutil.h"

#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static void calc_ok(const char *expr, const char *want)
{
    char *out = NULL;
    int rc = agent_calculate(expr, &out);
    if (rc)
        fail_msg("'%s': %s", expr, df_last_error());
    if (strcmp(out, want))
        fail_msg("'%s' = '%s', expected '%s'", expr, out, want);
    free(out);
}

static void calc_bad(const char *expr, const char *why)
{
    char *out = NULL;
    assert_error_mentions(agent_calculate(expr, &out), DF_EINVAL, why);
    assert_null(out);
    assert_last_error_mentions("calculator: ");
}

static void test_calculator_values(void **state)
{
    (void)state;
    /* expected values: Python integers and fractions.Fraction */
    calc_ok("12345678 * 87654321", "1082152022374638");
    calc_ok("99999999999999999999 * 99999999999999999999", "9999999999999999999800000000000000000001");
    calc_ok("123456789012345678901234567890*987654321098765432109876543210",
            "121932631137021795226185032733622923332237463801111263526900");
    calc_ok("-123456789123456789 * 987654321987654321 + 17", "-121932631356500531347203169112635252");
    calc_ok("999999999999999999999999999 / 333333333333333333333333333", "3");
    calc_ok("9999999999999999999800000000000000000001 / 99999999999999999999", "99999999999999999999");
    calc_ok("(2 + 3) * 4 - 5 / 5", "19");
    calc_ok("(2+3)*-4-10/4", "-22.5");
    calc_ok("1/3 + 1/7", "10/21 (about 0.476190476190)");
    calc_ok("-1/3", "-1/3 (about -0.333333333333)");
    calc_ok("2.5 * 3/5 - 1", "0.5");
    calc_ok("1/8", "0.125");
    calc_ok("0.1 + 0.2", "0.3");
    calc_ok("  - - 7 ", "7");
    calc_ok("0 * -5", "0");
    calc_ok("3 - 10", "-7");
    calc_ok("000123", "123");
}

static void test_calculator_errors(void **state)
{
    (void)state;
    calc_bad("1 / (3 - 3)", "division by zero");
    calc_bad("2 ** 3", "unexpected '*'");
    calc_bad("2 ^ 3", "unexpected '^'");
    calc_bad("__import__('os')", "unexpected '_'");
    calc_bad("((1 + 2)", "expected ')'");
    calc_bad("(1 + 2))", "unbalanced ')'");
    calc_bad("", "empty");
    calc_bad("1 +", "ends where a number");
    calc_bad("1 2", "unexpected text");
    calc_bad("3.", "ends in '.'");
    /* quoted text ends between UTF-8 characters: a multibyte one (3 bytes each) crosses the
       20-byte cut at byte 20, so the quote stops after 19 bytes; a character not allowed is quoted whole */
    calc_bad("1 2\u20ac\u20ac\u20ac\u20ac\u20ac\u20ac\u20ac\u20ac",
             "unexpected text at '2\u20ac\u20ac\u20ac\u20ac\u20ac\u20ac' (an operator");
    calc_bad("(1 + 2 \u00d7 3", "expected ')' at '\u00d7 3'");
    calc_bad("3 \u00d7 4", "unexpected '\u00d7' (only numbers");
    calc_bad("\U0001F600", "unexpected '\U0001F600'");
    calc_bad("3 \xff 4", "unexpected '\\xFF' (only numbers");                 /* not UTF-8: escaped */
    calc_bad("1 2\u20ac\xe2\x82", "unexpected text at '2\u20ac' (an operator"); /* a truncated one: left out */
    for (int n = 1; n <= 12; n++) { /* every cut of a run of 2- and 3-byte characters is whole */
        char expr[64] = "1 2";
        for (int i = 0; i < n; i++)
            strcat(expr, i % 2 ? "\u00e9" : "\u20ac");
        char *out = NULL;
        assert_int_equal(agent_calculate(expr, &out), DF_EINVAL);
        const char *q = strchr(df_last_error(), '\'') + 1;
        size_t len = (size_t)(strchr(q, '\'') - q);
        assert_true(len <= 20);
        assert_true(len == df_utf8_prefix(q, len)); /* whole characters */
        const unsigned char *next = (const unsigned char *)expr + 2 + len; /* as many as fit */
        assert_true(!*next || len + (size_t)df_utf8_len(next) > 20);
    }
    char deep[200];
    memset(deep, '(', 100);
    strcpy(deep + 100, "1");
    calc_bad(deep, "nest deeper");
    char *big = malloc(5000);
    memset(big, '9', 4999);
    big[4999] = '\0';
    calc_bad(big, "the limit is 4096");
    memset(big, '9', 1001); /* 1001 digits squared: more than 2000 */
    big[1001] = '*';
    memset(big + 1002, '9', 1001);
    big[2003] = '\0';
    calc_bad(big, "more than 2000 digits");
    big[1001] = '+'; /* their sum has 1002: fine (2 * (10^1001 - 1) = 1 9...9 8) */
    char *sum = malloc(1003);
    sum[0] = '1';
    memset(sum + 1, '9', 1000);
    sum[1001] = '8';
    sum[1002] = '\0';
    calc_ok(big, sum);
    free(sum);
    free(big);
}

static void run_tool(const df_tool *t, void *inst, const char *args, const char *text, double reward)
{
    df_tool_result r = {0};
    assert_int_equal(t->execute(NULL, inst, args, &r), DF_OK);
    assert_string_equal(r.text, text);
    assert_near(r.reward, reward, 0);
    df_tool_result_clear(&r);
}

static void test_calculator_tool(void **state)
{
    (void)state;
    const df_tool *t = NULL;
    assert_int_equal(df_tool_class_lookup("calculator", &t), DF_OK);
    assert_ptr_equal(t->execute, df_tool_calculator.execute);
    void *inst = NULL;
    assert_int_equal(t->create(NULL, "x", "{}", &inst), DF_OK);
    run_tool(t, inst, "{\"expression\": \"12345678 * 87654321\"}", "12345678 * 87654321 = 1082152022374638", 0);
    df_tool_result r = {0};
    assert_error_mentions(t->execute(NULL, inst, "{\"expr\": \"1\"}", &r), DF_EINVAL, "\"expression\" must be a string");
    df_tool_result_clear(&r);
}

/* The GSM8K tool's calc_reward after execute({"answer": answer}) with ground truth `gt` (NULL: none). */
static double gsm8k_tool_score(const char *gt, const char *answer)
{
    void *inst = NULL;
    json_t *kw = gt ? json_pack("{s:s}", "ground_truth", gt) : json_object();
    json_t *args = json_pack("{s:s}", "answer", answer);
    char *kws = json_dumps(kw, 0), *as = json_dumps(args, 0);
    assert_int_equal(df_tool_gsm8k.create(NULL, "id", kws, &inst), DF_OK);
    df_tool_result r = {0};
    assert_int_equal(df_tool_gsm8k.execute(NULL, inst, as, &r), DF_OK);
    double score = -1;
    assert_int_equal(df_tool_gsm8k.calc_reward(NULL, inst, &score), DF_OK);
    df_tool_result_clear(&r);
    df_tool_gsm8k.release(NULL, inst);
    free(kws), free(as);
    json_decref(kw), json_decref(args);
    return score;
}

static void test_gsm8k_flexible(void **state)
{
    (void)state;
    /* verl gsm8k.compute_score("#### " + answer, method="flexible") of the rewards module: the last
       number-like match within the last 300 characters */
    assert_near(gsm8k_tool_score("72", "72"), 1.0, 0);
    assert_near(gsm8k_tool_score("72", "So 3 + 4 = 7, then #### 72"), 1.0, 0);
    assert_near(gsm8k_tool_score("72", "72 dollars"), 1.0, 0);
    assert_near(gsm8k_tool_score("-3", "-3"), 1.0, 0);
    assert_near(gsm8k_tool_score("72", "The answer is 72."), 0.0, 0); /* matches "72." */
    assert_near(gsm8k_tool_score("1000", "$1,000"), 0.0, 0);          /* commas stay */
    assert_near(gsm8k_tool_score("72", "72 . "), 1.0, 0);             /* "." is skipped */
    assert_near(gsm8k_tool_score("72", "no number"), 0.0, 0);
    assert_near(gsm8k_tool_score(NULL, "72"), 0.0, 0);
    /* only the last 300 characters of "#### " + answer are searched (verl's _SOLUTION_CLIP_CHARS) */
    char text[400];
    memset(text, 'a', sizeof text);
    memcpy(text, "72", 2);
    text[399] = '\0';
    assert_near(gsm8k_tool_score("72", text), 0.0, 0);
    text[98] = '7', text[99] = '2';
    assert_near(gsm8k_tool_score("72", text), 0.0, 0); /* 300 chars back starts at 99 */
    text[99] = '7', text[100] = '2';
    assert_near(gsm8k_tool_score("72", text), 1.0, 0);
}

static void test_gsm8k_tool(void **state)
{
    (void)state;
    const df_tool *t = NULL;
    assert_int_equal(df_tool_class_lookup("verl.tools.gsm8k_tool.Gsm8kTool", &t), DF_OK);
    assert_ptr_equal(t->execute, df_tool_gsm8k.execute);
    void *inst = NULL;
    assert_int_equal(t->create(NULL, "id", "{\"ground_truth\": \"72\"}", &inst), DF_OK);
    double r = -1;
    assert_int_equal(t->calc_reward(NULL, inst, &r), DF_OK);
    assert_near(r, 0.0, 0);
    /* wrong, then right (improves: 0), right again (no improvement: -0.05), wrong (-0.05) */
    run_tool(t, inst, "{\"answer\": \"70\"}", "Current parsed answer='70' reward=0.0", -0.05);
    run_tool(t, inst, "{\"answer\": \"72\"}", "Current parsed answer='72' reward=1.0", 0.0);
    assert_int_equal(t->calc_reward(NULL, inst, &r), DF_OK);
    assert_near(r, 1.0, 0);
    run_tool(t, inst, "{\"answer\": \"#### 72\"}", "Current parsed answer='#### 72' reward=1.0", -0.05);
    run_tool(t, inst, "{\"answer\": 71}", "Current parsed answer='71' reward=0.0", -0.05);
    assert_int_equal(t->calc_reward(NULL, inst, &r), DF_OK);
    assert_near(r, 0.0, 0);
    run_tool(t, inst, "{\"answer\": 72}", "Current parsed answer='72' reward=1.0", 0.0);
    t->release(NULL, inst);
    /* a ground truth given as a number */
    assert_int_equal(t->create(NULL, "id", "{\"ground_truth\": 18}", &inst), DF_OK);
    run_tool(t, inst, "{\"answer\": \"18\"}", "Current parsed answer='18' reward=1.0", 0.0);
    t->release(NULL, inst);
}

static void test_gsm8k_interaction(void **state)
{
    (void)state;
    const df_interaction *ia = NULL;
    assert_int_equal(df_interaction_class_lookup("verl.interactions.gsm8k_interaction.Gsm8kInteraction", &ia), DF_OK);
    df_interaction_set *set = NULL;
    assert_int_equal(df_interaction_set_create(&set), DF_OK);
    assert_int_equal(df_interaction_set_add(set, NULL, ia, NULL), DF_OK);
    df_interaction_session *s = NULL;
    assert_int_equal(df_interaction_session_start(set, "t0", "{\"query\": \"q\", \"ground_truth\": \"72\"}", &s), DF_OK);
    df_interaction_result r;
    assert_int_equal(df_interaction_session_respond(s, "[{\"role\": \"user\", \"content\": \"q\"}, {\"role\": "
                                                       "\"assistant\", \"content\": \"It is 70.\"}]",
                                                    &r),
                     DF_OK);
    assert_false(r.should_terminate);
    assert_near(r.reward, 0.0, 0);
    assert_string_equal(r.text, "Your response is incorrect! You need to reflect on your answer and try again.");
    df_interaction_result_clear(&r);
    assert_int_equal(df_interaction_session_respond(s, "[{\"role\": \"assistant\", \"content\": \"60 + 12 = 72\\n"
                                                       "#### 72\"}, {\"role\": \"user\", \"content\": \"ok\"}]",
                                                    &r),
                     DF_OK);
    assert_true(r.should_terminate);
    assert_near(r.reward, 1.0, 0);
    assert_string_equal(r.text, "Your response is correct!");
    df_interaction_result_clear(&r);
    double score = 0;
    assert_int_equal(df_interaction_session_score(s, &score), DF_OK);
    assert_near(score, 1.0, 0);
    assert_int_equal(df_interaction_session_respond(s, "{}", &r), DF_EINVAL);
    df_interaction_session_free(s);
    assert_error_mentions(df_interaction_session_start(set, "t1", "{\"name\": \"math\"}", &s), DF_ENOTFOUND,
                          "no interaction named 'math' (the config has: gsm8k)");
    df_interaction_set_free(set);
}

static char *write_file(const char *dir, const char *name, const char *text)
{
    char *path = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

static const char TOOLS_YAML[] =
    "tools:\n"
    "  - class_name: \"verl.tools.gsm8k_tool.Gsm8kTool\"\n"
    "    config:\n"
    "      type: native\n"
    "    tool_schema:\n"
    "      type: \"function\"\n"
    "      function:\n"
    "        name: \"calc_gsm8k_reward\"\n"
    "        description: \"A tool for calculating the reward of gsm8k\"\n"
    "        parameters:\n"
    "          type: \"object\"\n"
    "          properties:\n"
    "            answer:\n"
    "              type: \"string\"\n"
    "              description: \"The model's answer\"\n"
    "          required: [\"answer\"]\n"
    "  - class_name: calculator\n"
    "    config: {type: native}\n";

static void test_tool_set_load(void **state)
{
    char *path = write_file(*state, "tools.yaml", TOOLS_YAML);
    df_tool_set *set = NULL;
    assert_int_equal(df_tool_set_load(path, NULL, &set), DF_OK);
    assert_int_equal(df_tool_set_size(set), 2);
    assert_string_equal(df_tool_set_names(set)[0], "calc_gsm8k_reward");
    assert_string_equal(df_tool_set_names(set)[1], "calculator"); /* the class's default schema */
    char *tools = NULL;
    assert_int_equal(df_tool_set_tools_json(set, &tools), DF_OK);
    json_t *a = json_loads(tools, 0, NULL);
    assert_int_equal(json_array_size(a), 2);
    assert_string_equal(json_string_value(json_object_get(json_object_get(json_array_get(a, 0), "function"),
                                                          "description")),
                        "A tool for calculating the reward of gsm8k");
    json_t *req = json_object_get(json_object_get(json_object_get(json_array_get(a, 0), "function"), "parameters"),
                                  "required");
    assert_string_equal(json_string_value(json_array_get(req, 0)), "answer");
    json_decref(a);
    free(tools);

    /* a trajectory: ground truth from verl's tools_kwargs; good, malformed and failing calls */
    df_tool_session *s = NULL;
    assert_int_equal(df_tool_session_create(set, "traj-0", "{\"calc_gsm8k_reward\": {\"create_kwargs\": "
                                                           "{\"ground_truth\": \"1082152022374638\"}}}",
                                            &s),
                     DF_OK);
    df_tool_calls calls;
    assert_int_equal(df_tool_calls_parse("<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": "
                                         "\"12345678 * 87654321\"}}</tool_call><tool_call>{\"name\": "
                                         "\"calc_gsm8k_reward\", \"arguments\": {\"answer\": \"1082152022374638\"}}"
                                         "</tool_call><tool_call>{\"name\": \"calculator\", \"arguments\": "
                                         "{\"expression\": \"1/0\"}}</tool_call><tool_call>{oops</tool_call>",
                                         df_tool_set_names(set), df_tool_set_size(set), 4, &calls),
                     DF_OK);
    assert_int_equal(calls.n_calls, 4);
    const char *want[] = {"12345678 * 87654321 = 1082152022374638",
                          "Current parsed answer='1082152022374638' reward=1.0",
                          "Error when executing tool: calculator: division by zero",
                          "Error when executing tool: the tool call is not valid JSON"};
    for (int i = 0; i < 4; i++) {
        df_tool_result r;
        assert_int_equal(df_tool_session_execute(s, &calls.calls[i], &r), DF_OK);
        if (strncmp(r.text, want[i], strlen(want[i])))
            fail_msg("call %d answered '%s', expected '%s'", i, r.text, want[i]);
        assert_near(r.reward, 0.0, 0);
        df_tool_result_clear(&r);
    }
    df_tool_calls_clear(&calls);
    df_tool_call unknown = {.name = "search", .arguments = "{}"};
    df_tool_result r;
    assert_int_equal(df_tool_session_execute(s, &unknown, &r), DF_OK);
    assert_string_equal(r.text, "Error when executing tool: unknown tool 'search'");
    df_tool_result_clear(&r);
    assert_int_equal(df_tool_session_n_calls(s), 5);
    double reward = 0;
    assert_int_equal(df_tool_session_reward(s, 0, &reward), DF_OK);
    assert_near(reward, 1.0, 0);
    assert_int_equal(df_tool_session_reward(s, 1, &reward), DF_OK); /* calculator: no calc_reward */
    assert_near(reward, 0.0, 0);
    assert_int_equal(df_tool_session_reward(s, 2, &reward), DF_EINVAL);
    df_tool_session_free(s);
    assert_int_equal(df_tool_session_create(set, "t", "[1]", &s), DF_EINVAL);
    df_tool_set_free(set);
    free(path);
}

static char g_probe_config[256];
static int probe_init(const char *config_json, void **tool)
{
    snprintf(g_probe_config, sizeof g_probe_config, "%s", config_json);
    *tool = NULL;
    return DF_OK;
}
static int probe_create(const void *t, const char *id, const char *kw, void **inst)
{
    (void)t, (void)id;
    *inst = strdup(kw); /* what the session hands create */
    return *inst ? DF_OK : DF_ENOMEM;
}
static int probe_execute(const void *t, void *inst, const char *args, df_tool_result *out)
{
    (void)t, (void)args;
    out->text = strdup(inst);
    return DF_OK;
}
static void probe_release(const void *t, void *inst)
{
    (void)t;
    free(inst);
}

/* A registered class gets the entry's config as JSON, YAML scalars typed; create gets its kwargs. */
static void test_config_to_class(void **state)
{
    df_tool probe = {.name = "probe",
                     .schema = "{\"type\": \"function\", \"function\": {\"name\": \"probe\"}}",
                     .init = probe_init, .create = probe_create, .execute = probe_execute, .release = probe_release};
    assert_int_equal(df_tool_class_register(&probe), DF_OK);
    char *path = write_file(*state, "p.yaml",
                            "tools:\n  - class_name: probe\n    config: {type: native, n: 3, x: 1.5, flag: true, "
                            "s: \"true\", nil: ~, list: [a, 2]}\n");
    df_tool_set *set = NULL;
    assert_int_equal(df_tool_set_load(path, NULL, &set), DF_OK);
    assert_string_equal(g_probe_config,
                        "{\"type\":\"native\",\"n\":3,\"x\":1.5,\"flag\":true,\"s\":\"true\",\"nil\":null,\"list\":[\"a\",2]}");
    df_tool_session *s = NULL;
    assert_int_equal(df_tool_session_create(set, "t", "{\"probe\": {\"create_kwargs\": {\"k\": [1]}}, \"other\": {}}", &s),
                     DF_OK);
    df_tool_call c = {.name = "probe", .arguments = "{}"};
    df_tool_result r;
    assert_int_equal(df_tool_session_execute(s, &c, &r), DF_OK);
    assert_string_equal(r.text, "{\"k\":[1]}");
    df_tool_result_clear(&r);
    df_tool_session_free(s);
    df_tool_set_free(set);
    free(path);
    df_tool bad = {.name = "bad", .create = probe_create};
    assert_int_equal(df_tool_class_register(&bad), DF_EINVAL);
}

/* The YAML `text` must be refused with `code` and a message naming the file and `what`. */
static void bad_config(const char *dir, const char *text, int code, const char *what)
{
    char *path = write_file(dir, "bad.yaml", text);
    df_tool_set *set = (df_tool_set *)1;
    int rc = df_tool_set_load(path, NULL, &set);
    assert_null(set);
    assert_error_mentions(rc, code, what);
    assert_last_error_mentions(path);
    free(path);
}

static void test_tool_set_errors(void **state)
{
    const char *d = *state;
    bad_config(d, "tools:\n  - class_name: calculator\n  - class_name: verl.tools.search_tool.SearchTool\n",
               DF_ENOTFOUND, "tools[1] (class_name 'verl.tools.search_tool.SearchTool'): unknown tool class");
    bad_config(d, "tools:\n  - class_name: calculator\n    config: {type: mcp}\n", DF_EUNSUPPORTED,
               "tools[0] (class_name 'calculator'): config.type 'mcp' is not supported");
    bad_config(d, "tools:\n  - class_name: calculator\n    config: {type: rest}\n", DF_EINVAL, "unknown config.type 'rest'");
    bad_config(d, "tool:\n  - class_name: calculator\n", DF_EINVAL, "no `tools:` list");
    bad_config(d, "tools:\n  - config: {}\n", DF_EINVAL, "tools[0] (class_name '?'): has no class_name");
    bad_config(d, "tools:\n  - class_name: calculator\n  - class_name: calculator\n", DF_EINVAL,
               "tools[1] (class_name 'calculator'): a second tool named 'calculator'");
    bad_config(d, "tools:\n  - class_name: gsm8k\n    tool_schema: {type: function, function: {description: x}}\n",
               DF_EINVAL, "tool_schema has no function.name");
    bad_config(d, "tools:\n  - class_name: gsm8k\n    tool_schema: {type: object}\n", DF_EINVAL,
               "tool_schema needs type: function");
    /* no key is ignored: a misspelt one, one of no place, one given twice */
    bad_config(d, "tools:\n  - class_name: gsm8k\n    tool_shema: {type: function}\n", DF_EINVAL,
               "tools[0] (class_name 'gsm8k'): unknown key 'tool_shema' (an entry holds class_name, config, "
               "tool_schema); did you mean 'tool_schema'?");
    bad_config(d, "tools:\n  - class_name: calculator\ninteraction: []\n", DF_EINVAL,
               "unknown key 'interaction' (the file holds `tools:` only)");
    bad_config(d, "tools:\n  - class_name: calculator\n    class_name: gsm8k\n", DF_EINVAL,
               "bad.yaml:3:5: the key 'class_name' appears twice in one mapping");
    bad_config(d, "tools:\n  - class_name: [calculator\n", DF_EINVAL, "bad.yaml:");
    bad_config(d, "a: &x [*x]\n", DF_EINVAL, "bad.yaml:");
    df_tool_set *set = NULL;
    assert_error_mentions(df_tool_set_load("/nonexistent/tools.yaml", NULL, &set), DF_ENOTFOUND, "tools.yaml");
}

static int g_loader_calls;
static int fake_loader(const char *ref)
{
    g_loader_calls++;
    return df_error(DF_EINVAL, "fake loader refused '%s'", ref);
}

static void test_plugin_ref_uses_loader(void **state)
{
    bad_config(*state, "tools:\n  - class_name: ./libnone.so:my_tool\n", DF_ENOTFOUND, "must be loaded first");
    char *path = write_file(*state, "p.yaml", "tools:\n  - class_name: ./libnone.so:my_tool\n");
    df_tool_set *set = NULL;
    g_loader_calls = 0;
    assert_error_mentions(df_tool_set_load(path, fake_loader, &set), DF_EINVAL, "fake loader refused './libnone.so:my_tool'");
    assert_int_equal(g_loader_calls, 1);
    free(path);
}

static void test_interaction_set_load(void **state)
{
    char *path = write_file(*state, "ia.yaml",
                            "interaction:\n  - name: \"gsm8k\"\n    class_name: "
                            "\"verl.interactions.gsm8k_interaction.Gsm8kInteraction\"\n    config: {}\n"
                            "  - class_name: \"verl.interactions.gsm8k_interaction.Gsm8kInteraction\"\n"
                            "    name: second\n");
    df_interaction_set *set = NULL;
    assert_int_equal(df_interaction_set_load(path, NULL, &set), DF_OK);
    assert_int_equal(df_interaction_set_size(set), 2);
    df_interaction_session *s = NULL;
    assert_int_equal(df_interaction_session_start(set, "t", "{\"name\": \"second\", \"ground_truth\": \"5\"}", &s), DF_OK);
    df_interaction_session_free(s);
    df_interaction_set_free(set);
    free(path);
    /* a name derived from the class (verl: Gsm8kInteraction -> gsm8k), then a duplicate */
    path = write_file(*state, "ia.yaml",
                      "interaction:\n  - class_name: verl.interactions.gsm8k_interaction.Gsm8kInteraction\n"
                      "  - class_name: gsm8k\n");
    assert_error_mentions(df_interaction_set_load(path, NULL, &set), DF_EINVAL,
                          "interaction[1] (class_name 'gsm8k'): a second interaction named 'gsm8k'");
    assert_last_error_mentions(path);
    free(path);
    /* a misspelt key is no default */
    path = write_file(*state, "ia.yaml", "interaction:\n  - class_name: gsm8k\n    nmae: other\n");
    assert_error_mentions(df_interaction_set_load(path, NULL, &set), DF_EINVAL,
                          "interaction[0] (class_name 'gsm8k'): unknown key 'nmae' (an entry holds name, class_name, "
                          "config); did you mean 'name'?");
    free(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_calculator_values),
        cmocka_unit_test(test_calculator_errors),
        cmocka_unit_test(test_calculator_tool),
        cmocka_unit_test(test_gsm8k_flexible),
        cmocka_unit_test(test_gsm8k_tool),
        cmocka_unit_test(test_gsm8k_interaction),
        cmocka_unit_test_setup_teardown(test_tool_set_load, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_tool_set_errors, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_config_to_class, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_plugin_ref_uses_loader, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_interaction_set_load, df_test_mkdtemp, df_test_rmtree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
