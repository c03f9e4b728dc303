/*
 * Model load / save in the Hugging Face layout: config.json, model.safetensors
 * or shards + model.safetensors.index.json, generation_config.json (model.h).
 */
#include "distflow/model.h"
#include "model/hf_io.h"
#include "model/strutil.h"
#include "model/safetensors.h"
#include "util/finite.h"

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SINGLE_FILE "model.safetensors"
#define INDEX_FILE "model.safetensors.index.json"
#define SHARD_FMT "model-%05d-of-%05d.safetensors"

/* ---- loading ------------------------------------------------------------------- */

typedef struct {
    const char *name;
    int idx;
} name_idx;

typedef struct {
    df_model *m;
    df_hf_tensor *hf;   /* the checkpoint's tensors (df_hf_tensor_table) */
    int n_hf;
    name_idx *sorted;   /* their names, sorted for lookup */
    const char **from;  /* [n_hf]: file each was read from, NULL if not yet */
    char **files;       /* owned copies of the file names used in `from` */
    int n_files;
} loader;

static int cmp_name_idx(const void *a, const void *b)
{
    return strcmp(((const name_idx *)a)->name, ((const name_idx *)b)->name);
}

static int hf_index(const loader *L, const char *name)
{
    name_idx key = {name, 0};
    const name_idx *hit = bsearch(&key, L->sorted, (size_t)L->n_hf, sizeof key, cmp_name_idx);
    return hit ? hit->idx : -1;
}

/* File tensor t into its layout tensors: directly, or (a fused projection) through a float32 copy
   whose rows go to each part in turn. */
static int read_parts(df_model *m, const df_hf_tensor *h, const df_st_tensor *t)
{
    const df_param_desc *d0 = &m->tensors[h->part[0]];
    if (h->n_parts == 1)
        return df_st_tensor_to_f32(t, m->params + d0->offset);
    float *tmp = malloc((size_t)h->numel * sizeof *tmp);
    int rc = tmp ? df_st_tensor_to_f32(t, tmp) : df_error(DF_ENOMEM, "out of memory reading \"%s\"", h->name);
    int64_t at = 0;
    for (int k = 0; !rc && k < h->n_parts; k++) {
        const df_param_desc *d = &m->tensors[h->part[k]];
        memcpy(m->params + d->offset, tmp + at, (size_t)d->numel * sizeof *tmp);
        at += d->numel;
    }
    free(tmp);
    return rc;
}

static int load_tensor(loader *L, const char *path, const df_st_tensor *t)
{
    df_model *m = L->m;
    int idx = hf_index(L, t->name);
    if (idx < 0) {
        /* Tied checkpoints sometimes carry lm_head anyway; old ones save RoPE buffers. */
        if (m->cfg.tie_word_embeddings && !strcmp(t->name, "lm_head.weight"))
            return DF_OK;
        if (df_ends_with(t->name, ".rotary_emb.inv_freq"))
            return DF_OK;
        return df_error(DF_EINVAL, "%s: unexpected tensor \"%s\" (not in the %s layout of "
                        "config.json)", path, t->name, m->cfg.model_type);
    }
    const df_hf_tensor *h = &L->hf[idx];
    if (L->from[idx])
        return df_error(DF_EINVAL, "%s: tensor \"%s\" is also in %s", path, t->name,
                        L->from[idx]);
    bool same = t->ndim == h->ndim;
    for (int i = 0; same && i < h->ndim; i++)
        same = t->shape[i] == h->shape[i];
    if (!same) {
        char got[160], want[160];
        df_st_shape_str(got, sizeof got, t->ndim, t->shape);
        df_st_shape_str(want, sizeof want, h->ndim, h->shape);
        return df_error(DF_EINVAL, "%s: tensor \"%s\" has shape %s, config.json implies %s", path,
                        t->name, got, want);
    }
    int rc = read_parts(m, h, t);
    if (rc)
        return df_error_wrap(rc, "%s", path);
    /* a NaN / Inf weight would poison every activation and gradient of the run; refuse it here */
    int64_t at = 0;
    for (int k = 0; k < h->n_parts; k++) {
        const df_param_desc *d = &m->tensors[h->part[k]];
        int64_t bad = df_first_nonfinite(m->params + d->offset, d->numel);
        if (bad >= 0)
            return df_error(DF_EINVAL, "%s: tensor \"%s\" holds a non-finite value (%g) at element %lld of %lld; "
                            "the file is corrupt or was saved from a diverged run", path, t->name,
                            (double)m->params[d->offset + bad], (long long)(at + bad), (long long)h->numel);
        at += d->numel;
    }
    L->from[idx] = L->files[L->n_files - 1];
    return DF_OK;
}

