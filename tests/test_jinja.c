/*
 * The Jinja engine (distflow/jinja.h) construct by construct: each case is a
 * template, a JSON context and the exact output Jinja2 gives (trim_blocks and
 * lstrip_blocks on, as transformers renders chat templates); then malformed
 * templates with the expected message and line:column, runtime errors,
 * raise_exception, the limits against runaway templates, and strftime_now.
 */
/* rounding-free (scripts/test-variants.sh skips it): parsing, text and integers only */
#include "distflow/jinja.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

typedef struct render_case {
    const char *tmpl, *ctx, *want;
} render_case;

static void check_cases(const render_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char *out = NULL;
        int rc = df_jinja_render_string(cases[i].tmpl, "t", cases[i].ctx, NULL, &out);
        if (rc != 0 || strcmp(out, cases[i].want) != 0) {
            print_error("case %zu: %s\n  context %s\n  want [%s]\n  got  [%s] (rc %d: %s)\n", i, cases[i].tmpl,
                        cases[i].ctx ? cases[i].ctx : "-", cases[i].want, out ? out : "", rc, df_last_error());
            fail();
        }
        free(out);
    }
}

static void test_text_and_output(void **state)
{
    (void)state;
    static const render_case c[] = {
        {"plain text", NULL, "plain text"},
        {"a{{ x }}b", "{\"x\": 5}", "a5b"},
        {"{{ x }}|{{ y }}|{{ z }}|{{ n }}", "{\"x\": 1.5, \"y\": true, \"z\": null, \"n\": 3.0}", "1.5|True|None|3.0"},
        {"[{{ missing }}]", NULL, "[]"},
        {"{{ 'it''s' }}", NULL, "its"},
        {"{{ \"a\\tb\\n\" }}|{{ '\\u00e9' }}", NULL, "a\tb\n|\xc3\xa9"},
        {"{{ [1, 'a', none] }}|{{ {'k': 'v'} }}", NULL, "[1, 'a', None]|{'k': 'v'}"},
        {"{# a comment #}x", NULL, "x"},
        {"line\n", NULL, "line"},     /* the single trailing newline goes (keep_trailing_newline=False) */
        {"line\n\n", NULL, "line\n"},
    };
    check_cases(c, sizeof c / sizeof c[0]);
}

static void test_whitespace_control(void **state)
{
    (void)state;
    static const render_case c[] = {
        {"a  {{- 'b' -}}  c", NULL, "abc"},
        {"a\n{% if true %}\nb\n{% endif %}\nc", NULL, "a\nb\nc"},        /* trim_blocks */
        {"a\n    {% if true %}\n    b\n    {% endif %}\nc", NULL, "a\n    b\nc"}, /* lstrip_blocks */
        {"a\n    {%+ if true %}b{% endif %}", NULL, "a\n    b"},        /* {%+ keeps the indent */
        {"x  {{ 1 }}\n{{ 2 }}", NULL, "x  1\n2"},                        /* not on {{ }} */
        {"a {# c #}\nb", NULL, "a b"},
        {"a\n  {#- c -#}\n  b", NULL, "ab"},
        {"{%- for i in [1, 2] %}\n  {{- i }}\n{%- endfor %}", NULL, "12"},
    };
    check_cases(c, sizeof c / sizeof c[0]);
}

