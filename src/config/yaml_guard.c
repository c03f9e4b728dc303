/* Limits on YAML text before parsing, and the guarded load of one document (yaml_guard.h). */
#include "config/yaml_guard.h"

#include "distflow/common.h"
#include "util/fsutil.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

/* A quote opens a quoted scalar only where a token starts: after a separator or at a line start
   (an apostrophe inside a plain scalar such as "don't" does not). */
static bool token_start(const char *text, size_t i)
{
    while (i > 0 && (text[i - 1] == ' ' || text[i - 1] == '\t'))
        i--;
    if (i == 0)
        return true;
    char p = text[i - 1];
    return p == '\n' || p == ':' || p == ',' || p == '[' || p == '{' || p == '-' || p == '?';
}

int df_yaml_check_text(const char *text, size_t len, const char *name)
{
    if (len > DF_YAML_MAX_BYTES)
        return df_error(DF_EINVAL, "%s: %zu bytes, more than the %zu a YAML file may have", name, len,
                        DF_YAML_MAX_BYTES);
    int depth = 0;
    size_t line = 1;
    char quote = 0;
    bool comment = false;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (c == '\n') {
            line++, comment = false;
        } else if (comment) {
            continue;
        } else if (quote) {
            if (quote == '"' && c == '\\' && i + 1 < len && text[i + 1] != '\n')
                i++;
            else if (c == quote)
                quote = 0;
        } else if (c == '#' && (i == 0 || text[i - 1] == ' ' || text[i - 1] == '\t' || text[i - 1] == '\n')) {
            comment = true;
        } else if ((c == '"' || c == '\'') && token_start(text, i)) {
            quote = c;
        } else if ((c == '[' || c == '{') && ++depth > DF_YAML_MAX_FLOW_DEPTH) {
            return df_error(DF_EINVAL, "%s:%zu: flow collections ([ ] / { }) nested deeper than %d levels", name,
                            line, DF_YAML_MAX_FLOW_DEPTH);
        } else if ((c == ']' || c == '}') && depth > 0) {
            depth--;
        }
    }
    return DF_OK;
}

static int parser_error(const yaml_parser_t *p, const char *name, df_yaml_source src, size_t len)
{
    int code = p->error == YAML_MEMORY_ERROR ? DF_ENOMEM : DF_EINVAL;
    const char *problem = p->problem ? p->problem : "invalid YAML";
    if (p->error == YAML_READER_ERROR) /* no line / column: the reader works on bytes */
        return df_error(code, "%s: %s (byte %zu)", name, problem, p->problem_offset);
    char ctx[160] = "";
    if (p->context)
        snprintf(ctx, sizeof ctx, " (%s at line %zu)", p->context, p->context_mark.line + 1);
    if (src == DF_YAML_FILE)
        return df_error(code, "%s:%zu:%zu: %s%s", name, p->problem_mark.line + 1, p->problem_mark.column + 1,
                        problem, ctx);
    if (p->problem_mark.index >= len) /* an override value is one line */
        return df_error(code, "%s: %s at the end of the value%s", name, problem, ctx);
    return df_error(code, "%s: %s at column %zu%s", name, problem, p->problem_mark.column + 1, ctx);
}

int df_yaml_load(const char *text, size_t len, const char *name, df_yaml_source src, yaml_document_t *doc)
{
    int rc = df_yaml_check_text(text, len, name);
    if (rc)
        return rc;
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p))
        return df_error(DF_ENOMEM, "%s: out of memory", name);
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    if (!yaml_parser_load(&p, doc)) {
        rc = parser_error(&p, name, src, len);
        yaml_parser_delete(&p);
        return rc;
    }
    /* A second document would be dropped without a word: refuse it, as PyYAML's load does. */
    yaml_document_t extra;
    if (!yaml_parser_load(&p, &extra)) {
        rc = parser_error(&p, name, src, len);
    } else {
        yaml_node_t *r = yaml_document_get_root_node(&extra);
        if (r)
            rc = src == DF_YAML_FILE ? df_error(DF_EINVAL, "%s:%zu: only one YAML document is allowed", name,
                                                r->start_mark.line + 1)
                                     : df_error(DF_EINVAL, "%s: expected a single YAML value", name);
        yaml_document_delete(&extra);
    }
    yaml_parser_delete(&p);
    if (rc)
        yaml_document_delete(doc);
    return rc;
}

int df_yaml_load_file(const char *path, yaml_document_t *doc)
{
    char *text = NULL;
    size_t len = 0;
    int rc = df_read_file(path, &text, &len);
    if (rc)
        return rc;
    rc = df_yaml_load(text, len, path, DF_YAML_FILE, doc);
    free(text);
    return rc;
}
