/*
 * test_yaml_json.c — the one YAML -> JSON walker (src/config/yaml_json.h) and the guarded load
 * every YAML reader goes through (src/config/yaml_guard.h, df_yaml_load).
 *
 * Scalar typing (YAML 1.2 core plus 1.1's yes / no / on / off and `_`, as the config loader and
 * OmegaConf read them; quoted scalars are strings), anchors and aliases, `<<` merge keys, the
 * bounds that stop an alias cycle and an alias bomb, and errors at name:line:col. The callers
 * agree: a tool config file (df_yaml_file_json) and a config map value (df_config_map_json) give
 * the same JSON for the same mapping.
 */
/* rounding-free (scripts/test-variants.sh skips it): parsing, text and integers only */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "config/yaml_guard.h"
#include "config/yaml_json.h"
#include "distflow/config.h"
#include "testutil.h"
#include "util/fsutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* `text` converted whole; its compact JSON (malloc'd), or NULL with the error set. */
static char *convert(const char *text, int *rc_out)
{
    yaml_document_t doc;
    json_t *j = NULL;
    char *out = NULL;
    int rc = df_yaml_load(text, strlen(text), "t.yaml", DF_YAML_FILE, &doc);
    if (!rc) {
        yaml_node_t *root = yaml_document_get_root_node(&doc);
        assert_non_null(root);
        rc = df_yaml_node_json(&doc, root, "t.yaml", &j);
        if (rc)
            assert_null(j);
        yaml_document_delete(&doc);
    }
    if (!rc) {
        out = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
        assert_non_null(out);
    }
    json_decref(j);
    if (rc_out)
        *rc_out = rc;
    return out;
}

static void expect_json(const char *text, const char *want)
{
    int rc;
    char *got = convert(text, &rc);
    if (rc)
        fail_msg("'%s' failed: %s", text, df_last_error());
    if (strcmp(got, want))
        fail_msg("'%s' gave %s, expected %s", text, got, want);
    free(got);
}

static void expect_error(const char *text, int code, const char *msg)
{
    int rc;
    char *got = convert(text, &rc);
    if (!rc)
        fail_msg("'%.200s' was accepted as %.200s", text, got);
    assert_error_mentions(rc, code, msg);
}

/* Every plain scalar form against the JSON type it must become; quoted ones stay strings. */
static void test_scalar_typing(void **state)
{
    (void)state;
    static const struct {
        const char *yaml, *json;
    } cases[] = {
        {"", "null"},
        {"~", "null"},
        {"null", "null"},
        {"Null", "null"},
        {"NULL", "null"},
        {"nULL", "\"nULL\""}, /* YAML spells null three ways only */
        {"true", "true"},
        {"False", "false"},
        {"TRUE", "true"},
        {"yes", "true"},
        {"No", "false"},
        {"on", "true"},
        {"OFF", "false"},
        {"y", "\"y\""},
        {"0", "0"},
        {"-5", "-5"},
        {"+7", "7"},
        {"0123", "123"},
        {"0x1F", "31"},
        {"0o17", "15"},
        {"1_000", "1000"},
        {"9223372036854775807", "9223372036854775807"},
        {"-9223372036854775808", "-9223372036854775808"},
        {"1234567890123456789", "1234567890123456789"}, /* 19 digits: still an integer, exactly */
        {"1.5", "1.5"},
        {"-2.5e-1", "-0.25"},
        {"1e5", "100000.0"},
        {".5", "0.5"},
        {"5.", "5.0"},
        {"1_000.5", "1000.5"},
        {"1e400", "\"1e400\""}, /* beyond a double: text, not inf */
        {".inf", "\".inf\""},
        {"-.inf", "\"-.inf\""},
        {".nan", "\".nan\""}, /* JSON has no inf / nan */
        {"1.2.3", "\"1.2.3\""},
        {"0x", "\"0x\""},
        {"+", "\"+\""},
        {"1_", "\"1_\""},
        {"abc", "\"abc\""},
        {"\"true\"", "\"true\""},
        {"'3'", "\"3\""},
        {"\"\"", "\"\""},
        {"'null'", "\"null\""},
        {"\"a\\0b\"", "\"a\\u0000b\""}, /* a NUL inside a quoted value is kept, whole */
        {"|\n  1\n", "\"1\\n\""},       /* a block scalar is text */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char text[128];
        snprintf(text, sizeof text, "v: %s", cases[i].yaml);
        char want[128];
        snprintf(want, sizeof want, "{\"v\":%s}", cases[i].json);
        expect_json(text, want);
    }
    /* the predicates the config and workflow loaders type their fields with */
    yaml_document_t doc;
    assert_int_equal(df_yaml_load("[~, '~', yes, 'yes', [x]]", strlen("[~, '~', yes, 'yes', [x]]"), "p",
                                  DF_YAML_VALUE, &doc),
                     DF_OK);
    yaml_node_t *seq = yaml_document_get_root_node(&doc);
    yaml_node_t *it[5];
    for (int i = 0; i < 5; i++)
        it[i] = yaml_document_get_node(&doc, seq->data.sequence.items.start[i]);
    assert_true(df_yaml_is_null(it[0]));
    assert_false(df_yaml_is_null(it[1]));
    assert_false(df_yaml_is_null(it[4]));
    assert_false(df_yaml_is_null(NULL));
    bool b = false;
    assert_true(df_yaml_bool(it[2], &b) && b);
    b = false;
    assert_false(df_yaml_bool(it[3], &b) || b);
    assert_false(df_yaml_bool(it[4], &b));
    yaml_document_delete(&doc);
}