static void test_expressions(void **state)
{
    (void)state;
    static const render_case c[] = {
        {"{{ 1 + 2 * 3 }}|{{ (1 + 2) * 3 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7 % 3 }}|{{ -7 % 3 }}|{{ 2 ** 10 }}", NULL,
         "7|9|3|-4|1|2|1024"},
        {"{{ 7 / 2 }}|{{ 1 + 0.5 }}|{{ 'ab' * 2 }}|{{ [1] + [2] }}", NULL, "3.5|1.5|abab|[1, 2]"},
        {"{{ 2 ** 62 }}|{{ (-1) ** 63 }}|{{ 0 ** 0 }}|{{ -9223372036854775807 - 1 }}", NULL,
         "4611686018427387904|-1|1|-9223372036854775808"},
        {"{{ 'a' ~ 1 ~ none ~ undefined_thing }}", NULL, "a1None"},
        {"{{ 1 < 2 }}|{{ 'b' > 'a' }}|{{ 1 == 1.0 }}|{{ 1 != 2 }}|{{ [1, 2] == [1, 2] }}", NULL, "True|True|True|True|True"},
        {"{{ 'ell' in 'hello' }}|{{ 3 in [1, 2] }}|{{ 'k' in d }}|{{ 'z' not in d }}", "{\"d\": {\"k\": 1}}",
         "True|False|True|True"},
        {"{{ 0 or 'x' }}|{{ 1 and 'y' }}|{{ not [] }}|{{ none or [] }}", NULL, "x|y|True|[]"},
        {"{{ 'yes' if a else 'no' }}|{{ 'yes' if b else 'no' }}|[{{ 'only' if b }}]", "{\"a\": 1, \"b\": 0}",
         "yes|no|[]"},
        {"{{ m[0]['role'] }}|{{ m[0].role }}|{{ m[-1].content }}|{{ m[5] }}", "{\"m\": [{\"role\": \"u\"}, {\"content\": \"c\"}]}",
         "u|u|c|"},
        {"{{ s[1:3] }}|{{ s[::-1] }}|{{ l[1:] }}|{{ l[:-1] }}|{{ l[::2] }}", "{\"s\": \"hello\", \"l\": [1, 2, 3]}",
         "el|olleh|[2, 3]|[1, 2]|[1, 3]"},
        {"{{ {'a': 1, 'b': [2, 3]}['b'][1] }}|{{ (1, 2)[0] }}", NULL, "3|1"},
        {"{{ -x }}|{{ +x }}|{{ not x }}", "{\"x\": 4}", "-4|4|False"},
        {"{{ 'ü'[0] }}|{{ 'aü'|length }}", NULL, "\xc3\xbc|2"},
    };
    check_cases(c, sizeof c / sizeof c[0]);
}

static void test_statements(void **state)
{
    (void)state;
    static const render_case c[] = {
        {"{% if a %}A{% elif b %}B{% else %}C{% endif %}", "{\"a\": 0, \"b\": 1}", "B"},
        {"{% if a %}A{% elif b %}B{% else %}C{% endif %}", "{\"a\": 0, \"b\": 0}", "C"},
        {"{% for x in xs %}{{ loop.index0 }}{{ loop.index }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
         "{\"xs\": [\"a\", \"b\"]}", "01TrueFalse2;12FalseTrue2;"},
        {"{% for x in xs %}{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }}|{% endfor %}", "{\"xs\": [1, 2, 3]}",
         "<1>2|1<2>3|2<3>|"},
        {"{% for x in xs if x > 1 %}{{ x }}{{ loop.length }}{% endfor %}", "{\"xs\": [1, 2, 3]}", "2232"},
        {"{% for x in [] %}x{% else %}empty{% endfor %}", NULL, "empty"},
        {"{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", "{\"d\": {\"b\": 1, \"a\": 2}}", "b=1;a=2;"},
        {"{% for k in d %}{{ k }}{% endfor %}", "{\"d\": {\"x\": 1, \"y\": 2}}", "xy"},
        {"{% for x in [1, 2, 3, 4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}",
         NULL, "13"},
        {"{% for x in [1, 2] %}{{ loop.cycle('odd', 'even') }}{% endfor %}", NULL, "oddeven"},
        {"{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}", NULL, "1"}, /* loops scope sets */
        {"{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}", NULL, "2"},        /* if does not */
        {"{% set ns = namespace(n=0) %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}", NULL, "6"},
        {"{% set a, b = 1, 2 %}{{ a }}{{ b }}", NULL, "12"},
        {"{% set block %}x{{ 1 + 1 }}y{% endset %}[{{ block }}]", NULL, "[x2y]"},
        {"{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', punct='?') }}",
         NULL, "Hi A! Hi B?"},
        {"{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold{% endcall %}", NULL,
         "<b>bold</b>"},
        {"{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}", NULL, "321"},
        {"{% generation %}gen{% endgeneration %}", NULL, "gen"},
        {"{% for i in range(3) %}{{ i }}{% endfor %}|{% for i in range(5, 0, -2) %}{{ i }}{% endfor %}", NULL, "012|531"},
    };
    check_cases(c, sizeof c / sizeof c[0]);
}

