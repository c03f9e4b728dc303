/* LoRA adapters in PEFT's files (distflow/lora.h): adapter_model.safetensors + adapter_config.json. */
#include "distflow/lora.h"
#include "model/hf_io.h"
#include "model/safetensors.h"
#include "util/fsutil.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WEIGHTS_FILE "adapter_model.safetensors"
#define CONFIG_FILE "adapter_config.json"

/* The names of c's modules that mask targets, in alphabetical order (how the config lists them,
   and messages). */
static int sorted_targets(const df_model_config *c, unsigned mask, const char **names)
{
    df_lora_module mods[DF_LORA_N_TARGETS];
    const int n = df_lora_modules(c, mask, mods);
    for (int i = 0; i < n; i++) {
        int k = i;
        for (; k > 0 && strcmp(names[k - 1], mods[i].name) > 0; k--)
            names[k] = names[k - 1];
        names[k] = mods[i].name;
    }
    return n;
}

/* "[k_proj, q_proj]" into buf, for messages. */
static const char *mask_str(const df_model_config *c, unsigned mask, char *buf, size_t cap)
{
    const char *names[DF_LORA_N_TARGETS];
    int n = sorted_targets(c, mask, names);
    size_t len = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < n && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? ", " : "", names[i]);
    if (len < cap)
        snprintf(buf + len, cap - len, "]");
    return buf;
}

/* ---- saving ---------------------------------------------------------------------- */

/* adapter_config.json's text (sorted keys, indent 2: df_json_dumps_py). */
static int config_text(const df_lora *l, const char *base_model, char **out)
{
    *out = NULL;
    json_t *o = json_object(), *tm = json_array();
    const char *names[DF_LORA_N_TARGETS];
    int n = sorted_targets(&l->mcfg, l->cfg.targets, names), bad = !o || !tm;
    for (int i = 0; !bad && i < n; i++)
        bad |= json_array_append_new(tm, json_string(names[i]));
    /* An integral alpha is written as an int, as verl / PEFT configs carry it (16, not 16.0). */
    const double a = l->cfg.alpha;
    json_t *alpha = a < 9.0e15 && a == (double)(json_int_t)a ? json_integer((json_int_t)a) : json_real(a);
    if (!bad) {
        bad |= json_object_set_new(o, "peft_type", json_string("LORA"));
        /* a value model (the critic): PEFT's token classification, its score head saved whole */
        bad |= json_object_set_new(o, "task_type", json_string(l->head >= 0 ? "TOKEN_CLS" : "CAUSAL_LM"));
        if (l->head >= 0)
            bad |= json_object_set_new(o, "modules_to_save", json_pack("[s]", "score"));
        bad |= json_object_set_new(o, "r", json_integer((json_int_t)l->cfg.rank));
        bad |= json_object_set_new(o, "lora_alpha", alpha);
        bad |= json_object_set_new(o, "target_modules", tm);
        bad |= json_object_set_new(o, "lora_dropout", json_real(0.0));
        bad |= json_object_set_new(o, "bias", json_string("none"));
        bad |= json_object_set_new(o, "fan_in_fan_out", json_false());
        bad |= json_object_set_new(o, "use_rslora", json_false());
        bad |= json_object_set_new(o, "use_dora", json_false());
        bad |= json_object_set_new(o, "init_lora_weights", json_true());
        bad |= json_object_set_new(o, "base_model_name_or_path",
                                   base_model ? json_string(base_model) : json_null());
    } else {
        json_decref(tm);
        json_decref(alpha);
    }
    *out = bad ? NULL : df_json_dumps_py(o);
    json_decref(o);
    return *out ? DF_OK : df_error(DF_ENOMEM, "out of memory writing %s", CONFIG_FILE);
}

