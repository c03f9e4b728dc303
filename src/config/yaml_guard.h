/*
 * yaml_guard.h (internal) — limits checked on YAML text before libyaml parses it
 * (the config loader, the workflow loader). libyaml's scanner is quadratic in the
 * nesting of flow collections ([[[[...]]]] takes minutes at 100k levels), and a
 * document is held whole in memory, so both are bounded first.
 */
#ifndef DF_CONFIG_YAML_GUARD_H
#define DF_CONFIG_YAML_GUARD_H

#include <stddef.h>

/** The largest YAML text accepted, in bytes (a config or workflow is a few KB). */
#define DF_YAML_MAX_BYTES ((size_t)16 << 20)
/** The deepest nesting of flow collections ([ ] and { }) accepted. */
#define DF_YAML_MAX_FLOW_DEPTH 64

/**
 * Refuse `text` (len bytes) when it is longer than DF_YAML_MAX_BYTES or nests
 * flow collections deeper than DF_YAML_MAX_FLOW_DEPTH outside quoted scalars
 * and comments. Errors: DF_EINVAL "name[:line]: ..." naming the limit.
 */
int df_yaml_check_text(const char *text, size_t len, const char *name);

#endif