static void test_filters(void **state)
{
    (void)state;
    static const render_case c[] = {
        {"[{{ '  a b \\n' | trim }}]|{{ 'abc' | length }}|{{ [1, 2] | length }}|{{ x | length }}", NULL, "[a b]|3|2|0"},
        {"{{ [3, 4] | first }}{{ [3, 4] | last }}{{ 'xyz' | first }}", NULL, "34x"},
        {"{{ ['a', 'b'] | join(', ') }}|{{ [1, 2] | join }}|{{ us | join('-', attribute='n') }}",
         "{\"us\": [{\"n\": \"p\"}, {\"n\": \"q\"}]}", "a, b|12|p-q"},
        {"{{ 'aBc' | upper }}{{ 'aBc' | lower }}|{{ 'hello world' | title }}|{{ 'hELLO' | capitalize }}", NULL,
         "ABCabc|Hello World|Hello"},
        {"{{ 'a-b-c' | replace('-', '+') }}|{{ 'aaa' | replace('a', 'b', 2) }}", NULL, "a+b+c|bba"},
        {"{{ x | default('d') }}|{{ '' | default('d') }}|{{ '' | default('d', true) }}|{{ none | d('n') }}", NULL, "d||d|None"},
        {"{{ d | items | list }}|{{ 'ab' | list }}|{{ 12 | string ~ 'x' }}", "{\"d\": {\"a\": 1}}", "[['a', 1]]|['a', 'b']|12x"},
        {"{{ '42' | int + 1 }}|{{ 'x' | int }}|{{ 3.9 | int }}|{{ '2.5' | float }}|{{ -3 | abs }}|{{ 2.567 | round(2) }}|{{ 2.5 | round }}",
         NULL, "43|0|3|2.5|3|2.57|2.0"},
        {"{{ '<b>' | safe }}|{{ xs | unique | list }}|{{ xs | reverse | list }}", "{\"xs\": [1, 2, 1]}", "<b>|[1, 2]|[1, 2, 1]"},
        {"{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='c') | join(',') }}|"
         "{{ ms | rejectattr('role', 'equalto', 'user') | map(attribute='c') | join(',') }}|"
         "{{ ms | selectattr('tool') | list | length }}",
         "{\"ms\": [{\"role\": \"user\", \"c\": \"1\"}, {\"role\": \"bot\", \"c\": \"2\", \"tool\": true}, {\"role\": \"user\", \"c\": \"3\"}]}",
         "1,3|2|1"},
        {"{{ [1, 2, 3] | select('odd') | list }}|{{ ['a', 'b'] | map('upper') | list }}", NULL, "[1, 3]|['A', 'B']"},
        {"{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}", NULL, "a\n  b\n\n  c|  a\n  b"},
        {"{{ d | dictsort }}|{{ d | dictsort(reverse=true) | first | first }}", "{\"d\": {\"b\": 1, \"A\": 2}}",
         "[['A', 2], ['b', 1]]|b"},
        {"{{ [3, 1, 2] | sort | list }}", NULL, "[1, 2, 3]"},
    };
    check_cases(c, sizeof c / sizeof c[0]);
}

static void test_tojson(void **state)
{
    (void)state;
    static const render_case c[] = {
        {"{{ v | tojson }}", "{\"v\": {\"b\": [1, 2.5, true, null], \"a\": \"x\\\"\\n\\u0001\"}}",
         "{\"b\": [1, 2.5, true, null], \"a\": \"x\\\"\\n\\u0001\"}"},
        {"{{ 'caf\xc3\xa9 \xf0\x9f\x98\x80' | tojson }}|{{ 'caf\xc3\xa9 \xf0\x9f\x98\x80' | tojson(ensure_ascii=true) }}", NULL,
         "\"caf\xc3\xa9 \xf0\x9f\x98\x80\"|\"caf\\u00e9 \\ud83d\\ude00\""},
        {"{{ v | tojson(indent=2) }}", "{\"v\": {\"a\": [1, {}], \"b\": []}}",
         "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": []\n}"},
        {"{{ v | tojson(sort_keys=true) }}", "{\"v\": {\"b\": 1, \"a\": 2}}", "{\"a\": 2, \"b\": 1}"},
        {"{{ '<&>' | tojson }}", NULL, "\"<&>\""}, /* transformers' tojson does not HTML-escape */
    };
    check_cases(c, sizeof c / sizeof c[0]);
}