static void test_anchors_aliases_merges(void **state)
{
    (void)state;
    expect_json("base: &b {x: 1, l: [a, 2]}\nuse: *b\nlist: &l [1, 2]\nagain: [*l, *l]\n",
                "{\"base\":{\"x\":1,\"l\":[\"a\",2]},\"use\":{\"x\":1,\"l\":[\"a\",2]},\"list\":[1,2],"
                "\"again\":[[1,2],[1,2]]}");
    /* a merge: the mapping's own keys win wherever they stand; merged keys take the place of `<<` */
    expect_json("a: &a {x: 1, y: 2}\nm:\n  z: 0\n  <<: *a\n  x: 9\n",
                "{\"a\":{\"x\":1,\"y\":2},\"m\":{\"z\":0,\"y\":2,\"x\":9}}");
    /* a list of sources: earlier ones win; a source's own merge is applied first */
    expect_json("a: &a {x: 1}\nb: &b {<<: *a, x: 2, y: 2}\nm: {<<: [*b, *a], w: 3}\n",
                "{\"a\":{\"x\":1},\"b\":{\"x\":2,\"y\":2},\"m\":{\"x\":2,\"y\":2,\"w\":3}}");
    expect_json("a: &a {x: 1}\nm: {<<: [*a, {x: 5, q: 6}]}\n", "{\"a\":{\"x\":1},\"m\":{\"x\":1,\"q\":6}}");
    /* a quoted "<<" is an ordinary key */
    expect_json("m: {\"<<\": {x: 1}}\n", "{\"m\":{\"<<\":{\"x\":1}}}");
    expect_error("m:\n  <<: 3\n", DF_EINVAL,
                 "t.yaml:2:3: '<<' takes a mapping or a list of mappings, got a scalar");
    expect_error("m:\n  <<: [{a: 1}, [2]]\n", DF_EINVAL,
                 "t.yaml:2:16: '<<' takes a mapping or a list of mappings, got a list holding a list");
}

/* An alias of its own ancestor recurses forever without the depth bound; aliases of aliases
   multiply (10 ^ 7 leaves here from a few hundred bytes) without the node bound. */
static void test_bounds(void **state)
{
    (void)state;
    expect_error("a: &x [*x]\n", DF_EINVAL, "nested deeper than 64 levels (or an alias refers to itself)");
    char bomb[1024] = "l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n";
    for (int i = 1; i <= 6; i++) {
        char line[128];
        snprintf(line, sizeof line,
                 "l%d: &l%d [*l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d]\n", i, i, i - 1,
                 i - 1, i - 1, i - 1, i - 1, i - 1, i - 1, i - 1, i - 1, i - 1);
        strcat(bomb, line);
    }
    expect_error(bomb, DF_EINVAL, "more than 2^20 values once aliases are expanded");
    /* 10^5 leaves fit under the bound: the bound is on the expansion, not on aliases */
    bomb[strstr(bomb, "l5:") - bomb] = '\0';
    int rc;
    char *ok = convert(bomb, &rc);
    assert_int_equal(rc, DF_OK);
    free(ok);

    /* a long string behind many aliases: 300 copies of 64 KiB pass the node bound but not the
       16 MiB one on the text they expand to; 200 copies (12.5 MiB) fit */
    for (int copies = 200; copies <= 300; copies += 100) {
        size_t cap = 65536 + 16 + 4 * (size_t)copies + 8;
        char *text = malloc(cap);
        assert_non_null(text);
        size_t n = (size_t)sprintf(text, "s: &s ");
        memset(text + n, 'x', 65536);
        n += 65536;
        n += (size_t)sprintf(text + n, "\nl: [");
        for (int i = 0; i < copies; i++)
            n += (size_t)sprintf(text + n, "*s, ");
        sprintf(text + n, "]\n");
        if (copies == 200) {
            free(convert(text, &rc));
            assert_int_equal(rc, DF_OK);
        } else {
            expect_error(text, DF_EINVAL, "t.yaml:1:4: "); /* an alias is its anchored node */
            assert_last_error_mentions("more than 16 MiB of text once aliases are expanded");
        }
        free(text);
    }

    /* depth: the root is level 0; 64 nested block mappings (a scalar at level 64) pass, 65 fail */
    for (int levels = 64; levels <= 65; levels++) {
        char *text = calloc((size_t)levels * (size_t)(2 * levels + 8), 1);
        size_t n = 0;
        for (int i = 0; i < levels; i++)
            n += (size_t)sprintf(text + n, "%*sk:%s", 2 * i, "", i + 1 < levels ? "\n" : " v\n");
        if (levels == 64) {
            char *got = convert(text, &rc);
            assert_int_equal(rc, DF_OK);
            assert_non_null(strstr(got, "{\"k\":\"v\"}"));
            free(got);
        } else {
            expect_error(text, DF_EINVAL, "t.yaml:65:132: nested deeper than 64 levels");
        }
        free(text);
    }
}

