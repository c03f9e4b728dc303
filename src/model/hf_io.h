/*
 * hf_io.h (internal) — shared by the Hugging Face file readers and writers:
 * JSON text in the exact style of
 * Python's json.dumps(obj, indent=2, sort_keys=True) (what transformers writes
 * for config.json and the shard index), and config.json serialisation.
 */
#ifndef DF_MODEL_HF_IO_H
#define DF_MODEL_HF_IO_H

#include "distflow/model.h"
#include "util/fsutil.h"

#include <jansson.h>
#include <stddef.h>

/* ---- JSON output ---------------------------------------------------------- */

/**
 * Serialise `v` as Python's json.dumps(v, indent=2, sort_keys=True) does
 * (ensure_ascii, float repr, ", " / ": " separators), plus a trailing newline.
 * Returns a malloc'd string or NULL when out of memory.
 */
char *df_json_dumps_py(const json_t *v);
/** Python repr() of a double: shortest round-trip digits ("1e-06", "10000.0"). */
void df_format_double_py(double v, char *buf, size_t cap);

/* ---- config.json ---------------------------------------------------------- */

/**
 * config.json text for `cfg`: keys of `original_json` (may be NULL) are kept,
 * the known ones updated. *out is malloc'd. DF_EINVAL if original_json is not
 * a JSON object.
 */
int df_model_config_to_json(const df_model_config *cfg, const char *original_json, char **out);

/** Value written as "transformers_version" when the original has none. */
#define DF_HF_TRANSFORMERS_VERSION "4.46.0"

#endif /* DF_MODEL_HF_IO_H */