/* Open one .safetensors file and load every tensor in it. */
static int load_file(loader *L, const char *path, df_st_file **keep)
{
    char *copy = strdup(path);
    char **nf = realloc(L->files, (size_t)(L->n_files + 1) * sizeof *nf);
    if (!copy || !nf) {
        free(copy);
        if (nf)
            L->files = nf;
        return df_error(DF_ENOMEM, "out of memory loading %s", path);
    }
    L->files = nf;
    L->files[L->n_files++] = copy;
    df_st_file *f = NULL;
    int rc = df_st_open(path, &f);
    for (int i = 0; !rc && i < df_st_count(f); i++) {
        df_st_tensor t;
        rc = df_st_at(f, i, &t);
        if (!rc)
            rc = load_tensor(L, path, &t);
    }
    if (rc || !keep) {
        df_st_close(f);
        return rc;
    }
    *keep = f;
    return DF_OK;
}

/* A shard name from the index must stay inside the model directory. */
static bool safe_file_name(const char *s)
{
    return s[0] && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..");
}

static int load_sharded(loader *L, const char *dir, const char *index_path)
{
    char *text;
    int rc = df_read_file(index_path, &text, NULL);
    if (rc)
        return rc;
    json_error_t jerr;
    json_t *root = json_loads(text, 0, &jerr);
    free(text);
    if (!root)
        return df_error(DF_EINVAL, "%s: invalid JSON: %s (line %d, column %d)", index_path,
                        jerr.text, jerr.line, jerr.column);
    json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm)) {
        json_decref(root);
        return df_error(DF_EINVAL, "%s: missing \"weight_map\" object", index_path);
    }
    /* Shards in order of first mention; each is opened once. */
    size_t n = json_object_size(wm), n_shards = 0;
    const char **shards = calloc(n ? n : 1, sizeof *shards);
    if (!shards) {
        json_decref(root);
        return df_error(DF_ENOMEM, "out of memory reading %s", index_path);
    }
    const char *name;
    json_t *v;
    json_object_foreach(wm, name, v) {
        if (!json_is_string(v) || !safe_file_name(json_string_value(v))) {
            rc = df_error(DF_EINVAL, "%s: weight_map[\"%s\"] must be a file name in the same "
                          "directory", index_path, name);
            break;
        }
        const char *s = json_string_value(v);
        size_t k = 0;
        while (k < n_shards && strcmp(shards[k], s))
            k++;
        if (k == n_shards) {
            shards[n_shards++] = s;
            char *p = df_path_join(dir, s);
            if (!p) {
                rc = df_error(DF_ENOMEM, "out of memory");
                break;
            }
            if (!df_file_exists(p))
                rc = df_error(DF_ENOTFOUND, "%s: shard \"%s\" (holding \"%s\") does not exist",
                              index_path, s, name);
            free(p);
            if (rc)
                break;
        }
    }
    for (size_t k = 0; !rc && k < n_shards; k++) {
        char *p = df_path_join(dir, shards[k]);
        df_st_file *f = NULL;
        rc = p ? load_file(L, p, &f) : df_error(DF_ENOMEM, "out of memory");
        /* Every entry naming this shard must be in it. */
        json_object_foreach(wm, name, v) {
            if (rc || strcmp(json_string_value(v), shards[k]))
                continue;
            df_st_tensor t;
            if (df_st_find(f, name, &t))
                rc = df_error(DF_EINVAL, "%s: weight_map puts \"%s\" in %s, which does not "
                              "contain it", index_path, name, shards[k]);
        }
        df_st_close(f);
        free(p);
    }
    free(shards);
    json_decref(root);
    return rc;
}