/* Write the tensors into the open temporary t (F32, PEFT names, {"format": "pt"}). */
static int weights_to(const df_lora *l, df_tmpfile *t)
{
    df_st_writer *w;
    int rc = df_st_writer_new(&w);
    if (rc)
        return rc;
    rc = df_st_writer_set_metadata(w, "format", "pt");
    for (int i = 0; !rc && i < l->n_tensors; i++) {
        const df_param_desc *d = &l->tensors[i];
        rc = df_st_writer_add_borrowed(w, d->name, DF_DTYPE_F32, d->ndim, d->shape,
                                       l->params + d->offset);
    }
    if (!rc)
        rc = df_st_writer_write_to(w, t);
    df_st_writer_free(w);
    return rc;
}

/* Open dir/name as a temporary. */
static int open_tmp(df_tmpfile *t, const char *dir, const char *name)
{
    char *path = df_path_join(dir, name);
    if (!path)
        return df_error(DF_ENOMEM, "out of memory saving %s", dir);
    int rc = df_tmpfile_open(t, path);
    free(path);
    return rc;
}

int df_lora_save_peft(const df_lora *l, const char *dir, const char *base_model)
{
    int rc = df_mkdir_p(dir);
    if (rc)
        return df_error_wrap(rc, "saving LoRA adapter");
    /* Both files are staged (written, fsynced) before either is renamed; weights first,
     * config last, so a failure never leaves a config naming a partial weights file. */
    df_tmpfile wt = {.fd = -1}, ct = {.fd = -1};
    char *text = NULL;
    rc = config_text(l, base_model, &text);
    if (!rc && !(rc = open_tmp(&wt, dir, WEIGHTS_FILE)) && !(rc = weights_to(l, &wt)))
        rc = df_tmpfile_close(&wt);
    if (!rc && !(rc = open_tmp(&ct, dir, CONFIG_FILE)) &&
        !(rc = df_tmpfile_write(&ct, text, strlen(text))))
        rc = df_tmpfile_close(&ct);
    if (!rc)
        rc = df_tmpfile_commit(&wt);
    if (!rc)
        rc = df_tmpfile_commit(&ct);
    if (!rc)
        rc = df_fsync_dir(dir);
    df_tmpfile_discard(&wt);
    df_tmpfile_discard(&ct);
    free(text);
    return rc ? df_error_wrap(rc, "saving LoRA adapter to %s", dir) : DF_OK;
}

/* ---- loading: adapter_config.json ------------------------------------------------ */

/* A boolean key that must be false or absent (use_rslora, use_dora). */
static int check_false(json_t *root, const char *src, const char *key, const char *why)
{
    json_t *v = df_cfg_get(root, key);
    if (!v)
        return DF_OK;
    if (!json_is_boolean(v))
        return df_cfg_wrong_type(src, key, "a boolean", v);
    return json_is_true(v) ? df_error(DF_EUNSUPPORTED, "%s: key \"%s\" is true (%s)", src, key, why)
                           : DF_OK;
}

/* target_modules: a list of names, "all-linear" or one module name. */
static int parse_target_modules(json_t *root, const char *src, unsigned *mask)
{
    json_t *v = df_cfg_get(root, "target_modules");
    char where[600];
    snprintf(where, sizeof where, "%s: key \"target_modules\"", src);
    if (!v)
        return df_error(DF_EINVAL, "%s is missing or null (PEFT resolves it when saving)", where);
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        return df_lora_parse_targets(&s, 1, where, mask);
    }
    if (!json_is_array(v))
        return df_cfg_wrong_type(src, "target_modules", "a list of module names or a string", v);
    size_t n = json_array_size(v);
    if (n > 64)
        return df_error(DF_EINVAL, "%s: %zu names", where, n);
    const char *names[64];
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(v, i);
        if (!json_is_string(e))
            return df_error(DF_EINVAL, "%s: element %zu must be a string, got %s", where, i,
                            df_cfg_type_name(e));
        names[i] = json_string_value(e);
    }
    return df_lora_parse_targets(names, (int)n, where, mask);
}

