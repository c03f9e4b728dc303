/* JSON-lines RL / SFT datasets in the verl schema (include/distflow/dataset.h). */
#include "distflow/dataset.h"

#include "data/jsonl.h"
#include "data/rows.h"
#include "util/fsutil.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    json_t *obj;          /* the whole record (owned reference) */
    json_t *msgs;         /* message list: inside obj, or `own_msgs` */
    json_t *own_msgs;     /* synthesized list for a plain-string prompt (owned) */
    char *raw_prompt;     /* compact JSON of msgs */
    char *extra_info;     /* compact JSON of extra_info, "{}" when absent */
    char *ground_truth;   /* text of reward_model.ground_truth, "" when absent */
    const char *data_source, *style, *ability; /* borrowed from obj, or "" */
    int32_t file;
    int64_t line;
    int64_t global; /* row number over all files, all shards */
} record;

struct df_dataset {
    record *rows;
    int64_t n, cap;
    char **files;
    int nfiles;
    int64_t global_n;             /* non-blank lines seen in all files */
    int shard_index, shard_count; /* count >= 1 */
};

static void record_free(record *r)
{
    json_decref(r->obj);
    json_decref(r->own_msgs);
    free(r->raw_prompt);
    free(r->extra_info);
    free(r->ground_truth);
}

void df_dataset_free(df_dataset *ds)
{
    if (!ds)
        return;
    for (int64_t i = 0; i < ds->n; i++)
        record_free(&ds->rows[i]);
    free(ds->rows);
    for (int i = 0; i < ds->nfiles; i++)
        free(ds->files[i]);
    free(ds->files);
    free(ds);
}

/* ---- record parsing ----------------------------------------------------------- */

typedef struct {
    const char *file;
    int64_t line; /* a Parquet file's 1-based row */
    bool parquet;
} where;