static int load_weights(df_model *m, const char *dir)
{
    loader L = {.m = m};
    int rc = df_hf_tensor_table(m, &L.hf, &L.n_hf);
    if (rc)
        return rc;
    L.sorted = malloc((size_t)L.n_hf * sizeof *L.sorted);
    L.from = calloc((size_t)L.n_hf, sizeof *L.from);
    char *single = df_path_join(dir, SINGLE_FILE), *index = df_path_join(dir, INDEX_FILE);
    if (!L.sorted || !L.from || !single || !index) {
        rc = df_error(DF_ENOMEM, "out of memory loading %s", dir);
        goto done;
    }
    for (int i = 0; i < L.n_hf; i++)
        L.sorted[i] = (name_idx){L.hf[i].name, i};
    qsort(L.sorted, (size_t)L.n_hf, sizeof *L.sorted, cmp_name_idx);
    /* Like transformers: a single model.safetensors wins over an index. */
    const char *where;
    if (df_file_exists(single)) {
        where = single;
        rc = load_file(&L, single, NULL);
    } else if (df_file_exists(index)) {
        where = index;
        rc = load_sharded(&L, dir, index);
    } else {
        rc = df_error(DF_ENOTFOUND, "%s: no %s or %s (only safetensors weights are supported)",
                      dir, SINGLE_FILE, INDEX_FILE);
        goto done;
    }
    /* HF's *ForSequenceClassification head has no bias: a file without one keeps the 0 that
       df_model_create gave it (verl's AutoModelForTokenClassification load does the same). */
    for (int i = 0; !rc && i < L.n_hf; i++)
        if (!L.from[i] && !(m->cfg.seq_cls && !strcmp(L.hf[i].name, "score.bias"))) {
            char sh[64]; /* "[d0, d1]": printed after "[shape " without its "[" */
            df_st_shape_str(sh, sizeof sh, L.hf[i].ndim, L.hf[i].shape);
            rc = df_error(DF_EINVAL, "%s: missing tensor \"%s\" [shape %s required by config.json", where,
                          L.hf[i].name, sh + 1);
        }
done:
    for (int i = 0; i < L.n_files; i++)
        free(L.files[i]);
    free(L.files);
    free(L.hf);
    free(L.sorted);
    free(L.from);
    free(single);
    free(index);
    return rc;
}

int df_model_load_ex(const char *dir, const df_config_overrides *ov, df_model **out)
{
    *out = NULL;
    char *cfg_path = df_path_join(dir, "config.json"), *text = NULL;
    if (!cfg_path)
        return df_error(DF_ENOMEM, "out of memory loading %s", dir);
    df_model_config cfg;
    df_model *m = NULL;
    int rc = df_model_config_text_ex(cfg_path, ov, &cfg, &text);
    if (!rc && (rc = df_model_create(&cfg, &m)))
        rc = df_error_wrap(rc, "%s", cfg_path);
    free(cfg_path);
    if (rc) {
        free(text);
        return rc;
    }
    m->config_json = text;
    rc = load_weights(m, dir);
    if (rc) {
        df_model_free(m);
        return rc;
    }
    df_model_weights_changed(m);
    *out = m;
    return DF_OK;
}

int df_model_load(const char *dir, df_model **out) { return df_model_load_ex(dir, NULL, out); }

/* ---- saving -------------------------------------------------------------------- */

/* Files written under temporary names, renamed into place only when all are ready. */
typedef struct {
    df_tmpfile f[64];
    int n;
    df_tmpfile *dyn; /* beyond 64 (many shards) */
    int dyn_cap;
} staging;

static df_tmpfile *stage_slot(staging *s)
{
    if (s->n < 64)
        return &s->f[s->n++];
    int k = s->n - 64;
    if (k == s->dyn_cap) {
        int cap = s->dyn_cap ? 2 * s->dyn_cap : 64;
        df_tmpfile *nd = realloc(s->dyn, (size_t)cap * sizeof *nd);
        if (!nd)
            return NULL;
        s->dyn = nd;
        s->dyn_cap = cap;
    }
    s->n++;
    return &s->dyn[k];
}

static df_tmpfile *stage_at(staging *s, int i) { return i < 64 ? &s->f[i] : &s->dyn[i - 64]; }

static void staging_discard(staging *s)
{
    for (int i = 0; i < s->n; i++)
        df_tmpfile_discard(stage_at(s, i));
    free(s->dyn);
    s->n = 0;
    s->dyn = NULL;
}

/* Stage `text` as dir/name. */
static int stage_text(staging *s, const char *dir, const char *name, const char *text)
{
    char *path = df_path_join(dir, name);
    df_tmpfile *t = stage_slot(s);
    if (!path || !t) {
        free(path);
        return df_error(DF_ENOMEM, "out of memory saving %s", dir);
    }
    int rc = df_tmpfile_open(t, path);
    free(path);
    if (rc) {
        s->n--; /* nothing to discard: open cleaned up */
        return rc;
    }
    rc = df_tmpfile_write(t, text, strlen(text));
    return rc ? rc : df_tmpfile_close(t);
}