static void test_located_errors(void **state)
{
    (void)state;
    expect_error("a: 1\nb:\n  c: 2\n  c: 3\n", DF_EINVAL,
                 "t.yaml:4:3: the key 'c' appears twice in one mapping");
    expect_error("a: &m {x: 1}\nb: {x: 2, <<: *m, x: 3}\n", DF_EINVAL,
                 "t.yaml:2:19: the key 'x' appears twice");
    expect_error("? [1]\n: 2\n", DF_EINVAL, "t.yaml:1:3: a mapping key that is not a scalar");
    expect_error("\"a\\0b\": 1\n", DF_EINVAL, "t.yaml:1:1: a mapping key containing a NUL character");
    /* syntax: libyaml's problem at the line and column of the text */
    expect_error("a: 1\n b: 2\n", DF_EINVAL, "t.yaml:2:3: mapping values are not allowed in this context");
    expect_error("a: [1, 2\nb: 3\n", DF_EINVAL, "t.yaml:");
    expect_error("a: 1\n---\nb: 2\n", DF_EINVAL, "t.yaml:3: only one YAML document is allowed");
    expect_error("a: \"\xff\"\n", DF_EINVAL, "t.yaml: invalid leading UTF-8 octet (byte 4)");
    /* a one-line value names the column only */
    yaml_document_t doc;
    assert_error_mentions(
        df_yaml_load("{a: 1", 5, "command line: 'x={a: 1'", DF_YAML_VALUE, &doc), DF_EINVAL,
        "command line: 'x={a: 1': did not find expected ',' or '}' at the end of the value");
}

/* dir/name holding `text`, its path in buf. */
static const char *put(const char *dir, const char *name, const char *text, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/%s", dir, name);
    assert_int_equal(df_write_file_atomic(buf, text, strlen(text)), DF_OK);
    return buf;
}

/* A file (the agent's reader) and a config map value (df_config_map_json) type alike: one walker. */
static void test_callers_agree(void **state)
{
    const char *flow = "{n: 3, f: 0.5, b: yes, s: \"true\", z: ~, h: 0x10, u: 1_000, l: [a, 2], "
                       "m: {<<: {x: 1}, y: 2}, e: .inf}";
    const char *want =
        "{\"n\":3,\"f\":0.5,\"b\":true,\"s\":\"true\",\"z\":null,\"h\":16,\"u\":1000,\"l\":[\"a\",2],"
        "\"m\":{\"x\":1,\"y\":2},\"e\":\".inf\"}";
    char path[512];
    json_t *j = NULL;
    assert_int_equal(df_yaml_file_json(put(*state, "c.yaml", flow, path, sizeof path), &j), DF_OK);
    char *got = json_dumps(j, JSON_COMPACT);
    assert_string_equal(got, want);
    free(got);
    json_decref(j);
    assert_int_equal(df_config_map_json(flow, &got), DF_OK);
    assert_string_equal(got, want);
    free(got);

    /* the file reader's own errors */
    j = (json_t *)1;
    assert_error_mentions(df_yaml_file_json(put(*state, "empty.yaml", "# nothing\n", path, sizeof path), &j),
                          DF_EINVAL, "empty.yaml: empty YAML document");
    assert_null(j);
    assert_error_mentions(
        df_yaml_file_json(put(*state, "bad.yaml", "tools:\n  - a: 1\n    a: 2\n", path, sizeof path), &j),
        DF_EINVAL, "bad.yaml:3:5: the key 'a' appears twice");
    assert_int_equal(df_yaml_file_json("/nonexistent/t.yaml", &j), DF_ENOTFOUND);
    /* a map value with a key twice is refused, not cut to one of them */
    assert_error_mentions(df_config_map_json("{a: 1, a: 2}", &got), DF_EINVAL, "the key 'a' appears twice");
    assert_null(got);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scalar_typing),
        cmocka_unit_test(test_anchors_aliases_merges),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_located_errors),
        cmocka_unit_test_setup_teardown(test_callers_agree, df_test_mkdtemp, df_test_rmtree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
