/*
 * distflow/common.h — status codes, error reporting and export macros shared by
 * every public header.
 *
 * Convention (docs/conventions.md §1): every fallible function returns an int status, 0 on
 * success, one of the DF_E* codes otherwise, and leaves a human-readable message
 * (naming the file, the place and the problem) retrievable with df_last_error().
 * Library code never prints errors itself and never calls exit().
 */
#ifndef DISTFLOW_COMMON_H
#define DISTFLOW_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define DF_API __attribute__((visibility("default")))
#define DF_PRINTF(fmt_idx, first) __attribute__((format(printf, fmt_idx, first)))
#else
#define DF_API
#define DF_PRINTF(fmt_idx, first)
#endif

/** Status codes. 0 is success; every other value is an error class. */
enum {
    DF_OK = 0,
    DF_EINVAL = 1,       /**< bad input from the user: config, file contents, arguments */
    DF_EIO = 2,          /**< the operating system refused a read / write / open */
    DF_ENOMEM = 3,       /**< allocation failed */
    DF_ENOTFOUND = 4,    /**< a named thing (file, key, column, node) does not exist */
    DF_EUNSUPPORTED = 5, /**< valid input that this build cannot handle (e.g. dtype) */
    DF_EINTERNAL = 6,    /**< a library (oneDNN, PCRE2, ...) failed unexpectedly */
    DF_ERETRY = 7,       /**< a node failed in a way that may succeed if run again */
    DF_ESTOPPED = 8      /**< stopped on request (a signal) at a step boundary; not a failure of the run */
};

/**
 * Set the calling thread's error message (printf-style) and return `code`, so
 * callers can write `return df_error(DF_EINVAL, "%s:%d: ...", file, line);`.
 * The message is truncated at 4096 bytes.
 */
DF_API int df_error(int code, const char *fmt, ...) DF_PRINTF(2, 3);

/**
 * Prepend context to the current message ("<context>: <old message>") and
 * return `code`. Used when an error travels up through layers, e.g.
 * `return df_error_wrap(rc, "loading model %s", dir);`.
 */
DF_API int df_error_wrap(int code, const char *fmt, ...) DF_PRINTF(2, 3);

/** The calling thread's last error message ("" when none). Never NULL. */
DF_API const char *df_last_error(void);

/** Clear the calling thread's error message. */
DF_API void df_clear_error(void);

/**
 * Receives one warning: a complete sentence naming where the problem is
 * (file:line, node, `key=value (where)`). Library code never prints, so the
 * config validator and the workflow loader hand warnings to the caller
 * through this; `user` is the pointer passed along with it.
 */
typedef void (*df_warn_fn)(void *user, const char *message);

/** Library version string, e.g. "0.1.0". */
DF_API const char *df_version(void);

#ifdef __cplusplus
}
#endif
#endif /* DISTFLOW_COMMON_H */
