/*
 * Hermes tool-call parsing (distflow/agent.h, df_tool_calls_parse): well-formed calls (arguments as
 * an object, as a string holding one, absent), the content outside the blocks, max_parallel_calls,
 * and every kind of malformed block, which must become a call carrying the error text for the
 * model rather than a failure of the parser.
 */
/* rounding-free (scripts/test-variants.sh skips it): parsing, text and integers only */
#include "distflow/agent.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static const char *const NAMES[] = {"calculator", "calc_gsm8k_reward"};

static df_tool_calls parse(const char *text, int max_calls)
{
    df_tool_calls c;
    assert_int_equal(df_tool_calls_parse(text, NAMES, 2, max_calls, &c), DF_OK);
    return c;
}

/* One call, whose error must start with verl's prefix and contain `why`. */
static void expect_error(const char *text, const char *why)
{
    df_tool_calls c = parse(text, 4);
    assert_int_equal(c.n_calls, 1);
    assert_null(c.calls[0].name);
    assert_null(c.calls[0].arguments);
    assert_non_null(c.calls[0].error);
    if (strncmp(c.calls[0].error, "Error when executing tool: ", 27) || !strstr(c.calls[0].error, why))
        fail_msg("error '%s' lacks '%s'", c.calls[0].error, why);
    df_tool_calls_clear(&c);
}

static void test_no_calls(void **state)
{
    (void)state;
    df_tool_calls c = parse("The answer is 42.\n#### 42", 1);
    assert_int_equal(c.n_calls, 0);
    assert_int_equal(c.n_dropped, 0);
    assert_string_equal(c.content, "The answer is 42.\n#### 42");
    df_tool_calls_clear(&c);
    c = parse("", 1);
    assert_int_equal(c.n_calls, 0);
    assert_string_equal(c.content, "");
    df_tool_calls_clear(&c);
}

static void test_one_call(void **state)
{
    (void)state;
    df_tool_calls c = parse("Let me compute.\n<tool_call>\n{\"name\": \"calculator\", \"arguments\": "
                            "{\"expression\": \"12345678 * 87654321\"}}\n</tool_call>",
                            1);
    assert_int_equal(c.n_calls, 1);
    assert_null(c.calls[0].error);
    assert_string_equal(c.calls[0].name, "calculator");
    assert_string_equal(c.calls[0].arguments, "{\"expression\":\"12345678 * 87654321\"}");
    assert_string_equal(c.content, "Let me compute.\n");
    df_tool_calls_clear(&c);
    assert_null(c.calls);
    assert_int_equal(c.n_calls, 0);
}

static void test_arguments_forms(void **state)
{
    (void)state;
    /* a string that holds the object, as some models write it */
    df_tool_calls c = parse("<tool_call>{\"name\": \"calc_gsm8k_reward\", \"arguments\": \"{\\\"answer\\\": \\\"72\\\"}\"}"
                            "</tool_call>",
                            1);
    assert_int_equal(c.n_calls, 1);
    assert_string_equal(c.calls[0].arguments, "{\"answer\":\"72\"}");
    df_tool_calls_clear(&c);
    /* absent: {} */
    c = parse("<tool_call>{\"name\": \"calculator\"}</tool_call>", 1);
    assert_string_equal(c.calls[0].arguments, "{}");
    df_tool_calls_clear(&c);
    /* non-ASCII text survives */
    c = parse("<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": \"1+1\", \"note\": \"h\xc3\xa9\"}}"
              "</tool_call>",
              1);
    assert_string_equal(c.calls[0].arguments, "{\"expression\":\"1+1\",\"note\":\"h\xc3\xa9\"}");
    df_tool_calls_clear(&c);
}

static void test_parallel_limit(void **state)
{
    (void)state;
    const char *text = "a<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": \"1\"}}</tool_call>b"
                       "<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": \"2\"}}</tool_call>c"
                       "<tool_call>not json</tool_call>d";
    df_tool_calls c = parse(text, 1);
    assert_int_equal(c.n_calls, 1);
    assert_int_equal(c.n_dropped, 2);
    assert_string_equal(c.calls[0].arguments, "{\"expression\":\"1\"}");
    assert_string_equal(c.content, "abcd");
    df_tool_calls_clear(&c);
    c = parse(text, 3);
    assert_int_equal(c.n_calls, 3);
    assert_int_equal(c.n_dropped, 0);
    assert_string_equal(c.calls[1].arguments, "{\"expression\":\"2\"}");
    assert_non_null(c.calls[2].error); /* a malformed block keeps its place */
    df_tool_calls_clear(&c);
}

static void test_malformed(void **state)
{
    (void)state;
    expect_error("<tool_call>{\"name\": \"calculator\", \"arguments\": {</tool_call>", "not valid JSON");
    expect_error("<tool_call></tool_call>", "not valid JSON");
    expect_error("<tool_call>[1, 2]</tool_call>", "not a JSON object");
    expect_error("<tool_call>{\"arguments\": {}}</tool_call>", "no string \"name\"");
    expect_error("<tool_call>{\"name\": 7}</tool_call>", "no string \"name\"");
    expect_error("<tool_call>{\"name\": \"python\", \"arguments\": {}}</tool_call>",
                 "unknown tool 'python' (the tools are: calculator, calc_gsm8k_reward)");
    expect_error("<tool_call>{\"name\": \"calculator\", \"arguments\": [1]}</tool_call>",
                 "the arguments of 'calculator' are not a JSON object");
    expect_error("<tool_call>{\"name\": \"calculator\", \"arguments\": \"1 + 1\"}</tool_call>",
                 "a string that does not hold a JSON object");
    expect_error("<tool_call>{\"name\": \"calculator\", \"arguments\": \"[1]\"}</tool_call>",
                 "a string that does not hold a JSON object");
    expect_error("<tool_call>{\"name\": \"calc\xff\"}</tool_call>", "not valid JSON");
}

static void test_unterminated(void **state)
{
    (void)state;
    df_tool_calls c = parse("Thinking <tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\"", 2);
    assert_int_equal(c.n_calls, 1);
    assert_string_equal(c.content, "Thinking ");
    assert_non_null(strstr(c.calls[0].error, "has no closing </tool_call>"));
    df_tool_calls_clear(&c);
    /* a closing tag alone is text, as verl's regex leaves it */
    c = parse("done</tool_call>", 1);
    assert_int_equal(c.n_calls, 0);
    assert_string_equal(c.content, "done</tool_call>");
    df_tool_calls_clear(&c);
}

static void test_names_unchecked(void **state)
{
    (void)state;
    df_tool_calls c;
    assert_int_equal(df_tool_calls_parse("<tool_call>{\"name\": \"anything\"}</tool_call>", NULL, 0, 1, &c), DF_OK);
    assert_string_equal(c.calls[0].name, "anything");
    df_tool_calls_clear(&c);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    df_tool_calls c;
    assert_int_equal(df_tool_calls_parse("x", NAMES, 2, 0, &c), DF_EINVAL);
    assert_int_equal(c.n_calls, 0);
    assert_int_equal(df_tool_calls_parse(NULL, NAMES, 2, 1, &c), DF_EINVAL);
    df_tool_calls_clear(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_calls),       cmocka_unit_test(test_one_call),
        cmocka_unit_test(test_arguments_forms), cmocka_unit_test(test_parallel_limit),
        cmocka_unit_test(test_malformed),      cmocka_unit_test(test_unterminated),
        cmocka_unit_test(test_names_unchecked), cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