static void test_tests_and_methods(void **state)
{
    (void)state;
    static const render_case c[] = {
        {"{{ x is defined }}{{ y is defined }}{{ y is undefined }}{{ n is none }}{{ n is not none }}",
         "{\"x\": 0, \"n\": null}", "TrueFalseTrueTrueFalse"},
        {"{{ 's' is string }}{{ 1 is number }}{{ 1.5 is number }}{{ true is number }}{{ {} is mapping }}{{ [] is iterable }}"
         "{{ 's' is sequence }}{{ true is boolean }}",
         NULL, "TrueTrueTrueTrueTrueTrueTrueTrue"},
        {"{{ true is true }}{{ 1 is true }}{{ false is false }}{{ '' is false }}", NULL, "TrueFalseTrueFalse"},
        {"{{ 3 is odd }}{{ 3 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(4) }}{{ 2 is equalto 2 }}{{ 'a' is eq('a') }}",
         NULL, "TrueFalseTrueFalseTrueTrue"},
        {"[{{ '  x  '.strip() }}][{{ 'xxay'.lstrip('x') }}][{{ 'a\\n\\n'.rstrip('\\n') }}]", NULL, "[x][ay][a]"},
        {"{{ 'a</think>b</think>c'.split('</think>') }}|{{ ' a  b '.split() }}|{{ 'a,b,c'.split(',', 1) }}", NULL,
         "['a', 'b', 'c']|['a', 'b']|['a', 'b,c']"},
        {"{{ 'hello'.startswith('he') }}{{ 'hello'.endswith('lo') }}{{ 'hello'.startswith(('x', 'h')) }}", NULL,
         "TrueTrueTrue"},
        {"{{ 'Ab'.upper() }}{{ 'Ab'.lower() }}{{ 'ab cd'.title() }}{{ 'a-a'.replace('-', '') }}", NULL, "ABabAb Cdaa"},
        {"{{ '{} and {name}'.format(1, name='x') }}|{{ ', '.join(['a', 'b']) }}", NULL, "1 and x|a, b"},
        {"{{ d.get('a') }}|{{ d.get('z') }}|{{ d.get('z', 7) }}|{{ d.keys() | list }}|{{ d.values() | list }}",
         "{\"d\": {\"a\": 1}}", "1|None|7|['a']|[1]"},
        {"{{ messages | length }}{{ add_generation_prompt }}{{ extra }}",
         "{\"messages\": [{}], \"add_generation_prompt\": false, \"extra\": \"kw\"}", "1Falsekw"},
    };
    check_cases(c, sizeof c / sizeof c[0]);
}

typedef struct error_case {
    const char *tmpl, *ctx, *want; /* want: a substring of df_last_error() */
    int code;
} error_case;

static void check_errors(const error_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char *out = (char *)1;
        int rc = df_jinja_render_string(cases[i].tmpl, "tmpl", cases[i].ctx, NULL, &out);
        if (rc != cases[i].code || out != NULL || !strstr(df_last_error(), cases[i].want)) {
            print_error("case %zu: %s\n  want rc %d and [%s]\n  got rc %d and [%s]\n", i, cases[i].tmpl, cases[i].code,
                        cases[i].want, rc, df_last_error());
            fail();
        }
    }
}

static void test_syntax_errors(void **state)
{
    (void)state;
    static const error_case c[] = {
        {"{% if x %}never closed", NULL, "tmpl:1:23: expected 'endif' to close the 'if' of line 1", DF_EINVAL},
        {"a\n{% for x in y %}\n{% endif %}", NULL, "tmpl:3:4: unexpected 'endif'", DF_EINVAL},
        {"{{ 1 + }}", NULL, "tmpl:1:8: expected an expression, got '}}'", DF_EINVAL},
        {"ok\n  {{ x", NULL, "tmpl:2:3: missing '}}' to close the tag opened here", DF_EINVAL},
        {"{{ 'abc }}", NULL, "tmpl:1:4: unterminated string literal", DF_EINVAL},
        {"{% frobnicate %}", NULL, "tmpl:1:4: unknown statement 'frobnicate'", DF_EINVAL},
        {"{# open comment", NULL, "tmpl:1:1: unterminated comment", DF_EINVAL},
        {"{{ a b }}", NULL, "tmpl:1:6: expected '}}', got b", DF_EINVAL},
        {"{% endfor %}", NULL, "tmpl:1:4: unexpected 'endfor' outside of any block", DF_EINVAL},
        {"{{ x ? 1 }}", NULL, "tmpl:1:6: unexpected character '?'", DF_EINVAL},
        {"{% for x %}{% endfor %}", NULL, "tmpl:1:10: expected 'in', got '%}'", DF_EINVAL},
        {"{{ 99999999999999999999 }}", NULL, "tmpl:1:4: integer literal 99999999999999999999 does not fit in 64 bits",
         DF_EINVAL},
        {"{% for x in xs recursive %}{% endfor %}", NULL, "tmpl:1:16: recursive loops are not supported", DF_EINVAL},
    };
    check_errors(c, sizeof c / sizeof c[0]);
}

