/*
 * Tool plugins (distflow/agent.h, distflow/dag.h df_plugin_tool): the example plugin
 * examples/plugins/tool_letter_count.c named by its ref in a tool config, loaded through the plan's
 * plugin loader, run through a session with every part of its lifecycle (config, per-trajectory
 * state, metrics, calc_reward), and removed from the registry when the plugins are unloaded.
 */
#include "distflow/agent.h"
#include "distflow/dag.h"

#include "testutil.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define REF DF_PLUGIN_DIR "/libtool_letter_count.so:letter_count_tool"

static char *write_config(const char *dir, const char *body)
{
    char *path = malloc(strlen(dir) + 16);
    sprintf(path, "%s/tools.yaml", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(body, f);
    fclose(f);
    return path;
}

static void call(df_tool_session *s, const char *args, const char *text, const char *metrics)
{
    df_tool_call c = {.name = "letter_count", .arguments = (char *)args};
    df_tool_result r;
    assert_int_equal(df_tool_session_execute(s, &c, &r), DF_OK);
    assert_string_equal(r.text, text);
    if (metrics)
        assert_string_equal(r.metrics, metrics);
    else
        assert_null(r.metrics);
    df_tool_result_clear(&r);
}

static void test_plugin_tool(void **state)
{
    char *path = write_config(*state, "tools:\n  - class_name: " REF "\n    config: {type: native, case_sensitive: true}\n"
                                      "  - class_name: calculator\n");
    df_tool_set *set = NULL;
    if (df_tool_set_load(path, df_plugin_tool, &set))
        fail_msg("%s", df_last_error());
    assert_int_equal(df_tool_set_size(set), 2);
    assert_string_equal(df_tool_set_names(set)[0], "letter_count");
    const df_tool *t = NULL;
    assert_int_equal(df_tool_class_lookup(REF, &t), DF_OK);
    assert_string_equal(t->name, REF);

    df_tool_session *s = NULL;
    assert_int_equal(df_tool_session_create(set, "traj", NULL, &s), DF_OK);
    call(s, "{\"word\": \"Strawberry\", \"letter\": \"r\"}", "3", "{\"calls\": 1}");
    call(s, "{\"word\": \"Strawberry\", \"letter\": \"s\"}", "0", "{\"calls\": 2}"); /* case-sensitive */
    call(s, "{\"word\": \"x\"}", "Error when executing tool: letter_count needs a string \"word\" and a one-character "
                                 "string \"letter\"",
         NULL);
    call(s, "{\"word\": \"a\", \"letter\": \"a\"}", "1", "{\"calls\": 3}");
    double reward = 1;
    assert_int_equal(df_tool_session_reward(s, 0, &reward), DF_OK);
    assert_near(reward, 0.0, 0);
    call(s, "{\"word\": \"a\", \"letter\": \"a\"}", "1", "{\"calls\": 4}");
    assert_int_equal(df_tool_session_reward(s, 0, &reward), DF_OK);
    assert_near(reward, -0.1, 1e-12);
    df_tool_session_free(s);
    df_tool_set_free(set);

    /* a bad config is the plugin's init error, wrapped with the file and the entry */
    free(path);
    path = write_config(*state, "tools:\n  - class_name: " REF "\n    config: {type: native, case_sensitive: 1}\n");
    assert_error_mentions(df_tool_set_load(path, df_plugin_tool, &set), DF_EINVAL,
                          "tools[0] (class_name '" REF "'): tool 'letter_count' (class '" REF "'): init: "
                          "letter_count: config.case_sensitive must be true or false");
    free(path);

    /* unloading the plugin takes its class out of the registry */
    df_exec_unload_plugins();
    assert_int_equal(df_tool_class_lookup(REF, &t), DF_ENOTFOUND);
}

static void test_plugin_errors(void **state)
{
    (void)state;
    assert_error_mentions(df_plugin_tool("calculator"), DF_EINVAL, "not a plugin ref");
    assert_int_equal(df_plugin_tool(DF_PLUGIN_DIR "/libnone.so:x"), DF_ENOTFOUND);
    /* a symbol that is not a df_tool (a function of another plugin) */
    int rc = df_plugin_tool(DF_PLUGIN_DIR "/libreward_length.so:compute_length_reward");
    assert_int_not_equal(rc, DF_OK);
    assert_last_error_mentions("compute_length_reward");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_plugin_tool, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test(test_plugin_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