/* HF's sharding rule: fill shards in order; a tensor larger than the limit gets its own. */
static int plan_shards(const df_hf_tensor *hf, int n, size_t esize, int64_t max_bytes, int *shard_of)
{
    int shard = 0;
    int64_t cur = 0;
    for (int i = 0; i < n; i++) {
        int64_t b = hf[i].numel * (int64_t)esize;
        if (max_bytes > 0 && cur > 0 && cur + b > max_bytes) {
            shard++;
            cur = 0;
        }
        shard_of[i] = shard;
        cur += b;
    }
    return shard + 1;
}

/* The checkpoint's tensors and the shard of each (df_model_save). */
typedef struct {
    const df_model *m;
    df_hf_tensor *hf;
    int n_hf;
    int *shard_of;
} save_plan;

static int stage_shard(staging *s, const save_plan *P, const char *dir, const char *file, df_dtype dtype,
                       int shard)
{
    df_st_writer *w;
    int rc = df_st_writer_new(&w);
    if (rc)
        return rc;
    rc = df_st_writer_set_metadata(w, "format", "pt");
    for (int i = 0; !rc && i < P->n_hf; i++) {
        const df_hf_tensor *h = &P->hf[i];
        const float *parts[DF_ST_MAX_PARTS];
        int64_t numel[DF_ST_MAX_PARTS];
        for (int k = 0; k < h->n_parts; k++) {
            const df_param_desc *d = &P->m->tensors[h->part[k]];
            parts[k] = P->m->params + d->offset, numel[k] = d->numel;
        }
        if (P->shard_of[i] == shard)
            rc = df_st_writer_add_gathered(w, h->name, dtype, h->ndim, h->shape, parts, numel, h->n_parts);
    }
    char *path = rc ? NULL : df_path_join(dir, file);
    df_tmpfile *t = rc ? NULL : stage_slot(s);
    if (!rc && (!path || !t))
        rc = df_error(DF_ENOMEM, "out of memory saving %s", dir);
    if (!rc) {
        rc = df_tmpfile_open(t, path);
        if (rc)
            s->n--;
        else if (!(rc = df_st_writer_write_to(w, t)))
            rc = df_tmpfile_close(t);
    }
    free(path);
    df_st_writer_free(w);
    return rc;
}

static int index_json(const save_plan *P, size_t esize, int n_shards, char **out)
{
    json_t *wm = json_object();
    int64_t total = 0;
    int bad = !wm;
    char file[64];
    for (int i = 0; !bad && i < P->n_hf; i++) {
        snprintf(file, sizeof file, SHARD_FMT, P->shard_of[i] + 1, n_shards);
        bad |= json_object_set_new(wm, P->hf[i].name, json_string(file));
        total += P->hf[i].numel * (int64_t)esize;
    }
    json_t *root = bad ? NULL : json_pack("{s:{s:I}, s:o}", "metadata", "total_size",
                                          (json_int_t)total, "weight_map", wm);
    if (!root && !bad)
        wm = NULL; /* json_pack consumed it even on failure */
    *out = root ? df_json_dumps_py(root) : NULL;
    json_decref(root ? root : wm);
    return *out ? DF_OK : df_error(DF_ENOMEM, "out of memory writing %s", INDEX_FILE);
}

/* generation_config.json: keep an existing one's keys, set bos / eos from the config. */
static int generation_json(const df_model_config *c, const char *dir, char **out)
{
    char *path = df_path_join(dir, "generation_config.json"), *old = NULL;
    json_t *o = NULL;
    if (path && df_read_file(path, &old, NULL) == DF_OK)
        o = json_loads(old, 0, NULL);
    df_clear_error();
    free(old);
    free(path);
    if (!json_is_object(o)) {
        json_decref(o);
        o = json_pack("{s:b, s:s}", "_from_model_config", 1, "transformers_version",
                      DF_HF_TRANSFORMERS_VERSION);
    }
    int bad = !o;
    if (!bad && c->bos_token_id >= 0)
        bad |= json_object_set_new(o, "bos_token_id", json_integer(c->bos_token_id));
    else if (!bad)
        json_object_del(o, "bos_token_id");
    if (!bad && c->n_eos > 0) {
        json_t *e = json_array();
        for (int i = 0; e && i < c->n_eos; i++)
            json_array_append_new(e, json_integer(c->eos_token_ids[i]));
        if (e && c->n_eos == 1 && !json_is_array(json_object_get(o, "eos_token_id"))) {
            json_decref(e);
            e = json_integer(c->eos_token_ids[0]);
        }
        bad |= json_object_set_new(o, "eos_token_id", e);
    } else if (!bad) {
        json_object_del(o, "eos_token_id");
    }
    *out = bad ? NULL : df_json_dumps_py(o);
    json_decref(o);
    return *out ? DF_OK : df_error(DF_ENOMEM, "out of memory writing generation_config.json");
}