/* Keys PEFT writes that would change what the adapter means: refused unless empty. */
static int check_unsupported(json_t *root, const char *src)
{
    static const char *const patterns[] = {"rank_pattern", "alpha_pattern"};
    for (int i = 0; i < 2; i++) {
        json_t *v = df_cfg_get(root, patterns[i]);
        if (v && !json_is_object(v))
            return df_cfg_wrong_type(src, patterns[i], "an object", v);
        if (v && json_object_size(v) > 0)
            return df_error(DF_EUNSUPPORTED, "%s: key \"%s\" is not empty (one rank / alpha for "
                            "every module only)", src, patterns[i]);
    }
    if (df_cfg_get(root, "layers_to_transform"))
        return df_error(DF_EUNSUPPORTED, "%s: key \"layers_to_transform\" is not null (adapters on "
                        "every layer only)", src);
    json_t *ex = df_cfg_get(root, "exclude_modules"); /* PEFT writes null when unused */
    if (ex && !(json_is_string(ex) && !*json_string_value(ex)) && !(json_is_array(ex) && !json_array_size(ex)))
        return df_error(DF_EUNSUPPORTED, "%s: key \"exclude_modules\" is set (distflow reads adapters whose "
                        "target_modules alone name their modules)", src);
    json_t *m = df_cfg_get(root, "modules_to_save");
    for (size_t i = 0; m && json_is_array(m) && i < json_array_size(m); i++) {
        const char *name = json_string_value(json_array_get(m, i));
        if (!name || (strcmp(name, "score") && strcmp(name, "classifier")))
            return df_error(DF_EUNSUPPORTED, "%s: key \"modules_to_save\" names %s (fully trained "
                            "modules: a value model's score head only)", src,
                            name ? name : "a non-string");
    }
    if (m && !json_is_array(m))
        return df_error(DF_EUNSUPPORTED, "%s: key \"modules_to_save\" is not null (fully trained "
                        "modules: a value model's score head only)", src);
    json_t *b = df_cfg_get(root, "bias");
    if (b && !json_is_string(b))
        return df_cfg_wrong_type(src, "bias", "a string", b);
    if (b && strcmp(json_string_value(b), "none"))
        return df_error(DF_EUNSUPPORTED, "%s: key \"bias\" is \"%s\" (only \"none\": no trained "
                        "biases)", src, json_string_value(b));
    return DF_OK;
}

/* The adapter's settings from adapter_config.json's root: peft_type, r, lora_alpha,
 * target_modules, and the settings this engine cannot run refused. */
static int parse_config(json_t *root, const char *src, df_lora_config *out)
{
    if (!json_is_object(root))
        return df_error(DF_EINVAL, "%s: must be a JSON object, got %s", src, df_cfg_type_name(root));
    json_t *pt = df_cfg_get(root, "peft_type");
    if (!pt)
        return df_error(DF_EINVAL, "%s: missing key \"peft_type\"", src);
    if (!json_is_string(pt))
        return df_cfg_wrong_type(src, "peft_type", "a string", pt);
    if (strcmp(json_string_value(pt), "LORA"))
        return df_error(DF_EUNSUPPORTED, "%s: key \"peft_type\" is \"%s\" (only \"LORA\")", src,
                        json_string_value(pt));
    int rc = df_cfg_get_int(root, src, "r", true, &out->rank);
    if (rc)
        return rc;
    if (out->rank < 1)
        return df_error(DF_EINVAL, "%s: key \"r\" is %lld (must be >= 1)", src, (long long)out->rank);
    json_t *a = df_cfg_get(root, "lora_alpha");
    if (!a)
        return df_error(DF_EINVAL, "%s: missing key \"lora_alpha\"", src);
    if (!json_is_number(a))
        return df_cfg_wrong_type(src, "lora_alpha", "a number", a);
    out->alpha = json_number_value(a);
    if (!(out->alpha > 0))
        return df_error(DF_EINVAL, "%s: key \"lora_alpha\" must be > 0", src);
    if ((rc = parse_target_modules(root, src, &out->targets)))
        return rc;
    if ((rc = check_false(root, src, "use_rslora", "rank-stabilized scale alpha / sqrt(r) is not "
                          "supported")) ||
        (rc = check_false(root, src, "use_dora", "DoRA's magnitude vectors are not supported")))
        return rc;
    return check_unsupported(root, src);
}

