/* df_dataset_scan_values (dataset.h): the distinct values of one field, without building a dataset. */
#include "distflow/dataset.h"

#include "data/jsonl.h"
#include "data/rows.h"
#include "util/fsutil.h"

#include <stdlib.h>
#include <string.h>

/* The values seen so far; datasets mix few sources, so a list searched from its newest entry does. */
typedef struct {
    char **v;
    int n, cap;
} seen_set;

/* Whether s is new; added when it is. -1: out of memory. */
static int seen_add(seen_set *s, const char *value)
{
    for (int i = s->n - 1; i >= 0; i--)
        if (!strcmp(s->v[i], value))
            return 0;
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 8;
        char **v = realloc(s->v, (size_t)cap * sizeof *v);
        if (!v)
            return -1;
        s->v = v, s->cap = cap;
    }
    if (!(s->v[s->n] = strdup(value)))
        return -1;
    s->n++;
    return 1;
}

static void seen_free(seen_set *s)
{
    for (int i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
}

/* One file's rows, at most *left of them (< 0: all; decremented). */
static int scan_file(const char *path, const char *key, int64_t *left, seen_set *seen, df_dataset_value_fn fn,
                     void *user)
{
    char *text = NULL;
    size_t len = 0;
    df_rows rows = {0};
    int rc = df_read_file(path, &text, &len);
    if (!rc)
        rc = df_rows_open(&rows, text, len, path);
    json_t *row = NULL;
    while (!rc && *left != 0 && !(rc = df_rows_next(&rows, &row)) && row) {
        const char *v = json_string_value(df_jsonl_path(row, key));
        int added = v ? seen_add(seen, v) : 0;
        if (added < 0)
            rc = df_error(DF_ENOMEM, "out of memory");
        else if (added)
            rc = fn(user, v, path, rows.where);
        json_decref(row);
        if (*left > 0)
            (*left)--;
    }
    df_rows_close(&rows);
    free(text);
    return rc;
}

int df_dataset_scan_values(const char *const *paths, int n_paths, const char *key, int64_t max_rows,
                           df_dataset_value_fn fn, void *user)
{
    seen_set seen = {0};
    int64_t left = max_rows < 0 ? -1 : max_rows;
    int rc = DF_OK;
    for (int i = 0; !rc && i < n_paths && left != 0; i++)
        rc = scan_file(paths[i], key, &left, &seen, fn, user);
    seen_free(&seen);
    return rc;
}
