/* Limits on YAML text before parsing (yaml_guard.h). */
#include "config/yaml_guard.h"

#include "distflow/common.h"

#include <stdbool.h>

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