/* The file's settings against l's: the same rank, alpha (exactly: both sides are the same decimal
 * text parsed to the nearest double) and target set. */
static int check_config(const df_lora *l, const df_lora_config *c, const char *src)
{
    if (c->rank != l->cfg.rank)
        return df_error(DF_EINVAL, "%s: key \"r\" is %lld, the adapter's rank (lora_rank) is %lld",
                        src, (long long)c->rank, (long long)l->cfg.rank);
    if (c->alpha != l->cfg.alpha) {
        char fa[32], fb[32];
        df_format_double_py(c->alpha, fa, sizeof fa);
        df_format_double_py(l->cfg.alpha, fb, sizeof fb);
        return df_error(DF_EINVAL, "%s: key \"lora_alpha\" is %s, the adapter's lora_alpha is %s",
                        src, fa, fb);
    }
    if (c->targets != l->cfg.targets) {
        char fa[128], fb[128];
        return df_error(DF_EINVAL, "%s: key \"target_modules\" is %s, the adapter's target modules "
                        "are %s", src, mask_str(&l->mcfg, c->targets, fa, sizeof fa),
                        mask_str(&l->mcfg, l->cfg.targets, fb, sizeof fb));
    }
    return DF_OK;
}

int df_lora_read_peft_config(const char *dir, df_lora_config *out)
{
    *out = (df_lora_config){0};
    char *path = df_path_join(dir, CONFIG_FILE), *text = NULL;
    if (!path)
        return df_error(DF_ENOMEM, "out of memory loading %s", dir);
    int rc = df_read_file(path, &text, NULL);
    if (rc == DF_ENOTFOUND)
        rc = df_error(DF_ENOTFOUND, "%s: no such file (not a PEFT adapter directory)", path);
    json_t *root = NULL;
    if (!rc) {
        json_error_t jerr;
        root = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
        if (!root)
            rc = df_error(DF_EINVAL, "%s: invalid JSON: %s (line %d, column %d)", path, jerr.text,
                          jerr.line, jerr.column);
    }
    df_lora_config c = {0};
    if (!rc)
        rc = parse_config(root, path, &c);
    if (!rc)
        *out = c;
    json_decref(root);
    free(text);
    free(path);
    return rc;
}

static int load_config(const df_lora *l, const char *dir)
{
    df_lora_config c;
    int rc = df_lora_read_peft_config(dir, &c);
    if (rc)
        return rc;
    char *path = df_path_join(dir, CONFIG_FILE);
    rc = path ? check_config(l, &c, path) : df_error(DF_ENOMEM, "out of memory loading %s", dir);
    free(path);
    return rc;
}

/* ---- loading: adapter_model.safetensors ------------------------------------------- */

/* Why a file tensor is not one of l's: PEFT's in-memory name carries the adapter name. */
static int extra_tensor(const df_lora *l, const char *src, const char *name)
{
    const char *p = strstr(name, ".lora_A.");
    if (!p)
        p = strstr(name, ".lora_B.");
    if (p && strcmp(p + 7, ".weight"))
        return df_error(DF_EINVAL, "%s: tensor \"%s\" carries an adapter name (PEFT's in-memory "
                        "name; adapter files name it \"%.*s.weight\")", src, name,
                        (int)(p + 7 - name), name);
    return df_error(DF_EINVAL, "%s: extra tensor \"%s\" (not one of the adapter's %d tensors)", src,
                    name, l->n_tensors);
}