/* Remove weight files of an earlier save that the new one does not replace. */
static void remove_stale(const char *dir, int n_shards)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *nm = e->d_name;
        bool stale = false;
        int a, b;
        char canon[64];
        if (n_shards > 1 && !strcmp(nm, SINGLE_FILE)) {
            stale = true;
        } else if (n_shards == 1 && !strcmp(nm, INDEX_FILE)) {
            stale = true;
        } else if (sscanf(nm, "model-%d-of-%d.safetensors", &a, &b) == 2) {
            snprintf(canon, sizeof canon, SHARD_FMT, a, b);
            stale = !strcmp(canon, nm) && (n_shards == 1 || b != n_shards);
        }
        if (stale) {
            char *p = df_path_join(dir, nm);
            if (p)
                unlink(p);
            free(p);
        }
    }
    closedir(d);
}

int df_model_save(const df_model *m, const char *dir, df_dtype dtype, int64_t max_shard_bytes)
{
    if (dtype != DF_DTYPE_F32 && dtype != DF_DTYPE_BF16 && dtype != DF_DTYPE_F16)
        return df_error(DF_EINVAL, "saving %s: dtype %d is not F32, BF16 or F16", dir, (int)dtype);
    if (max_shard_bytes < 0)
        return df_error(DF_EINVAL, "saving %s: max_shard_bytes must be >= 0", dir);
    int rc = df_mkdir_p(dir);
    if (rc)
        return df_error_wrap(rc, "saving model");
    size_t esize = df_st_dtype_size(dtype);
    save_plan P = {.m = m};
    if ((rc = df_hf_tensor_table(m, &P.hf, &P.n_hf)))
        return df_error_wrap(rc, "saving %s", dir);
    if (!(P.shard_of = malloc((size_t)P.n_hf * sizeof *P.shard_of))) {
        free(P.hf);
        return df_error(DF_ENOMEM, "out of memory saving %s", dir);
    }
    int n_shards = plan_shards(P.hf, P.n_hf, esize, max_shard_bytes, P.shard_of);
    staging s = {0};
    char file[64], *text = NULL;
    /* One shard is written as model.safetensors without an index, as transformers does. */
    for (int k = 0; !rc && k < n_shards; k++) {
        if (n_shards == 1)
            snprintf(file, sizeof file, SINGLE_FILE);
        else
            snprintf(file, sizeof file, SHARD_FMT, k + 1, n_shards);
        rc = stage_shard(&s, &P, dir, file, dtype, k);
    }
    if (!rc && n_shards > 1 && !(rc = index_json(&P, esize, n_shards, &text))) {
        rc = stage_text(&s, dir, INDEX_FILE, text);
        free(text);
    }
    df_model_config cfg = m->cfg;
    cfg.torch_dtype = dtype;
    if (!rc && !(rc = df_model_config_to_json(&cfg, m->config_json, &text))) {
        rc = stage_text(&s, dir, "config.json", text);
        free(text);
    }
    if (!rc && !(rc = generation_json(&cfg, dir, &text))) {
        rc = stage_text(&s, dir, "generation_config.json", text);
        free(text);
    }
    /* Weights first, index after its shards, config last. */
    for (int i = 0; !rc && i < s.n; i++)
        rc = df_tmpfile_commit(stage_at(&s, i));
    staging_discard(&s);
    free(P.shard_of);
    free(P.hf);
    if (rc)
        return df_error_wrap(rc, "saving model to %s", dir);
    remove_stale(dir, n_shards);
    rc = df_fsync_dir(dir);
    return rc ? df_error_wrap(rc, "saving model") : DF_OK;
}
