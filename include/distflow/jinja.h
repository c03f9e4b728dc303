/*
 * distflow/jinja.h — a Jinja2 interpreter for the subset Hugging Face chat
 * templates use (tokenizer_config.json's `chat_template`), rendering as
 * transformers' apply_chat_template does: trim_blocks and lstrip_blocks on,
 * the template's single trailing newline dropped, loop controls (break /
 * continue), `raise_exception(msg)`, `strftime_now(fmt)`, and a `tojson` that
 * keeps non-ASCII text (ensure_ascii=False). docs/chat_templates.md lists the
 * statements, filters, tests and methods, and where the engine differs from
 * Jinja2.
 *
 * Usage: parse once (df_jinja_parse), render many times with a JSON context
 * (df_jinja_render). A parsed template is immutable: renders of one template
 * may run concurrently on several threads.
 */
#ifndef DISTFLOW_JINJA_H
#define DISTFLOW_JINJA_H

#include "distflow/common.h"

#include <stdint.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct df_jinja_template df_jinja_template;

/** Limits and the clock of one render. Zero-initialise for the defaults. */
typedef struct df_jinja_options {
    /** Largest output, bytes; <= 0 means 64 MiB. DF_EINVAL when exceeded. */
    int64_t max_output;
    /** Deepest nesting of macro calls and blocks; <= 0 means 200. DF_EINVAL when exceeded. */
    int max_depth;
    /** Largest memory the render's values may take, bytes; <= 0 means 1 GiB. */
    int64_t max_memory;
    /** Time `strftime_now` formats (local time); 0 means the time of the call. */
    time_t now;
} df_jinja_options;

/**
 * Parse template `source` (UTF-8 Jinja text; NUL-terminated). `name` (may be
 * NULL) prefixes error messages. On a syntax error returns DF_EINVAL with
 * "<name>:<line>:<column>: <problem>" (1-based line and column of the token at
 * fault), e.g. "chat_template:3:12: expected 'endif' to close the 'if' of line 1".
 * Errors: DF_EINVAL (syntax), DF_ENOMEM. *out is NULL on failure.
 */
DF_API int df_jinja_parse(const char *source, const char *name, df_jinja_template **out);

/** Free a parsed template. NULL is a no-op. */
DF_API void df_jinja_free(df_jinja_template *t);

/**
 * Render `t` with the variables of `context_json`, a JSON object (NULL or ""
 * means no variables): each member becomes a global of that name, JSON
 * objects becoming dicts (member order kept), arrays lists, integers ints,
 * reals floats, true/false bools, null none. An undefined name renders as ""
 * and is false, as Jinja's default Undefined; an attribute of an undefined
 * value, an operator on one, or a call of a non-callable is an error.
 * `opts` may be NULL (the defaults). On success *out is the malloc'd,
 * NUL-terminated output (the caller frees it).
 * Errors (*out NULL): DF_EINVAL for a bad context, a runtime error
 * ("<name>:<line>:<column>: <problem>"), `raise_exception(msg)` (the message
 * is "<name>: raise_exception: <msg>"), or a limit of opts exceeded; DF_ENOMEM.
 */
DF_API int df_jinja_render(const df_jinja_template *t, const char *context_json, const df_jinja_options *opts,
                           char **out);

/**
 * Parse `source` and render it once (df_jinja_parse then df_jinja_render).
 * Errors: those of the two calls.
 */
DF_API int df_jinja_render_string(const char *source, const char *name, const char *context_json,
                                  const df_jinja_options *opts, char **out);

#ifdef __cplusplus
}
#endif
#endif /* DISTFLOW_JINJA_H */
