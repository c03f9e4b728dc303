/* Hermes tool calls (include/distflow/agent.h, df_tool_calls_parse): the `<tool_call>{json}</tool_call>`
 * blocks of a model turn, as verl's HermesToolParser (verl/experimental/agent_loop/tool_parser.py) finds
 * them with `<tool_call>(.*?)</tool_call>`: the first closing tag after an opening one ends the block.
 * Where verl logs and drops a malformed block, the call carries the message the model gets back. */
#include "distflow/agent.h"

#include "agent/agent_internal.h"
#include "util/sbuf.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OPEN_TAG "<tool_call>"
#define CLOSE_TAG "</tool_call>"

char *agent_tool_error(const char *fmt, ...)
{
    df_sbuf b = {0};
    df_sbuf_puts(&b, AGENT_TOOL_ERROR_PREFIX);
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    df_sbuf_puts(&b, msg);
    char *out = NULL;
    return df_sbuf_finish(&b, &out) ? NULL : out;
}

void df_tool_calls_clear(df_tool_calls *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n_calls; i++) {
        free(c->calls[i].name);
        free(c->calls[i].arguments);
        free(c->calls[i].error);
    }
    free(c->calls);
    free(c->content);
    memset(c, 0, sizeof *c);
}

static bool name_known(const char *name, const char *const *names, int n)
{
    if (!names)
        return true;
    for (int i = 0; i < n; i++)
        if (names[i] && !strcmp(names[i], name))
            return true;
    return false;
}

static char *known_list(const char *const *names, int n)
{
    df_sbuf b = {0};
    for (int i = 0; i < n; i++) {
        df_sbuf_puts(&b, i ? ", " : "");
        df_sbuf_puts(&b, names[i] ? names[i] : "(null)");
    }
    if (!n)
        df_sbuf_puts(&b, "none");
    char *out = NULL;
    return df_sbuf_finish(&b, &out) ? NULL : out;
}

/* The arguments value as an object: an object itself, absent ({}), or a string that holds one. */
static json_t *arguments_object(json_t *args, const char **why)
{
    if (!args)
        return json_object();
    if (json_is_object(args))
        return json_incref(args);
    if (json_is_string(args)) {
        json_error_t e;
        json_t *inner = json_loadb(json_string_value(args), json_string_length(args), JSON_DECODE_ANY, &e);
        if (inner && json_is_object(inner))
            return inner;
        json_decref(inner);
        *why = "are a string that does not hold a JSON object";
        return NULL;
    }
    *why = "are not a JSON object";
    return NULL;
}

/* Fill `call` from one block's inner text [len]. Only allocation failures are errors. */
static int parse_block(const char *inner, size_t len, const char *const *names, int n_names, df_tool_call *call)
{
    json_error_t e;
    json_t *root = json_loadb(inner, len, JSON_DECODE_ANY, &e);
    const char *why = NULL;
    if (!root) {
        call->error = agent_tool_error("the tool call is not valid JSON (%s, at character %d of the block)",
                                       e.text, e.position);
    } else if (!json_is_object(root)) {
        call->error = agent_tool_error("the tool call is not a JSON object {\"name\": ..., \"arguments\": {...}}");
    } else if (!json_is_string(json_object_get(root, "name"))) {
        call->error = agent_tool_error("the tool call has no string \"name\"");
    } else {
        const char *name = json_string_value(json_object_get(root, "name"));
        json_t *args = NULL;
        if (!name_known(name, names, n_names)) {
            char *known = known_list(names, n_names);
            call->error = known ? agent_tool_error("unknown tool '%s' (the tools are: %s)", name, known) : NULL;
            free(known);
        } else if (!(args = arguments_object(json_object_get(root, "arguments"), &why))) {
            call->error = why ? agent_tool_error("the arguments of '%s' %s", name, why) : NULL;
        } else {
            call->name = strdup(name);
            call->arguments = json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER);
            json_decref(args);
            if (!call->name || !call->arguments) {
                free(call->name);
                free(call->arguments);
                call->name = call->arguments = NULL;
                json_decref(root);
                return df_error(DF_ENOMEM, "out of memory");
            }
        }
    }
    json_decref(root);
    return call->name || call->error ? DF_OK : df_error(DF_ENOMEM, "out of memory");
}

/* Append a call slot to out (calls grows by one). */
static df_tool_call *add_call(df_tool_calls *out, int *cap)
{
    if (out->n_calls == *cap) {
        int nc = *cap ? 2 * *cap : 4;
        df_tool_call *p = realloc(out->calls, (size_t)nc * sizeof *p);
        if (!p)
            return NULL;
        out->calls = p;
        *cap = nc;
    }
    df_tool_call *c = &out->calls[out->n_calls++];
    memset(c, 0, sizeof *c);
    return c;
}

int df_tool_calls_parse(const char *text, const char *const *tool_names, int n_names, int max_parallel_calls,
                        df_tool_calls *out)
{
    if (!out)
        return df_error(DF_EINVAL, "df_tool_calls_parse: NULL output");
    memset(out, 0, sizeof *out);
    if (!text)
        return df_error(DF_EINVAL, "df_tool_calls_parse: NULL text");
    if (max_parallel_calls < 1)
        return df_error(DF_EINVAL, "df_tool_calls_parse: max_parallel_calls is %d, must be >= 1",
                        max_parallel_calls);
    df_sbuf content = {0};
    int cap = 0, rc = DF_OK;
    const char *p = text;
    while (!rc) {
        const char *open = strstr(p, OPEN_TAG);
        if (!open) {
            df_sbuf_puts(&content, p);
            break;
        }
        df_sbuf_put(&content, p, (size_t)(open - p));
        const char *inner = open + strlen(OPEN_TAG);
        const char *close = strstr(inner, CLOSE_TAG);
        bool keep = out->n_calls < max_parallel_calls;
        if (!keep)
            out->n_dropped++;
        df_tool_call *c = keep ? add_call(out, &cap) : NULL;
        if (keep && !c) {
            rc = df_error(DF_ENOMEM, "out of memory");
        } else if (!close) {
            if (c && !(c->error = agent_tool_error("a " OPEN_TAG " block has no closing " CLOSE_TAG)))
                rc = df_error(DF_ENOMEM, "out of memory");
            break;
        } else if (c) {
            rc = parse_block(inner, (size_t)(close - inner), tool_names, n_names, c);
        }
        if (close)
            p = close + strlen(CLOSE_TAG);
    }
    if (!rc && df_sbuf_finish(&content, &out->content))
        rc = df_error(DF_ENOMEM, "out of memory");
    if (rc) {
        df_sbuf_free(&content);
        df_tool_calls_clear(out);
    }
    return rc;
}
