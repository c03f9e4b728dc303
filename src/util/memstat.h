/* memstat.h (internal) — the process's and the host's memory, as the OS reports them. */
#ifndef DF_UTIL_MEMSTAT_H
#define DF_UTIL_MEMSTAT_H

#include <stdint.h>

/** The process's peak resident set since it started, in bytes (getrusage ru_maxrss); -1 if unknown. */
int64_t df_process_peak_rss_bytes(void);

/**
 * The host's used memory in bytes from the text of /proc/meminfo, as psutil's
 * virtual_memory().used on Linux (what verl's perf/cpu_memory_used_gb reads): MemTotal -
 * MemFree - Buffers - (Cached + SReclaimable), or MemTotal - MemFree where that is negative
 * (psutil's fallback). The fields are in kB. Returns 0, or -1 when MemTotal or MemFree is
 * missing or malformed (*used untouched).
 */
int df_meminfo_used_bytes(const char *meminfo, int64_t *used);

/** df_meminfo_used_bytes of this host's /proc/meminfo; -1 where it cannot be read. */
int64_t df_host_memory_used_bytes(void);

#endif