/* Check every tensor of f against l, then convert them into stage (l's layout). Extra tensors are
 * looked for first, so a file of PEFT's in-memory names gets that message, not "missing". */
static int read_tensors(const df_lora *l, const df_st_file *f, float *stage)
{
    const char *src = df_st_path(f);
    df_st_tensor t;
    for (int i = 0; i < df_st_count(f); i++) {
        int rc = df_st_at(f, i, &t);
        if (rc)
            return rc;
        if (!df_lora_find_tensor(l, t.name))
            return extra_tensor(l, src, t.name);
    }
    for (int i = 0; i < l->n_tensors; i++) {
        const df_param_desc *d = &l->tensors[i];
        if (df_st_find(f, d->name, &t) != DF_OK)
            return df_error(DF_EINVAL, "%s: missing tensor \"%s\"", src, d->name);
        if (t.dtype != DF_DTYPE_F32 && t.dtype != DF_DTYPE_BF16 && t.dtype != DF_DTYPE_F16)
            return df_error(DF_EUNSUPPORTED, "%s: tensor \"%s\" has dtype %s (F32, BF16 or F16 "
                            "only)", src, d->name, df_st_dtype_name(t.dtype));
        if (t.ndim != d->ndim || t.shape[0] != d->shape[0] || (d->ndim == 2 && t.shape[1] != d->shape[1])) {
            char got[96], want[96];
            df_st_shape_str(got, sizeof got, t.ndim, t.shape);
            df_st_shape_str(want, sizeof want, d->ndim, d->shape);
            return df_error(DF_EINVAL, "%s: tensor \"%s\" has shape %s, expected %s", src, d->name,
                            got, want);
        }
    }
    for (int i = 0; i < l->n_tensors; i++) {
        const df_param_desc *d = &l->tensors[i];
        int rc = df_st_find(f, d->name, &t);
        if (!rc)
            rc = df_st_tensor_to_f32(&t, stage + d->offset);
        if (rc)
            return df_error_wrap(rc, "%s", src);
    }
    return DF_OK;
}

int df_lora_load_peft(df_lora *l, const char *dir)
{
    if (!df_dir_exists(dir))
        return df_error(DF_ENOTFOUND, "loading LoRA adapter: no directory %s", dir);
    int rc = load_config(l, dir);
    if (rc)
        return df_error_wrap(rc, "loading LoRA adapter");
    char *path = df_path_join(dir, WEIGHTS_FILE);
    if (!path)
        return df_error(DF_ENOMEM, "out of memory loading %s", dir);
    df_st_file *f = NULL;
    rc = df_st_open(path, &f);
    if (rc == DF_ENOTFOUND)
        rc = df_error(DF_ENOTFOUND, "%s: no such file", path);
    free(path);
    /* Converted into a copy, so l->params changes only once every tensor read. */
    const size_t bytes = (size_t)l->n_params * sizeof(float);
    float *stage = rc ? NULL : malloc(bytes > 0 ? bytes : 1);
    if (!rc && !stage)
        rc = df_error(DF_ENOMEM, "LoRA: %lld floats staging %s", (long long)l->n_params, dir);
    if (!rc) {
        memcpy(stage, l->params, bytes); /* keeps the padding between tensors */
        rc = read_tensors(l, f, stage);
    }
    if (!rc)
        memcpy(l->params, stage, bytes);
    free(stage);
    df_st_close(f);
    return rc ? df_error_wrap(rc, "loading LoRA adapter") : DF_OK;
}

int df_lora_apply_peft(df_model *m, const char *dir)
{
    df_lora_config c;
    df_lora *l = NULL;
    int rc = df_lora_read_peft_config(dir, &c);
    if (!rc)
        rc = df_lora_create(m, &c, 0, &l);
    if (!rc)
        rc = df_lora_load_peft(l, dir);
    if (!rc)
        rc = df_lora_merge(l, m);
    df_lora_free(l);
    return rc;
}
