/* Thread-local error messages (see include/distflow/common.h). */
#include "distflow/common.h"
#include "util/warn.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define DF_ERR_CAP 4096
static _Thread_local char g_msg[DF_ERR_CAP];

int df_error(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_msg, sizeof g_msg, fmt, ap);
    va_end(ap);
    return code;
}

int df_error_wrap(int code, const char *fmt, ...)
{
    char ctx[DF_ERR_CAP], old[DF_ERR_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx, sizeof ctx, fmt, ap);
    va_end(ap);
    memcpy(old, g_msg, sizeof old);
    /* Build "<ctx>: <old>" by pieces; truncation at DF_ERR_CAP is intended. */
    size_t n = strnlen(ctx, DF_ERR_CAP - 1);
    memcpy(g_msg, ctx, n);
    if (old[0] && n + 2 < DF_ERR_CAP) {
        memcpy(g_msg + n, ": ", 2);
        n += 2;
        size_t m = strnlen(old, DF_ERR_CAP - 1 - n);
        memcpy(g_msg + n, old, m);
        n += m;
    }
    g_msg[n] = '\0';
    return code;
}

const char *df_last_error(void) { return g_msg; }

void df_clear_error(void) { g_msg[0] = '\0'; }

const char *df_version(void) { return DF_VERSION_STRING; }

void df_warnf(df_warn_fn warn, void *user, const char *fmt, ...)
{
    if (!warn)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    warn(user, msg);
}
