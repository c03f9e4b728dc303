/* Process and host memory from the OS (memstat.h). */
#include "util/memstat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

int64_t df_process_peak_rss_bytes(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru))
        return -1;
    return (int64_t)ru.ru_maxrss * 1024; /* KiB on Linux */
}

/* The kB value of meminfo's line "<key>: <n> kB" in bytes; -1 when absent or malformed. */
static int64_t field(const char *text, const char *key)
{
    size_t n = strlen(key);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, key, n) || p[n] != ':')
            continue;
        char *end;
        long long v = strtoll(p + n + 1, &end, 10);
        return end == p + n + 1 || v < 0 ? -1 : (int64_t)v * 1024;
    }
    return -1;
}

int df_meminfo_used_bytes(const char *meminfo, int64_t *used)
{
    int64_t total = field(meminfo, "MemTotal"), free_ = field(meminfo, "MemFree");
    if (total < 0 || free_ < 0)
        return -1;
    int64_t buffers = field(meminfo, "Buffers"), cached = field(meminfo, "Cached"),
            reclaim = field(meminfo, "SReclaimable");
    int64_t u = total - free_ - (buffers > 0 ? buffers : 0) - (cached > 0 ? cached : 0) -
                (reclaim > 0 ? reclaim : 0);
    *used = u < 0 ? total - free_ : u;
    return 0;
}

int64_t df_host_memory_used_bytes(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return -1;
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    int64_t used;
    return df_meminfo_used_bytes(buf, &used) ? -1 : used;
}
