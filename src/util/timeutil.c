/* Monotonic and calendar clocks, TTY progress bar (timeutil.h). */
#include "util/timeutil.h"

#include <time.h>
#include <unistd.h>

double df_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

double df_unix_time(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void df_progress_begin(df_progress *p, const char *label, int64_t total)
{
    p->label = label;
    p->total = total;
    p->start = df_now();
    p->last_draw = 0;
    p->enabled = label && isatty(STDERR_FILENO); /* no label: no bar */
}

void df_progress_update(df_progress *p, int64_t done, const char *extra)
{
    if (!p->enabled)
        return;
    double t = df_now();
    if (t - p->last_draw < 0.1 && done < p->total)
        return;
    p->last_draw = t;
    const int width = 30;
    int fill = p->total > 0 ? (int)(width * (double)done / (double)p->total) : 0;
    if (fill > width)
        fill = width;
    char bar[64];
    for (int i = 0; i < width; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[width] = '\0';
    fprintf(stderr, "\r\033[K%-14s [%s] %lld/%lld %.1fs %s", p->label, bar, (long long)done,
            (long long)p->total, t - p->start, extra ? extra : "");
    fflush(stderr);
}

void df_progress_end(df_progress *p)
{
    if (!p->enabled)
        return;
    fprintf(stderr, "\r\033[K");
    fflush(stderr);
}
