/* timeutil.h (internal) — monotonic and calendar clocks and a TTY progress bar. */
#ifndef DF_UTIL_TIMEUTIL_H
#define DF_UTIL_TIMEUTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/** Seconds from a monotonic clock. */
double df_now(void);
/** Calendar time: seconds since the Unix epoch (UTC), with sub-second digits; for timestamps in logs. */
double df_unix_time(void);

/**
 * A one-line progress bar on stderr, drawn only when stderr is a terminal
 * (so logs and CI output stay clean). Redraws at most ~10 times a second.
 */
typedef struct df_progress {
    const char *label;
    int64_t total;
    double start, last_draw;
    bool enabled;
} df_progress;

/* Start a bar; it draws only on a TTY and only with a label (NULL: none). */
void df_progress_begin(df_progress *p, const char *label, int64_t total);
/** `extra` (may be NULL) is printed after the counts, e.g. "1234 tok/s". */
void df_progress_update(df_progress *p, int64_t done, const char *extra);
void df_progress_end(df_progress *p);

#endif