static void test_runtime_errors(void **state)
{
    (void)state;
    static const error_case c[] = {
        {"{{ raise_exception('Roles must alternate') }}", NULL, "tmpl: raise_exception: Roles must alternate", DF_EINVAL},
        {"\n  {{ missing.attr }}", NULL, "tmpl:2:13: 'missing' is undefined", DF_EINVAL},
        {"{{ 'a' + 1 }}", NULL, "tmpl:1:8: unsupported operand type(s) for +: 'str' and 'int'", DF_EINVAL},
        {"{{ x | nosuchfilter }}", NULL, "unknown filter 'nosuchfilter'", DF_EINVAL},
        {"{{ x is nosuchtest }}", NULL, "unknown test 'nosuchtest'", DF_EINVAL},
        {"{% set x = 1 %}{% set x.a = 2 %}", NULL, "cannot assign attribute on non-namespace object 'x'", DF_EINVAL},
        {"{{ 1 // 0 }}", NULL, "division by zero", DF_EINVAL},
        {"{{ 9223372036854775807 + 1 }}", NULL, "tmpl:1:24: integer overflow in '+' (integers are 64-bit)", DF_EINVAL},
        {"{{ 3 ** 40 }}", NULL, "integer overflow in '**'", DF_EINVAL},
        {"{% for i in range(-9223372036854775807, 9223372036854775807) %}{% endfor %}", NULL,
         "range of more than 10000000 items", DF_EINVAL},
        {"{{ 5() }}", NULL, "'int' object is not callable", DF_EINVAL},
        {"{% set l = [] %}{% set _ = l.append(1) %}", NULL, "tmpl:1:29: access to attribute 'append' of 'list' object is unsafe",
         DF_EINVAL},
        {"{{ x }}", "[1, 2]", "the render context must be a JSON object", DF_EINVAL},
        {"{{ x }}", "{\"x\": ", "context JSON, line 1", DF_EINVAL},
        {"{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", NULL, "(max_depth): runaway recursion?", DF_EINVAL},
    };
    check_errors(c, sizeof c / sizeof c[0]);
}

static void test_limits_and_clock(void **state)
{
    (void)state;
    char *out = NULL;
    df_jinja_options o = {.max_output = 1000};
    assert_int_equal(df_jinja_render_string("{% for i in range(10000) %}xxxxxxxxxx{% endfor %}", "t", NULL, &o, &out),
                     DF_EINVAL);
    assert_null(out);
    assert_non_null(strstr(df_last_error(), "exceeds 1000 bytes (max_output)"));
    /* exactly at the limit is fine, one byte more is not (the check is on every append) */
    o = (df_jinja_options){.max_output = 1024};
    assert_int_equal(df_jinja_render_string("{% for i in range(256) %}abcd{% endfor %}", "t", NULL, &o, &out), 0);
    assert_int_equal(strlen(out), 1024);
    free(out);
    assert_int_equal(df_jinja_render_string("{% for i in range(256) %}abcd{% endfor %}!", "t", NULL, &o, &out), DF_EINVAL);
    assert_null(out);
    o = (df_jinja_options){.max_memory = 1 << 20};
    assert_int_equal(df_jinja_render_string("{% set ns = namespace(s='x') %}{% for i in range(100000) %}"
                                            "{% set ns.s = ns.s ~ 'abcdefgh' %}{% endfor %}",
                                            "t", NULL, &o, &out),
                     DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "max_memory"));
    o = (df_jinja_options){.max_depth = 3};
    assert_int_equal(df_jinja_render_string("{% if 1 %}{% if 1 %}{% if 1 %}{% if 1 %}x{% endif %}{% endif %}{% endif %}{% endif %}",
                                            "t", NULL, &o, &out),
                     DF_EINVAL);
    /* strftime_now formats the clock of the options (local time: use a date far from midnight) */
    setenv("TZ", "UTC", 1);
    o = (df_jinja_options){.now = 1721995200}; /* 2024-07-26 12:00:00 UTC */
    assert_int_equal(df_jinja_render_string("{{ strftime_now('%d %b %Y') }}", "t", NULL, &o, &out), 0);
    assert_string_equal(out, "26 Jul 2024");
    free(out);
    /* one parsed template, many renders with different contexts */
    df_jinja_template *t;
    assert_int_equal(df_jinja_parse("{{ a * 2 }}", "t", &t), 0);
    for (int i = 0; i < 3; i++) {
        char ctx[32], want[16];
        snprintf(ctx, sizeof ctx, "{\"a\": %d}", i);
        snprintf(want, sizeof want, "%d", 2 * i);
        assert_int_equal(df_jinja_render(t, ctx, NULL, &out), 0);
        assert_string_equal(out, want);
        free(out);
    }
    df_jinja_free(t);
    df_jinja_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_and_output),  cmocka_unit_test(test_whitespace_control),
        cmocka_unit_test(test_expressions),      cmocka_unit_test(test_statements),
        cmocka_unit_test(test_filters),          cmocka_unit_test(test_tojson),
        cmocka_unit_test(test_tests_and_methods), cmocka_unit_test(test_syntax_errors),
        cmocka_unit_test(test_runtime_errors),   cmocka_unit_test(test_limits_and_clock),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
