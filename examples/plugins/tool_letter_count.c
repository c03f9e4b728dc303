/*
 * tool_letter_count.c — an example distflow tool plugin (distflow/agent.h): letter_count(word,
 * letter) counts a letter in a word, the question ("how many r in strawberry?") that models answer
 * badly from their tokens. It shows every part of the df_tool lifecycle:
 *   init        reads the tool's `config:` from the tool config YAML (case_sensitive, default false)
 *   create      one trajectory's state (how many calls it made)
 *   execute     the call: the response text, a step reward and metrics
 *   calc_reward the trajectory's reward as the tool sees it (here: -0.1 per call past the third)
 *   release     frees the trajectory's state
 * A tool config names it by its ref:
 *   tools:
 *     - class_name: build/plugins/libtool_letter_count.so:letter_count_tool
 *       config: {type: native, case_sensitive: true}
 * and the class's default schema is used when the entry has no tool_schema.
 */
#define _POSIX_C_SOURCE 200809L /* strdup */

#include <distflow/agent.h>
#include <distflow/dag.h>

#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

DF_PLUGIN_DECLARE_ABI;

typedef struct lc_config {
    int case_sensitive;
} lc_config;

static int lc_init(const char *config_json, void **tool)
{
    json_t *cfg = json_loads(config_json, 0, NULL);
    json_t *cs = json_object_get(cfg, "case_sensitive");
    if (cs && !json_is_boolean(cs)) {
        json_decref(cfg);
        return df_error(DF_EINVAL, "letter_count: config.case_sensitive must be true or false");
    }
    lc_config *c = calloc(1, sizeof *c);
    if (c)
        c->case_sensitive = json_is_true(cs);
    json_decref(cfg);
    *tool = c;
    return c ? DF_OK : df_error(DF_ENOMEM, "out of memory");
}

static void lc_fini(void *tool) { free(tool); }

static int lc_create(const void *tool, const char *instance_id, const char *create_kwargs, void **inst)
{
    (void)tool, (void)instance_id, (void)create_kwargs;
    *inst = calloc(1, sizeof(int)); /* the number of calls */
    return *inst ? DF_OK : df_error(DF_ENOMEM, "out of memory");
}

static int lc_execute(const void *tool, void *inst, const char *arguments, df_tool_result *out)
{
    const lc_config *c = tool;
    json_t *args = json_loads(arguments, 0, NULL);
    const char *word = json_string_value(json_object_get(args, "word"));
    const char *letter = json_string_value(json_object_get(args, "letter"));
    int rc = DF_OK;
    if (!word || !letter || strlen(letter) != 1) {
        rc = df_error(DF_EINVAL, "letter_count needs a string \"word\" and a one-character string \"letter\"");
    } else {
        int n = 0;
        for (const char *p = word; *p; p++)
            n += c->case_sensitive ? *p == *letter : tolower((unsigned char)*p) == tolower((unsigned char)*letter);
        int calls = ++*(int *)inst;
        char text[64], metrics[64];
        snprintf(text, sizeof text, "%d", n);
        snprintf(metrics, sizeof metrics, "{\"calls\": %d}", calls);
        out->text = strdup(text);
        out->metrics = strdup(metrics);
        out->reward = 0.0;
        if (!out->text || !out->metrics)
            rc = df_error(DF_ENOMEM, "out of memory");
    }
    json_decref(args);
    return rc;
}

static int lc_calc_reward(const void *tool, void *inst, double *reward)
{
    (void)tool;
    int calls = *(int *)inst;
    *reward = calls > 3 ? -0.1 * (calls - 3) : 0.0;
    return DF_OK;
}

static void lc_release(const void *tool, void *inst)
{
    (void)tool;
    free(inst);
}

DF_API const df_tool letter_count_tool = {
    .name = "letter_count",
    .schema = "{\"type\": \"function\", \"function\": {\"name\": \"letter_count\", \"description\": \"How many "
              "times a letter occurs in a word.\", \"parameters\": {\"type\": \"object\", \"properties\": "
              "{\"word\": {\"type\": \"string\"}, \"letter\": {\"type\": \"string\", \"description\": \"one "
              "character\"}}, \"required\": [\"word\", \"letter\"]}}}",
    .init = lc_init,
    .fini = lc_fini,
    .create = lc_create,
    .execute = lc_execute,
    .calc_reward = lc_calc_reward,
    .release = lc_release,
};
