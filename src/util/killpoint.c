/* Test-only crash injection: DF_TEST_KILL_AT / DF_TEST_KILL_COUNTS (killpoint.h). */
#include "util/killpoint.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const EVENTS[] = {"gen", "update", "save", "metrics"};
enum { N_EVENTS = sizeof EVENTS / sizeof *EVENTS, EV_SAVE = 2 };

static struct {
    int ready;           /* 0: environment not read yet; 1: inactive; 2: active */
    int target;          /* index into EVENTS, -1: counting only */
    long long at;        /* the occurrence to die before */
    long long count[N_EVENTS];
    bool saving;         /* inside a checkpoint save */
    const char *counts_file;
} kp;

static int this_rank(void)
{
    const char *r = getenv("OMPI_COMM_WORLD_RANK");
    if (!r)
        r = getenv("PMI_RANK");
    return r ? atoi(r) : 0;
}

static void write_counts(void)
{
    FILE *f = fopen(kp.counts_file, "w");
    if (!f)
        return;
    for (int i = 0; i < N_EVENTS; i++)
        fprintf(f, "%s %lld\n", EVENTS[i], kp.count[i]);
    fclose(f);
}

/* "<event>:<count>[@<rank>]" into kp.target / kp.at; a malformed value is reported once and ignored
   (a test that sets it checks that the process died). */
static void parse_kill_at(const char *s)
{
    const char *colon = strchr(s, ':');
    for (int i = 0; colon && i < N_EVENTS; i++)
        if ((size_t)(colon - s) == strlen(EVENTS[i]) && !strncmp(s, EVENTS[i], (size_t)(colon - s))) {
            char *end;
            long long n = strtoll(colon + 1, &end, 10);
            if (n < 1 || (*end && *end != '@'))
                break;
            if (*end == '@' && atoi(end + 1) != this_rank())
                return;
            kp.target = i;
            kp.at = n;
            return;
        }
    fprintf(stderr, "[distflow] DF_TEST_KILL_AT=%s: expected <gen|update|save|metrics>:<count>[@<rank>]\n", s);
}

static void init(void)
{
    const char *at = getenv("DF_TEST_KILL_AT");
    kp.counts_file = getenv("DF_TEST_KILL_COUNTS");
    kp.target = -1;
    if (at && *at)
        parse_kill_at(at);
    if (kp.counts_file && this_rank() == 0)
        atexit(write_counts);
    else
        kp.counts_file = NULL;
    kp.ready = kp.target >= 0 || kp.counts_file ? 2 : 1;
}

static void occur(int ev)
{
    if (++kp.count[ev] == kp.at && ev == kp.target) {
        fflush(stdout); /* the log says how far it got; data files stay as a real kill leaves them */
        raise(SIGKILL);
    }
}

void df_kill_point(const char *event)
{
    if (!kp.ready)
        init();
    if (kp.ready != 2)
        return;
    for (int i = 0; i < N_EVENTS; i++)
        if (!strcmp(event, EVENTS[i]))
            occur(i);
}

void df_kill_point_fs(void)
{
    if (!kp.ready)
        init();
    if (kp.ready == 2 && kp.saving)
        occur(EV_SAVE);
}

void df_kill_point_save_scope(bool open)
{
    kp.saving = open;
}