#define BAD(w, ...) bad_at(w, __VA_ARGS__)
static int bad_at(where w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad_at(where w, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return df_error(DF_EINVAL, w.parquet ? "%s: row %lld: %s" : "%s:%lld: %s", w.file, (long long)w.line, msg);
}

/* Optional string field: absent / null -> "", else must be a string. */
static int opt_string(where w, json_t *v, const char *key, const char **out)
{
    if (!v || json_is_null(v)) {
        *out = "";
        return DF_OK;
    }
    if (!json_is_string(v))
        return BAD(w, "%s must be a string, got %s", key, df_jsonl_type_name(v));
    *out = json_string_value(v);
    return DF_OK;
}

static int parse_messages(where w, record *r, json_t *prompt, const char *key)
{
    if (json_is_string(prompt)) {
        r->own_msgs = json_pack("[{s:s, s:O}]", "role", "user", "content", prompt);
        if (!r->own_msgs)
            return df_error(DF_ENOMEM, "%s:%lld: out of memory", w.file, (long long)w.line);
        r->msgs = r->own_msgs;
        return DF_OK;
    }
    if (!json_is_array(prompt))
        return BAD(w, "\"%s\" must be a list of chat messages or a string, got %s", key,
                   df_jsonl_type_name(prompt));
    if (json_array_size(prompt) == 0)
        return BAD(w, "\"%s\" is an empty message list", key);
    if (json_array_size(prompt) > 1000000)
        return BAD(w, "\"%s\" has too many messages", key);
    size_t j;
    json_t *m;
    json_array_foreach(prompt, j, m)
    {
        if (!json_is_object(m))
            return BAD(w, "%s[%zu] must be an object {role, content}, got %s", key, j,
                       df_jsonl_type_name(m));
        json_t *role = json_object_get(m, "role"), *content = json_object_get(m, "content");
        if (!role || !json_is_string(role))
            return BAD(w, "%s[%zu].role must be a string, got %s", key, j,
                       role ? df_jsonl_type_name(role) : "nothing");
        if (!content || !json_is_string(content))
            return BAD(w, "%s[%zu].content must be a string, got %s", key, j,
                       content ? df_jsonl_type_name(content) : "nothing");
    }
    r->msgs = prompt;
    return DF_OK;
}

static int parse_reward(where w, record *r, json_t *obj, bool optional)
{
    json_t *ds = json_object_get(obj, "data_source");
    if ((!ds || json_is_null(ds)) && !optional)
        return BAD(w, "missing \"data_source\"");
    int rc = opt_string(w, ds, "data_source", &r->data_source);
    if (rc)
        return rc;
    json_t *rm = json_object_get(obj, "reward_model");
    json_t *gt = NULL;
    r->style = "";
    if (rm && !json_is_null(rm)) {
        if (!json_is_object(rm))
            return BAD(w, "reward_model must be an object, got %s", df_jsonl_type_name(rm));
        if ((rc = opt_string(w, json_object_get(rm, "style"), "reward_model.style", &r->style)))
            return rc;
        gt = json_object_get(rm, "ground_truth");
    }
    if ((!gt || json_is_null(gt)) && !optional)
        return BAD(w, "missing \"reward_model\": {\"ground_truth\": ...}");
    if (gt && !json_is_string(gt) && !json_is_number(gt) && !json_is_null(gt))
        return BAD(w, "reward_model.ground_truth must be a string or number, got %s",
                   df_jsonl_type_name(gt));
    if (gt)
        return df_jsonl_text(gt, &r->ground_truth);
    r->ground_truth = strdup("");
    return r->ground_truth ? DF_OK : df_error(DF_ENOMEM, "out of memory");
}

/* verl's per-row agent_name against the job's one loop (df_dataset_opts.agent_loop). */
static int check_agent_name(where w, json_t *obj, const char *loop)
{
    json_t *a = json_object_get(obj, "agent_name");
    const char *name = "";
    if (!loop || !a || json_is_null(a))
        return DF_OK;
    int rc = opt_string(w, a, "agent_name", &name);
    if (rc || !strcmp(name, loop))
        return rc;
    if (!strcmp(name, "tool_agent"))
        return BAD(w, "agent_name \"tool_agent\": the tool loop is off, so the row would run single-turn "
                      "(turn it on: actor_rollout_ref.rollout.multi_turn.enable, eval --tool-config)");
    if (!strcmp(name, "single_turn_agent"))
        return BAD(w, "agent_name \"single_turn_agent\": the tool loop is on, and distflow runs every row "
                      "of a job through it (verl's tool_agent)");
    return BAD(w, "agent_name \"%s\": distflow's agent loops are single_turn_agent and tool_agent (the "
                  "tool loop)", name);
}

static int parse_record(where w, json_t *obj, const df_dataset_opts *o, record *r)
{
    memset(r, 0, sizeof *r);
    r->line = w.line;
    const char *key = (o && o->prompt_key && o->prompt_key[0]) ? o->prompt_key : "prompt";
    json_t *prompt = o && o->no_prompt ? NULL : df_jsonl_path(obj, key);
    if (!prompt && !(o && o->no_prompt))
        return BAD(w, "missing \"%s\"", key);
    int rc = prompt ? parse_messages(w, r, prompt, key) : DF_OK;
    if (rc || (rc = parse_reward(w, r, obj, o && o->reward_optional)))
        return rc;
    if ((rc = opt_string(w, json_object_get(obj, "ability"), "ability", &r->ability)) ||
        (rc = check_agent_name(w, obj, o ? o->agent_loop : NULL)))
        return rc;
    json_t *ei = json_object_get(obj, "extra_info");
    if (ei && !json_is_null(ei) && !json_is_object(ei))
        return BAD(w, "extra_info must be an object, got %s", df_jsonl_type_name(ei));
    r->extra_info = (ei && !json_is_null(ei)) ? df_jsonl_compact(ei) : strdup("{}");
    r->raw_prompt = r->msgs ? df_jsonl_compact(r->msgs) : strdup("[]");
    if (!r->extra_info || !r->raw_prompt)
        return df_error(DF_ENOMEM, "%s:%lld: out of memory", w.file, (long long)w.line);
    return DF_OK;
}

/* ---- loading -------------------------------------------------------------------- */

static int add_file_name(df_dataset *ds, const char *name)
{
    char **nf = realloc(ds->files, (size_t)(ds->nfiles + 1) * sizeof *nf);
    if (!nf)
        return df_error(DF_ENOMEM, "out of memory");
    ds->files = nf;
    if (!(ds->files[ds->nfiles] = strdup(name ? name : "<buffer>")))
        return df_error(DF_ENOMEM, "out of memory");
    ds->nfiles++;
    return DF_OK;
}

static int push_row(df_dataset *ds, const record *r)
{
    if (ds->n == ds->cap) {
        int64_t cap = ds->cap ? 2 * ds->cap : 1024;
        record *nr = realloc(ds->rows, (size_t)cap * sizeof *nr);
        if (!nr)
            return df_error(DF_ENOMEM, "out of memory loading dataset rows");
        ds->rows = nr;
        ds->cap = cap;
    }
    ds->rows[ds->n++] = *r;
    return DF_OK;
}

static int append_buffer(df_dataset *ds, const char *text, size_t len, const char *name,
                         const df_dataset_opts *opts)
{
    int rc = add_file_name(ds, name);
    const char *fname = rc ? NULL : ds->files[ds->nfiles - 1];
    df_rows rows = {0};
    if (!rc)
        rc = df_rows_open(&rows, text, len, fname);
    while (!rc) {
        int64_t g = ds->global_n;
        if (g % ds->shard_count != ds->shard_index) { /* another rank's row: not even parsed */
            if (!df_rows_skip(&rows))
                break;
            ds->global_n++;
            continue;
        }
        json_t *obj = NULL;
        if ((rc = df_rows_next(&rows, &obj)) || !obj)
            break;
        ds->global_n++;
        record r;
        where w = {fname, rows.where, df_rows_parquet(&rows)};
        rc = parse_record(w, obj, opts, &r);
        r.obj = obj;
        r.file = ds->nfiles - 1;
        r.global = g;
        if (rc || (rc = push_row(ds, &r)))
            record_free(&r);
    }
    df_rows_close(&rows);
    return rc;
}

static int dataset_new(const df_dataset_opts *o, df_dataset **out)
{
    int idx = o ? o->shard_index : 0, count = o ? o->shard_count : 0;
    if (count < 0 || idx < 0 || (count <= 1 && idx != 0) || (count > 1 && idx >= count))
        return df_error(DF_EINVAL, "dataset: shard %d of %d is not a shard (want 0 <= index < count)",
                        idx, count);
    df_dataset *ds = calloc(1, sizeof(df_dataset));
    if (!ds)
        return df_error(DF_ENOMEM, "out of memory");
    ds->shard_index = idx;
    ds->shard_count = count > 1 ? count : 1;
    *out = ds;
    return DF_OK;
}

int df_dataset_load_buffer(const char *text, size_t len, const char *name,
                           const df_dataset_opts *opts, df_dataset **out)
{
    df_dataset *ds = NULL;
    int rc = dataset_new(opts, &ds);
    if (rc)
        return rc;
    rc = append_buffer(ds, text ? text : "", text ? len : 0, name, opts);
    if (rc) {
        df_dataset_free(ds);
        return rc;
    }
    *out = ds;
    return DF_OK;
}

int df_dataset_load(const char *const *paths, int n_paths, const df_dataset_opts *opts,
                    df_dataset **out)
{
    if (n_paths < 1 || !paths)
        return df_error(DF_EINVAL, "dataset: no files given");
    df_dataset *ds = NULL;
    int rc = dataset_new(opts, &ds);
    for (int f = 0; !rc && f < n_paths; f++) {
        char *text = NULL;
        size_t len = 0;
        if (!paths[f])
            rc = df_error(DF_EINVAL, "dataset: file %d of %d is NULL", f, n_paths);
        else if (!(rc = df_read_file(paths[f], &text, &len)))
            rc = append_buffer(ds, text, len, paths[f], opts);
        free(text);
    }
    if (!rc && opts && opts->need_rows && ds->global_n == 0)
        rc = df_error(DF_EINVAL, "%s%s: no rows", paths[0], n_paths > 1 ? " and the other files" : "");
    if (rc) {
        df_dataset_free(ds);
        return rc;
    }
    *out = ds;
    return DF_OK;
}

/* ---- access -------------------------------------------------------------------- */

int64_t df_dataset_size(const df_dataset *ds) { return ds->n; }
int64_t df_dataset_global_size(const df_dataset *ds) { return ds->global_n; }

void df_dataset_shard(const df_dataset *ds, int *index, int *count)
{
    if (index)
        *index = ds->shard_index;
    if (count)
        *count = ds->shard_count;
}

static const record *row(const df_dataset *ds, int64_t i)
{
    return (ds && i >= 0 && i < ds->n) ? &ds->rows[i] : NULL;
}

#define ROW_FIELD(fn, field)                                                                   \
    const char *fn(const df_dataset *ds, int64_t i)                                            \
    {                                                                                          \
        const record *r = row(ds, i);                                                          \
        return r ? r->field : NULL;                                                            \
    }
ROW_FIELD(df_dataset_data_source, data_source)
ROW_FIELD(df_dataset_ground_truth, ground_truth)
ROW_FIELD(df_dataset_reward_style, style)
ROW_FIELD(df_dataset_ability, ability)
ROW_FIELD(df_dataset_extra_info, extra_info)
ROW_FIELD(df_dataset_raw_prompt, raw_prompt)

int64_t df_dataset_global_index(const df_dataset *ds, int64_t i)
{
    const record *r = row(ds, i);
    return r ? r->global : -1;
}

int df_dataset_num_messages(const df_dataset *ds, int64_t i)
{
    const record *r = row(ds, i);
    return r ? (int)json_array_size(r->msgs) : -1;
}

int df_dataset_message(const df_dataset *ds, int64_t i, int j, const char **role,
                       const char **content)
{
    const record *r = row(ds, i);
    if (!r || j < 0 || (size_t)j >= json_array_size(r->msgs))
        return df_error(DF_EINVAL, "dataset: no message %d in row %lld", j, (long long)i);
    json_t *m = json_array_get(r->msgs, (size_t)j);
    if (role)
        *role = json_string_value(json_object_get(m, "role"));
    if (content)
        *content = json_string_value(json_object_get(m, "content"));
    return DF_OK;
}

const char *df_dataset_source(const df_dataset *ds, int64_t i, int64_t *line)
{
    const record *r = row(ds, i);
    if (!r)
        return NULL;
    if (line)
        *line = r->line;
    return ds->files[r->file];
}

int df_dataset_field(const df_dataset *ds, int64_t i, const char *path, char **out)
{
    const record *r = row(ds, i);
    if (!r)
        return df_error(DF_EINVAL, "dataset: row %lld out of range [0, %lld)", (long long)i,
                        (long long)(ds ? ds->n : 0));
    json_t *v = df_jsonl_path(r->obj, path);
    if (!v)
        return df_error(DF_ENOTFOUND, "%s:%lld: no field \"%s\"", ds->files[r->file],
                        (long long)r->line, path ? path : "(null)");
    return df_jsonl_text(v, out);
}

int64_t df_dataset_filter(df_dataset *ds, const bool *keep)
{
    int64_t w = 0;
    for (int64_t i = 0; i < ds->n; i++) {
        if (keep[i])
            ds->rows[w++] = ds->rows[i];
        else
            record_free(&ds->rows[i]);
    }
    int64_t dropped = ds->n - w;
    ds->n = w;
    return dropped;
}

int64_t df_dataset_head(df_dataset *ds, int64_t n)
{
    int64_t size = df_dataset_size(ds);
    if (n < 0 || size == 0 || ds->rows[size - 1].global < n)
        return 0; /* rows are in global order: the last one decides */
    bool *keep = malloc((size_t)size * sizeof *keep);
    if (!keep) {
        df_error(DF_ENOMEM, "out of memory");
        return -1;
    }
    for (int64_t i = 0; i < size; i++)
        keep[i] = ds->rows[i].global < n;
    int64_t dropped = df_dataset_filter(ds, keep);
    free(keep);
    return dropped;
}
