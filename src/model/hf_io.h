/*
 * hf_io.h (internal) — plumbing shared by the Hugging Face file readers and
 * writers: atomic files (temporary in the same directory, fsync, rename),
 * whole-file reads, directory creation, JSON text in the exact style of
 * Python's json.dumps(obj, indent=2, sort_keys=True) (what transformers writes
 * for config.json and the shard index), and config.json serialisation.
 */
#ifndef DF_MODEL_HF_IO_H
#define DF_MODEL_HF_IO_H

#include "distflow/model.h"

#include <jansson.h>
#include <stddef.h>

/* ---- atomic files ------------------------------------------------------- */

/**
 * A file being written under a temporary name next to its final path, so the
 * final rename is atomic (same file system). Zero-initialise before use;
 * df_tmpfile_discard is safe on a zeroed, committed or discarded struct.
 */
typedef struct df_tmpfile {
    char *path; /**< final path */
    char *tmp;  /**< temporary path ("<dir>/.<name>.tmp.XXXXXX") */
    int fd;     /**< -1 once closed */
} df_tmpfile;

/** Create the temporary for `path`. DF_EIO (naming the directory) on failure. */
int df_tmpfile_open(df_tmpfile *t, const char *path);
/** Write all n bytes (retrying short writes). DF_EIO naming the final path. */
int df_tmpfile_write(df_tmpfile *t, const void *buf, size_t n);
/** fsync and close the temporary; it keeps its temporary name. */
int df_tmpfile_close(df_tmpfile *t);
/** Close if still open, then rename onto the final path. */
int df_tmpfile_commit(df_tmpfile *t);
/** Close and unlink the temporary (if any) and free the names. */
void df_tmpfile_discard(df_tmpfile *t);
/** Write `path` atomically in one call (temporary, fsync, rename). */
int df_write_file_atomic(const char *path, const void *buf, size_t n);

/* ---- paths and whole files ------------------------------------------------ */

/** malloc'd "dir/name" (NULL when out of memory). */
char *df_path_join(const char *dir, const char *name);
/** True if `path` names an existing regular file. */
bool df_file_exists(const char *path);
/**
 * Read a whole file into a malloc'd NUL-terminated buffer (*len bytes without
 * the NUL; len may be NULL). DF_ENOTFOUND if it does not exist, DF_EIO otherwise.
 */
int df_read_file(const char *path, char **text, size_t *len);
/** mkdir -p (mode 0755). DF_EIO naming the component that failed. */
int df_mkdir_p(const char *dir);
/** fsync a directory so renames inside it are durable. */
int df_fsync_dir(const char *dir);

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
