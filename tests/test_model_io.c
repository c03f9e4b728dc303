/* config.json parse / save and model load / save in the Hugging Face layout (model.h, io.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include "distflow/model.h"
#include "engine/hf_dir.h"
#include "model/hf_io.h"
#include "model/safetensors.h"

#include <dirent.h>
#include <ftw.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- helpers ---------------------------------------------------------------- */

/* dir/name in a caller buffer. */
static const char *in(char *buf, const char *dir, const char *name)
{
    size_t a = strlen(dir), n = strlen(name);
    assert_true(a + n + 2 <= 512);
    memcpy(buf, dir, a);
    buf[a] = '/';
    memcpy(buf + a + 1, name, n + 1);
    return buf;
}

static df_model_config tiny(const char *type, bool tied)
{
    df_model_config c;
    df_model_config_defaults(&c);
    snprintf(c.model_type, sizeof c.model_type, "%s", type);
    c.vocab_size = 64;
    c.hidden_size = 32;
    c.intermediate_size = 48;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 8;
    c.max_position_embeddings = 128;
    c.rope_theta = 1000000.0;
    c.rms_norm_eps = 1e-5;
    c.tie_word_embeddings = tied;
    bool llama = !strcmp(type, "llama");
    c.attention_bias = !llama;
    c.bos_token_id = llama ? 1 : -1;
    c.eos_token_ids[0] = llama ? 2 : 60;
    c.eos_token_ids[1] = 5;
    c.n_eos = llama ? 2 : 1;
    return c;
}

static df_model *make_model(const char *type, bool tied, uint64_t seed)
{
    df_model_config c = tiny(type, tied);
    df_model *m;
    assert_int_equal(df_model_create(&c, &m), 0);
    assert_int_equal(df_model_init_random(m, seed), 0);
    return m;
}

static void assert_cfg_equal(const df_model_config *a, const df_model_config *b)
{
    assert_string_equal(a->model_type, b->model_type);
    assert_int_equal(a->vocab_size, b->vocab_size);
    assert_int_equal(a->hidden_size, b->hidden_size);
    assert_int_equal(a->intermediate_size, b->intermediate_size);
    assert_int_equal(a->num_hidden_layers, b->num_hidden_layers);
    assert_int_equal(a->num_attention_heads, b->num_attention_heads);
    assert_int_equal(a->num_key_value_heads, b->num_key_value_heads);
    assert_int_equal(a->head_dim, b->head_dim);
    assert_int_equal(a->max_position_embeddings, b->max_position_embeddings);
    assert_true(a->rope_theta == b->rope_theta);
    assert_true(a->rms_norm_eps == b->rms_norm_eps);
    assert_true(a->initializer_range == b->initializer_range);
    assert_int_equal(a->tie_word_embeddings, b->tie_word_embeddings);
    assert_int_equal(a->attention_bias, b->attention_bias);
    assert_int_equal(a->o_proj_bias, b->o_proj_bias);
    assert_int_equal(a->qk_norm, b->qk_norm);
    assert_int_equal(a->rope_type, b->rope_type);
    assert_true(a->rope_factor == b->rope_factor);
    assert_true(a->rope_low_freq_factor == b->rope_low_freq_factor);
    assert_true(a->rope_high_freq_factor == b->rope_high_freq_factor);
    assert_int_equal(a->rope_original_max_pos, b->rope_original_max_pos);
    assert_int_equal(a->sliding_window, b->sliding_window);
    if (a->sliding_window > 0)
        assert_int_equal(a->max_window_layers, b->max_window_layers);
    assert_int_equal(a->bos_token_id, b->bos_token_id);
    assert_int_equal(a->n_eos, b->n_eos);
    for (int i = 0; i < a->n_eos; i++)
        assert_int_equal(a->eos_token_ids[i], b->eos_token_ids[i]);
}

static void assert_params_equal(const df_model *a, const df_model *b)
{
    assert_int_equal(a->n_tensors, b->n_tensors);
    assert_int_equal(a->n_params, b->n_params);
    assert_memory_equal(a->params, b->params, (size_t)a->n_params * sizeof(float));
}

static int count_files(const char *dir, const char *needle)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strstr(e->d_name, needle) != NULL;
    closedir(d);
    return n;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static json_t *load_json(const char *path)
{
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    if (!j)
        fail_msg("%s: %s", path, e.text);
    return j;
}

/* Expect df_model_load(dir) to fail with `code` and a message containing both phrases. */
static void expect_load_error(const char *dir, int code, const char *p1, const char *p2)
{
    df_model *m = (df_model *)0x1;
    df_clear_error();
    int rc = df_model_load(dir, &m);
    const char *msg = df_last_error();
    if (rc != code || !strstr(msg, p1) || (p2 && !strstr(msg, p2)))
        fail_msg("load: rc %d (want %d), message \"%s\" should contain \"%s\" and \"%s\"", rc,
                 code, msg, p1, p2 ? p2 : "");
    assert_null(m);
}

/* Save then load and compare, for every combination asked for in the brief. */
static void roundtrip(const char *dir, const char *type, bool tied, int64_t max_shard)
{
    df_model *m = make_model(type, tied, 42), *r;
    char b[512];
    assert_int_equal(df_model_save(m, dir, DF_DTYPE_F32, max_shard), 0);
    assert_int_equal(df_model_load(dir, &r), 0);
    assert_cfg_equal(&m->cfg, &r->cfg);
    assert_params_equal(m, r);
    assert_non_null(r->config_json);
    assert_non_null(strstr(r->config_json, tied ? "\"tie_word_embeddings\": true"
                                                : "\"tie_word_embeddings\": false"));
    assert_int_equal(r->cfg.torch_dtype, DF_DTYPE_F32);
    if (max_shard == 0) {
        assert_true(df_file_exists(in(b, dir, "model.safetensors")));
        assert_false(df_file_exists(in(b, dir, "model.safetensors.index.json")));
        df_st_file *f;
        assert_int_equal(df_st_open(in(b, dir, "model.safetensors"), &f), 0);
        assert_int_equal(df_st_count(f), m->n_tensors); /* tied: no lm_head.weight */
        df_st_tensor t;
        assert_int_equal(df_st_find(f, "lm_head.weight", &t), tied ? DF_ENOTFOUND : DF_OK);
        assert_string_equal(df_st_metadata(f, "format"), "pt");
        df_st_close(f);
    } else {
        assert_false(df_file_exists(in(b, dir, "model.safetensors")));
        json_t *ix = load_json(in(b, dir, "model.safetensors.index.json"));
        json_t *wm = json_object_get(ix, "weight_map");
        assert_int_equal(json_object_size(wm), m->n_tensors);
        int64_t total = 0;
        for (int i = 0; i < m->n_tensors; i++)
            total += m->tensors[i].numel * 4;
        assert_int_equal(json_integer_value(json_object_get(json_object_get(ix, "metadata"),
                                                            "total_size")), total);
        const char *last = json_string_value(json_object_get(wm, m->tensors[m->n_tensors - 1].name));
        int k, n;
        assert_int_equal(sscanf(last, "model-%d-of-%d.safetensors", &k, &n), 2);
        assert_int_equal(k, n);
        assert_true(n >= 3);
        for (int s = 1; s <= n; s++) {
            char name[64];
            snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s, n);
            df_st_file *f;
            assert_int_equal(df_st_open(in(b, dir, name), &f), 0);
            assert_string_equal(df_st_metadata(f, "format"), "pt");
            df_st_close(f);
        }
        json_decref(ix);
    }
    assert_int_equal(count_files(dir, ".tmp."), 0);
    df_model_free(m);
    df_model_free(r);
}

/* ---- model round trips ---------------------------------------------------------- */

static void test_roundtrip_all(void **state)
{
    static const char *types[] = {"qwen2", "llama"};
    char sub[512];
    for (int t = 0; t < 2; t++)
        for (int tied = 0; tied < 2; tied++)
            for (int sharded = 0; sharded < 2; sharded++) {
                snprintf(sub, sizeof sub, "%s/%s_%d_%d/nested", (char *)*state, types[t], tied,
                         sharded); /* also creates missing parents */
                roundtrip(sub, types[t], tied, sharded ? 16384 : 0);
            }
}

static void check_half_save(const char *dir, df_dtype dt, int64_t max_shard)
{
    df_model *m = make_model("qwen2", false, 9), *r;
    assert_int_equal(df_model_save(m, dir, dt, max_shard), 0);
    assert_int_equal(df_model_load(dir, &r), 0);
    assert_int_equal(r->cfg.torch_dtype, dt);
    assert_non_null(strstr(r->config_json, dt == DF_DTYPE_BF16 ? "\"torch_dtype\": \"bfloat16\""
                                                               : "\"torch_dtype\": \"float16\""));
    for (int t = 0; t < m->n_tensors; t++) {
        const df_param_desc *d = &m->tensors[t];
        for (int64_t i = 0; i < d->numel; i++) {
            float x = m->params[d->offset + i];
            float want = dt == DF_DTYPE_BF16 ? df_bf16_to_f32(df_f32_to_bf16(x))
                                             : df_f16_to_f32(df_f32_to_f16(x));
            if (r->params[d->offset + i] != want)
                fail_msg("%s[%lld]: %g loaded as %g, expected %g", d->name, (long long)i,
                         (double)x, (double)r->params[d->offset + i], (double)want);
        }
    }
    /* The file on disk is in the half dtype. */
    char b[512], file[64] = "model.safetensors";
    if (max_shard) {
        json_t *ix = load_json(in(b, dir, "model.safetensors.index.json"));
        snprintf(file, sizeof file, "%s", json_string_value(json_object_get(
            json_object_get(ix, "weight_map"), m->tensors[0].name)));
        json_decref(ix);
        assert_string_equal(file, "model-00001-of-00004.safetensors");
    }
    df_st_file *f;
    assert_int_equal(df_st_open(in(b, dir, file), &f), 0);
    df_st_tensor t;
    assert_int_equal(df_st_at(f, 0, &t), 0);
    assert_int_equal(t.dtype, dt);
    df_st_close(f);
    df_model_free(m);
    df_model_free(r);
}

static void test_half_precision_saves(void **state)
{
    char b[512];
    check_half_save(in(b, *state, "bf16"), DF_DTYPE_BF16, 0);
    check_half_save(in(b, *state, "f16"), DF_DTYPE_F16, 12000);
}

/* Write a hand-made weights file: all layout tensors, minus `skip`, plus extra ones. */
static void write_weights(const char *path, const df_model *m, const char *skip,
                          const char *extra_name, int extra_ndim, const int64_t *extra_shape,
                          const char *reshape_name)
{
    df_st_writer *w;
    assert_int_equal(df_st_writer_new(&w), 0);
    for (int i = 0; i < m->n_tensors; i++) {
        const df_param_desc *d = &m->tensors[i];
        if (skip && !strcmp(d->name, skip))
            continue;
        int64_t shape[2] = {d->shape[0], d->shape[1]};
        if (reshape_name && !strcmp(d->name, reshape_name)) /* transposed */
            shape[0] = d->shape[1], shape[1] = d->shape[0];
        assert_int_equal(df_st_writer_add_borrowed(w, d->name, DF_DTYPE_F32, d->ndim, shape,
                                                   m->params + d->offset), 0);
    }
    if (extra_name) {
        int64_t n = 1;
        for (int i = 0; i < extra_ndim; i++)
            n *= extra_shape[i];
        float *z = calloc((size_t)n, sizeof *z);
        assert_int_equal(df_st_writer_add(w, extra_name, DF_DTYPE_F32, extra_ndim, extra_shape, z), 0);
        free(z);
    }
    assert_int_equal(df_st_writer_write(w, path), 0);
    df_st_writer_free(w);
}

static void test_ignored_tensors(void **state)
{
    const char *dir = *state;
    char b[512];
    df_model *m = make_model("qwen2", true, 3), *r;
    assert_int_equal(df_model_config_save(&m->cfg, NULL, in(b, dir, "config.json")), 0);
    /* A tied checkpoint that carries lm_head anyway, and an old RoPE buffer. */
    int64_t lm[2] = {64, 32}, inv[1] = {4};
    df_st_writer *w;
    assert_int_equal(df_st_writer_new(&w), 0);
    for (int i = 0; i < m->n_tensors; i++) {
        const df_param_desc *d = &m->tensors[i];
        assert_int_equal(df_st_writer_add_borrowed(w, d->name, DF_DTYPE_BF16, d->ndim, d->shape,
                                                   m->params + d->offset), 0);
    }
    assert_int_equal(df_st_writer_add_borrowed(w, "lm_head.weight", DF_DTYPE_F32, 2, lm,
                                               m->w.embed), 0);
    float invf[4] = {1, 0.1f, 0.01f, 0.001f};
    assert_int_equal(df_st_writer_add(w, "model.layers.1.self_attn.rotary_emb.inv_freq",
                                      DF_DTYPE_F32, 1, inv, invf), 0);
    assert_int_equal(df_st_writer_write(w, in(b, dir, "model.safetensors")), 0);
    df_st_writer_free(w);
    assert_int_equal(df_model_load(dir, &r), 0);
    assert_float_equal(r->params[m->tensors[1].offset], 1.0f, 0); /* a layernorm weight */
    assert_true(r->params[5] == df_bf16_to_f32(df_f32_to_bf16(m->params[5])));
    df_model_free(r);
    df_model_free(m);
}

static void test_weight_errors(void **state)
{
    const char *dir = *state;
    char b[512], st[512];
    df_model *m = make_model("llama", false, 4);
    assert_int_equal(df_model_config_save(&m->cfg, NULL, in(b, dir, "config.json")), 0);
    in(st, dir, "model.safetensors");

    expect_load_error(dir, DF_ENOTFOUND, "no model.safetensors", dir);

    write_weights(st, m, "model.norm.weight", NULL, 0, NULL, NULL);
    expect_load_error(dir, DF_EINVAL, "missing tensor \"model.norm.weight\"", st);

    write_weights(st, m, "lm_head.weight", NULL, 0, NULL, NULL); /* untied needs lm_head */
    expect_load_error(dir, DF_EINVAL, "missing tensor \"lm_head.weight\"", st);

    int64_t s2[2] = {3, 4};
    write_weights(st, m, NULL, "model.layers.0.mlp.extra.weight", 2, s2, NULL);
    expect_load_error(dir, DF_EINVAL, "unexpected tensor \"model.layers.0.mlp.extra.weight\"", st);

    write_weights(st, m, NULL, NULL, 0, NULL, "model.layers.1.mlp.up_proj.weight");
    expect_load_error(dir, DF_EINVAL, "\"model.layers.1.mlp.up_proj.weight\" has shape [32, 48], "
                      "config.json implies [48, 32]", st);

    /* A truncated weights file names the file. */
    write_weights(st, m, NULL, NULL, 0, NULL, NULL);
    struct stat sb;
    assert_int_equal(stat(st, &sb), 0);
    assert_int_equal(truncate(st, sb.st_size - 4), 0);
    expect_load_error(dir, DF_EINVAL, st, "\"lm_head.weight\": data_offsets");
    assert_int_equal(truncate(st, 5), 0);
    expect_load_error(dir, DF_EINVAL, st, "truncated");
    unlink(st);

    /* No config.json at all. */
    unlink(in(b, dir, "config.json"));
    expect_load_error(dir, DF_ENOTFOUND, "config.json", NULL);
    df_model_free(m);
}

static void test_index_errors(void **state)
{
    const char *dir = *state;
    char b[512], ix[512];
    df_model *m = make_model("qwen2", false, 5);
    assert_int_equal(df_model_save(m, dir, DF_DTYPE_F32, 16384), 0);
    in(ix, dir, "model.safetensors.index.json");
    json_t *j = load_json(ix);
    char *orig = json_dumps(j, 0);

    /* weight_map puts a tensor in a shard that does not hold it. */
    json_t *wm = json_object_get(j, "weight_map");
    json_object_set_new(wm, "model.embed_tokens.weight",
                        json_string(json_string_value(json_object_get(wm, "lm_head.weight"))));
    assert_int_equal(json_dump_file(j, ix, 0), 0);
    expect_load_error(dir, DF_EINVAL, "\"model.embed_tokens.weight\"", "does not contain it");
    json_decref(j);

    /* An index naming a shard that is missing. */
    write_text(ix, orig);
    char shard[64], b2[512];
    json_t *j2 = json_loads(orig, 0, NULL);
    snprintf(shard, sizeof shard, "%s", json_string_value(json_object_get(
        json_object_get(j2, "weight_map"), "model.layers.1.mlp.up_proj.weight")));
    json_decref(j2);
    assert_string_not_equal(shard, "model-00001-of-00001.safetensors");
    rename(in(b, dir, shard), in(b2, dir, "moved"));
    expect_load_error(dir, DF_ENOTFOUND, shard, ix);
    rename(in(b2, dir, "moved"), in(b, dir, shard));

    write_text(ix, "{\"weight_map\": {\"a\": \"../x.safetensors\"}}");
    expect_load_error(dir, DF_EINVAL, "weight_map[\"a\"]", ix);
    write_text(ix, "{\"metadata\": {}}");
    expect_load_error(dir, DF_EINVAL, "missing \"weight_map\"", ix);
    write_text(ix, "{\"weight_map\": ");
    expect_load_error(dir, DF_EINVAL, "invalid JSON", ix);

    /* The same tensor in two shards. */
    write_weights(in(b, dir, "a.safetensors"), m, NULL, NULL, 0, NULL, NULL);
    int64_t hs[1] = {32};
    df_st_writer *w;
    assert_int_equal(df_st_writer_new(&w), 0);
    assert_int_equal(df_st_writer_add_borrowed(w, "model.norm.weight", DF_DTYPE_F32, 1, hs,
                                               m->w.final_norm), 0);
    assert_int_equal(df_st_writer_write(w, in(b, dir, "b.safetensors")), 0);
    df_st_writer_free(w);
    write_text(ix, "{\"weight_map\": {\"model.embed_tokens.weight\": \"a.safetensors\", "
                   "\"model.norm.weight\": \"b.safetensors\"}}");
    expect_load_error(dir, DF_EINVAL, "b.safetensors: tensor \"model.norm.weight\" is also in",
                      "a.safetensors");

    /* Back to the original: loads again. */
    write_text(ix, orig);
    df_model *r;
    assert_int_equal(df_model_load(dir, &r), 0);
    assert_params_equal(m, r);
    df_model_free(r);
    free(orig);
    df_model_free(m);
}

/* ---- save behaviour ----------------------------------------------------------------- */

static void test_save_replaces_and_keeps_others(void **state)
{
    const char *dir = *state;
    char b[512];
    write_text(in(b, dir, "tokenizer.json"), "{\"version\": \"1.0\"}");
    write_text(in(b, dir, "generation_config.json"), "{\"temperature\": 0.7, \"eos_token_id\": 9}");
    df_model *m1 = make_model("llama", true, 1), *m2 = make_model("llama", true, 2), *r;
    assert_int_equal(df_model_save(m1, dir, DF_DTYPE_F32, 8192), 0); /* sharded */
    assert_true(count_files(dir, "-of-") >= 3);
    assert_int_equal(df_model_save(m2, dir, DF_DTYPE_F32, 0), 0); /* single: shards removed */
    assert_int_equal(count_files(dir, "-of-"), 0);
    assert_false(df_file_exists(in(b, dir, "model.safetensors.index.json")));
    assert_int_equal(df_model_load(dir, &r), 0);
    assert_params_equal(m2, r);
    df_model_free(r);
    assert_int_equal(df_model_save(m1, dir, DF_DTYPE_F32, 8192), 0); /* sharded again */
    assert_false(df_file_exists(in(b, dir, "model.safetensors")));
    assert_int_equal(df_model_load(dir, &r), 0);
    assert_params_equal(m1, r);
    df_model_free(r);

    char *tok;
    assert_int_equal(df_read_file(in(b, dir, "tokenizer.json"), &tok, NULL), 0);
    assert_string_equal(tok, "{\"version\": \"1.0\"}");
    free(tok);
    /* generation_config.json keeps its keys; bos / eos follow the config (eos: a list of 2). */
    json_t *g = load_json(in(b, dir, "generation_config.json"));
    assert_true(json_real_value(json_object_get(g, "temperature")) == 0.7);
    assert_int_equal(json_integer_value(json_object_get(g, "bos_token_id")), 1);
    json_t *eos = json_object_get(g, "eos_token_id");
    assert_int_equal(json_array_size(eos), 2);
    assert_int_equal(json_integer_value(json_array_get(eos, 0)), 2);
    assert_int_equal(json_integer_value(json_array_get(eos, 1)), 5);
    json_decref(g);
    df_model_free(m1);
    df_model_free(m2);
}

static void test_fresh_generation_config(void **state)
{
    char b[512];
    df_model *m = make_model("qwen2", true, 1);
    assert_int_equal(df_model_save(m, *state, DF_DTYPE_BF16, 0), 0);
    char *g;
    assert_int_equal(df_read_file(in(b, *state, "generation_config.json"), &g, NULL), 0);
    assert_string_equal(g, "{\n  \"_from_model_config\": true,\n  \"eos_token_id\": 60,\n"
                           "  \"transformers_version\": \"" DF_HF_TRANSFORMERS_VERSION "\"\n}\n");
    free(g);
    df_model_free(m);
}

/* A write that fails part-way (file size limit) leaves the previous model intact. */
static void test_failed_save_leaves_nothing(void **state)
{
    const char *dir = *state;
    char b[512];
    df_model *m1 = make_model("qwen2", false, 1), *m2 = make_model("qwen2", false, 2), *r;
    assert_int_equal(df_model_save(m1, dir, DF_DTYPE_F32, 0), 0);
    char *cfg_before;
    assert_int_equal(df_read_file(in(b, dir, "config.json"), &cfg_before, NULL), 0);

    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 4096;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    int rc = df_model_save(m2, dir, DF_DTYPE_BF16, 0);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, prev);
    assert_int_equal(rc, DF_EIO);
    assert_non_null(strstr(df_last_error(), "model.safetensors"));
    assert_non_null(strstr(df_last_error(), dir));

    assert_int_equal(count_files(dir, ".tmp."), 0);
    char *cfg_after;
    assert_int_equal(df_read_file(in(b, dir, "config.json"), &cfg_after, NULL), 0);
    assert_string_equal(cfg_before, cfg_after);
    assert_int_equal(df_model_load(dir, &r), 0);
    assert_params_equal(m1, r);
    df_model_free(r);
    free(cfg_before);
    free(cfg_after);

    /* Argument and path errors. */
    write_text(in(b, dir, "afile"), "x");
    assert_int_equal(df_model_save(m1, in(b, dir, "afile/sub"), DF_DTYPE_F32, 0), DF_EIO);
    assert_non_null(strstr(df_last_error(), "afile"));
    assert_int_equal(df_model_save(m1, dir, (df_dtype)7, 0), DF_EINVAL);
    assert_int_equal(df_model_save(m1, dir, DF_DTYPE_F32, -1), DF_EINVAL);
    df_model_free(m1);
    df_model_free(m2);
}

/* ---- config.json -------------------------------------------------------------------- */

static const char *k_qwen25 =
    "{\n  \"architectures\": [\"Qwen2ForCausalLM\"],\n  \"attention_dropout\": 0.0,\n"
    "  \"bos_token_id\": 151643,\n  \"eos_token_id\": 151645,\n  \"hidden_act\": \"silu\",\n"
    "  \"hidden_size\": 896,\n  \"initializer_range\": 0.02,\n  \"intermediate_size\": 4864,\n"
    "  \"max_position_embeddings\": 32768,\n  \"max_window_layers\": 21,\n"
    "  \"model_type\": \"qwen2\",\n  \"num_attention_heads\": 14,\n  \"num_hidden_layers\": 24,\n"
    "  \"num_key_value_heads\": 2,\n  \"rms_norm_eps\": 1e-06,\n  \"rope_scaling\": null,\n"
    "  \"rope_theta\": 1000000.0,\n  \"sliding_window\": 32768,\n"
    "  \"tie_word_embeddings\": true,\n  \"torch_dtype\": \"bfloat16\",\n"
    "  \"transformers_version\": \"4.43.1\",\n  \"use_cache\": true,\n"
    "  \"use_sliding_window\": false,\n  \"vocab_size\": 151936\n}\n";

static void test_config_real_files(void **state)
{
    (void)state;
    df_model_config c;
    assert_int_equal(df_model_config_parse(k_qwen25, "qwen/config.json", &c), 0);
    assert_string_equal(c.model_type, "qwen2");
    assert_int_equal(c.vocab_size, 151936);
    assert_int_equal(c.hidden_size, 896);
    assert_int_equal(c.intermediate_size, 4864);
    assert_int_equal(c.num_hidden_layers, 24);
    assert_int_equal(c.num_attention_heads, 14);
    assert_int_equal(c.num_key_value_heads, 2);
    assert_int_equal(c.head_dim, 64);
    assert_int_equal(c.max_position_embeddings, 32768);
    assert_true(c.rope_theta == 1000000.0);
    assert_true(c.rms_norm_eps == 1e-6);
    assert_true(c.initializer_range == 0.02);
    assert_true(c.tie_word_embeddings);
    assert_true(c.attention_bias);
    assert_int_equal(c.bos_token_id, 151643);
    assert_int_equal(c.n_eos, 1);
    assert_int_equal(c.eos_token_ids[0], 151645);
    assert_int_equal(c.torch_dtype, DF_DTYPE_BF16);

    const char *llama =
        "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false, "
        "\"bos_token_id\": 128000, \"eos_token_id\": [128001, 128008, 128009], \"head_dim\": 64, "
        "\"hidden_act\": \"silu\", \"hidden_size\": 2048, \"intermediate_size\": 8192, "
        "\"max_position_embeddings\": 131072, \"mlp_bias\": false, \"model_type\": \"llama\", "
        "\"num_attention_heads\": 32, \"num_hidden_layers\": 16, \"num_key_value_heads\": 8, "
        "\"rms_norm_eps\": 1e-05, \"rope_scaling\": null, \"rope_theta\": 500000.0, "
        "\"tie_word_embeddings\": true, \"dtype\": \"float16\", \"vocab_size\": 128256}";
    assert_int_equal(df_model_config_parse(llama, NULL, &c), 0);
    assert_string_equal(c.model_type, "llama");
    assert_false(c.attention_bias);
    assert_int_equal(c.head_dim, 64);
    assert_int_equal(c.num_key_value_heads, 8);
    assert_int_equal(c.n_eos, 3);
    assert_int_equal(c.eos_token_ids[2], 128009);
    assert_true(c.rms_norm_eps == 1e-5);
    assert_int_equal(c.torch_dtype, DF_DTYPE_F16);
}

static void test_config_defaults(void **state)
{
    (void)state;
    df_model_config c;
    const char *q = "{\"model_type\": \"qwen2\", \"vocab_size\": 100, \"hidden_size\": 64, "
                    "\"intermediate_size\": 96, \"num_hidden_layers\": 1, "
                    "\"num_attention_heads\": 4, \"num_key_value_heads\": null}";
    assert_int_equal(df_model_config_parse(q, NULL, &c), 0);
    assert_int_equal(c.num_key_value_heads, 4);
    assert_int_equal(c.head_dim, 16);
    assert_int_equal(c.max_position_embeddings, 32768);
    assert_true(c.rope_theta == 10000.0);
    assert_true(c.rms_norm_eps == 1e-6);
    assert_true(c.initializer_range == 0.02);
    assert_false(c.tie_word_embeddings);
    assert_true(c.attention_bias);
    assert_int_equal(c.bos_token_id, -1);
    assert_int_equal(c.n_eos, 0);
    assert_int_equal(c.torch_dtype, DF_DTYPE_F32);
    const char *l = "{\"model_type\": \"llama\", \"vocab_size\": 100, \"hidden_size\": 64, "
                    "\"intermediate_size\": 96, \"num_hidden_layers\": 1, "
                    "\"num_attention_heads\": 4, \"rope_scaling\": {\"rope_type\": \"default\"}}";
    assert_int_equal(df_model_config_parse(l, NULL, &c), 0);
    assert_int_equal(c.max_position_embeddings, 2048);
    assert_false(c.attention_bias);
    assert_int_equal(c.bos_token_id, 1);
    assert_int_equal(c.n_eos, 1);
    assert_int_equal(c.eos_token_ids[0], 2);
}

static void expect_config_error(const char *text, int code, const char *phrase)
{
    df_model_config c;
    df_clear_error();
    int rc = df_model_config_parse(text, "dir/config.json", &c);
    const char *msg = df_last_error();
    if (rc != code || !strstr(msg, "dir/config.json") || !strstr(msg, phrase))
        fail_msg("rc %d (want %d): \"%s\" should name dir/config.json and say \"%s\"", rc, code,
                 msg, phrase);
}

static void test_config_errors(void **state)
{
    char base[1024];
#define CFG(extra) (snprintf(base, sizeof base, "{\"model_type\": \"qwen2\", \"vocab_size\": 100, " \
                             "\"hidden_size\": 64, \"intermediate_size\": 96, "                 \
                             "\"num_hidden_layers\": 1%s}", extra), base)
    expect_config_error(CFG(""), DF_EINVAL, "missing required key \"num_attention_heads\"");
    expect_config_error("{\"vocab_size\": 1}", DF_EINVAL, "missing required key \"model_type\"");
    expect_config_error(CFG(", \"num_attention_heads\": \"4\""), DF_EINVAL,
                        "key \"num_attention_heads\" must be an integer, got a string");
    expect_config_error(CFG(", \"num_attention_heads\": 4.0"), DF_EINVAL,
                        "must be an integer, got a real number");
    expect_config_error(CFG(", \"num_attention_heads\": 4, \"tie_word_embeddings\": \"yes\""),
                        DF_EINVAL, "key \"tie_word_embeddings\" must be a boolean");
    expect_config_error(CFG(", \"num_attention_heads\": 4, \"rope_theta\": \"1e4\""), DF_EINVAL,
                        "key \"rope_theta\" must be a number");
    expect_config_error(CFG(", \"num_attention_heads\": 4, \"eos_token_id\": [1, \"x\"]"),
                        DF_EINVAL, "eos_token_id");
    expect_config_error(CFG(", \"num_attention_heads\": 4, \"num_key_value_heads\": 3"), DF_EINVAL,
                        "num_key_value_heads");
    expect_config_error(CFG(", \"num_attention_heads\": 5"), DF_EINVAL, "not divisible");
    expect_config_error(CFG(", \"num_attention_heads\": 4, \"rope_scaling\": {\"rope_type\": "
                            "\"dynamic\", \"factor\": 4.0}"), DF_EUNSUPPORTED,
                        "key \"rope_scaling\": rope_type \"dynamic\" is not supported");
    expect_config_error("{\"model_type\": \"llama\", \"vocab_size\": 100, \"hidden_size\": 64, "
                        "\"intermediate_size\": 96, \"num_hidden_layers\": 1, "
                        "\"num_attention_heads\": 4, \"use_sliding_window\": true}", DF_EUNSUPPORTED,
                        "key \"use_sliding_window\" true: llama has no sliding-window attention");
    expect_config_error(CFG(", \"num_attention_heads\": 4, \"hidden_act\": \"gelu\""),
                        DF_EUNSUPPORTED, "hidden_act");
    expect_config_error(CFG(", \"num_attention_heads\": 4, \"torch_dtype\": \"float64\""),
                        DF_EUNSUPPORTED, "torch_dtype");
    expect_config_error(CFG(", \"num_attention_heads\": 4, \"architectures\": "
                            "[\"Qwen2ForQuestionAnswering\"]"), DF_EUNSUPPORTED,
                        "Qwen2ForQuestionAnswering");
    expect_config_error(CFG(", \"num_attention_heads\": 4, \"eos_token_id\": [1,2,3,4,5,6,7,8,9]"),
                        DF_EUNSUPPORTED, "eos_token_id");
    expect_config_error(CFG(", \"num_attention_heads\": 4, \"mlp_bias\": true"), DF_EUNSUPPORTED,
                        "key \"mlp_bias\" true");
    expect_config_error("{\"model_type\": \"gpt2\"}", DF_EUNSUPPORTED, "\"gpt2\" is not supported");
    expect_config_error("{\"model_type\": \"qwen2\",", DF_EINVAL, "invalid JSON");
    expect_config_error("[1]", DF_EINVAL, "not a JSON object");
#undef CFG
    df_model_config c;
    assert_int_equal(df_model_config_load("/nonexistent/config.json", &c), DF_ENOTFOUND);
    assert_non_null(strstr(df_last_error(), "/nonexistent/config.json"));
    (void)state;
}

/* The closed-form count is the layout's blob; sizes read from a file that overflow 64-bit counts, or
   that no machine here could hold, are refused before anything is allocated (they used to write past
   the blob, or take seconds and gigabytes to build the tensor table first). */
static void test_model_sizes(void **state)
{
    (void)state;
    const struct {
        const char *type;
        bool tied;
        int64_t labels;
    } cases[] = {{"qwen2", false, 0}, {"qwen2", true, 0}, {"llama", false, 0}, {"llama", true, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        df_model_config c = tiny(cases[i].type, cases[i].tied);
        c.num_labels = cases[i].labels;
        int64_t count, tensors, total;
        df_param_desc *d = NULL;
        int n;
        assert_int_equal(df_model_param_count(&c, &count, &tensors), 0);
        assert_int_equal(df_model_layout(&c, &d, &n, &total), 0);
        assert_int_equal(count, total);
        assert_int_equal(tensors, n);
        free(d);
    }
    df_model_config c = tiny("qwen2", false);
    c.hidden_size = (int64_t)1 << 62; /* hidden x vocab overflows int64 */
    int64_t count;
    df_model *m = NULL;
    assert_error_mentions(df_model_param_count(&c, &count, NULL), DF_EINVAL, "the model's size overflows");
    assert_error_mentions(df_model_create(&c, &m), DF_EINVAL, "overflows");
    assert_null(m);
    c = tiny("qwen2", false);
    c.hidden_size = 4096, c.intermediate_size = 11008, c.num_attention_heads = 32, c.num_key_value_heads = 32;
    c.head_dim = 128, c.num_hidden_layers = 100000000; /* 2e13 floats, 80 TB: more than any machine here */
    assert_int_equal(df_model_param_count(&c, &count, NULL), 0);
    assert_true(count > ((int64_t)1 << 37));
    assert_error_mentions(df_model_create(&c, &m), DF_ENOMEM, "more than this machine's memory");
    assert_null(m);
}

/* `distflow score`: a prompt + response longer than max_position_embeddings (256 here) is refused
   naming both lengths, where it used to run for minutes past the model's positions. */
static void test_score_cli_limits(void **state)
{
    const char *dir = *state;
    const char *texts[] = {"the cat sat on the mat", "a dog ran in the park", "one two three four"};
    df_test_tiny_model_ex(dir, texts, 3, 300, 16, 1, 7, 256);
    char long_prompt[701], cmd[2048], out[4096];
    memset(long_prompt, 'z', 700); /* no z in the training texts: a token per byte */
    long_prompt[700] = '\0';
    snprintf(cmd, sizeof cmd, "%s/distflow score --model %s/model --prompt 'the cat' --response ' sat' 2>&1",
             DF_BINARY_DIR, dir);
    assert_int_equal(df_test_command(cmd, out, sizeof out), 0);
    assert_non_null(strstr(out, "\"log_probs\": ["));
    snprintf(cmd, sizeof cmd, "%s/distflow score --model %s/model --prompt '%s' --response x 2>&1", DF_BINARY_DIR,
             dir, long_prompt);
    assert_int_equal(df_test_command(cmd, out, sizeof out), 1);
    if (!strstr(out, "+ response (1 tokens) exceed the model's max_position_embeddings of 256"))
        fail_msg("unexpected output: %s", out);

    /* a NaN weight: an error (refused at load, naming the tensor), never `"log_probs": [-nan]` (not JSON) */
    df_model *m = NULL;
    df_tokenizer *tok = NULL;
    char src[600], bad[600];
    snprintf(src, sizeof src, "%s/model", dir);
    snprintf(bad, sizeof bad, "%s/nan_model", dir);
    assert_int_equal(df_hf_dir_load(src, NULL, NULL, &m, &tok), 0);
    m->params[df_model_find_tensor(m, "model.norm.weight")->offset] = NAN;
    assert_int_equal(df_hf_dir_save(m, DF_DTYPE_F32, src, NULL, bad), 0);
    df_model_free(m);
    df_tokenizer_free(tok);
    snprintf(cmd, sizeof cmd, "%s/distflow score --model %s --prompt 'the cat' --response ' sat' 2>&1", DF_BINARY_DIR,
             bad);
    assert_int_equal(df_test_command(cmd, out, sizeof out), 1);
    if (!strstr(out, "\"model.norm.weight\" holds a non-finite value (nan)") || strstr(out, "log_probs"))
        fail_msg("unexpected output: %s", out);
}

/* `distflow init-model`: --tokenizer is a directory whose files are copied into --out; a tokenizer.json
   path is refused (it would load, and leave --out without a tokenizer), and nothing is written. */
static void test_init_model_cli(void **state)
{
    const char *dir = *state;
    const char *texts[] = {"the cat sat on the mat", "a dog ran in the park"};
    df_test_tiny_model(dir, texts, 2, 300, 16, 1, 7);
    char cmd[2048], out[4096], path[600];
    const char *fmt = "%s/distflow init-model --config %s/model/config.json --tokenizer %s/model%s --out %s/%s 2>&1";
    snprintf(cmd, sizeof cmd, fmt, DF_BINARY_DIR, dir, dir, "/tokenizer.json", dir, "from_file");
    assert_int_equal(df_test_command(cmd, out, sizeof out), 1);
    if (!strstr(out, "/tokenizer.json: not a directory"))
        fail_msg("unexpected output: %s", out);
    snprintf(path, sizeof path, "%s/from_file", dir);
    assert_false(df_dir_exists(path));
    snprintf(cmd, sizeof cmd, fmt, DF_BINARY_DIR, dir, dir, "", dir, "from_dir");
    if (df_test_command(cmd, out, sizeof out))
        fail_msg("init-model: %s", out);
    snprintf(path, sizeof path, "%s/from_dir/tokenizer.json", dir);
    assert_true(df_file_exists(path));
    /* again into the same directory: a tokenizer file of the earlier contents that this tokenizer
       lacks goes (transformers would read it with the new ones) */
    snprintf(path, sizeof path, "%s/model/special_tokens_map.json", dir);
    assert_false(df_file_exists(path));
    snprintf(path, sizeof path, "%s/from_dir/special_tokens_map.json", dir);
    assert_int_equal(df_write_file_atomic(path, "{}", 2), 0);
    if (df_test_command(cmd, out, sizeof out))
        fail_msg("init-model again: %s", out);
    assert_false(df_file_exists(path));
    snprintf(path, sizeof path, "%s/from_dir/tokenizer.json", dir);
    assert_true(df_file_exists(path));
}

static void test_config_roundtrip_keeps_unknown_keys(void **state)
{
    char path[512];
    in(path, *state, "config.json");
    const char *orig =
        "{\"_name_or_path\": \"org/model\", \"custom_key\": {\"nested\": [1, 2.5, \"s\"]}, "
        "\"use_cache\": false, \"sliding_window\": 32768, \"eos_token_id\": [151645], "
        "\"bos_token_id\": 151643, \"model_type\": \"qwen2\", \"vocab_size\": 151936, "
        "\"hidden_size\": 896, \"intermediate_size\": 4864, \"num_hidden_layers\": 24, "
        "\"num_attention_heads\": 14, \"num_key_value_heads\": 2, \"rms_norm_eps\": 1e-06, "
        "\"rope_theta\": 1000000.0, \"torch_dtype\": \"float32\", "
        "\"transformers_version\": \"4.40.0\"}";
    df_model_config c;
    assert_int_equal(df_model_config_parse(orig, NULL, &c), 0);
    c.vocab_size = 1000; /* known keys get updated */
    c.tie_word_embeddings = true;
    c.torch_dtype = DF_DTYPE_BF16;
    assert_int_equal(df_model_config_save(&c, orig, path), 0);

    df_model_config back;
    assert_int_equal(df_model_config_load(path, &back), 0);
    assert_cfg_equal(&c, &back);
    assert_int_equal(back.torch_dtype, DF_DTYPE_BF16);
    json_t *j = load_json(path), *o = json_loads(orig, 0, NULL);
    assert_true(json_equal(json_object_get(j, "custom_key"), json_object_get(o, "custom_key")));
    assert_string_equal(json_string_value(json_object_get(j, "_name_or_path")), "org/model");
    assert_true(json_is_false(json_object_get(j, "use_cache")));
    assert_int_equal(json_integer_value(json_object_get(j, "sliding_window")), 32768);
    assert_string_equal(json_string_value(json_object_get(j, "transformers_version")), "4.40.0");
    assert_true(json_is_array(json_object_get(j, "eos_token_id"))); /* list stays a list */
    assert_int_equal(json_integer_value(json_object_get(j, "vocab_size")), 1000);
    assert_null(json_object_get(j, "head_dim"));       /* qwen2: derived, not written */
    assert_null(json_object_get(j, "attention_bias")); /* qwen2: not an HF key */
    json_decref(j);
    json_decref(o);
    /* transformers' formatting: indent 2, sorted keys, Python float repr. */
    char *text;
    assert_int_equal(df_read_file(path, &text, NULL), 0);
    const char *head = "{\n  \"_name_or_path\": \"org/model\",\n  \"architectures\": [\n"
                       "    \"Qwen2ForCausalLM\"\n  ],\n";
    assert_true(!strncmp(text, head, strlen(head)));
    assert_non_null(strstr(text, "\n  \"rms_norm_eps\": 1e-06,\n"));
    assert_non_null(strstr(text, "\n  \"rope_theta\": 1000000.0,\n"));
    assert_non_null(strstr(text, "\n  \"torch_dtype\": \"bfloat16\",\n"));
    free(text);
}

static void test_config_fresh_save(void **state)
{
    char path[512];
    in(path, *state, "config.json");
    df_model_config c = tiny("llama", false), back;
    c.head_dim = 16; /* not hidden / heads */
    assert_int_equal(df_model_config_save(&c, NULL, path), 0);
    assert_int_equal(df_model_config_load(path, &back), 0);
    assert_cfg_equal(&c, &back);
    json_t *j = load_json(path);
    assert_string_equal(json_string_value(json_array_get(json_object_get(j, "architectures"), 0)),
                        "LlamaForCausalLM");
    assert_string_equal(json_string_value(json_object_get(j, "hidden_act")), "silu");
    assert_true(json_is_null(json_object_get(j, "rope_scaling")));
    assert_true(json_is_false(json_object_get(j, "attention_bias")));
    assert_int_equal(json_integer_value(json_object_get(j, "head_dim")), 16);
    assert_string_equal(json_string_value(json_object_get(j, "transformers_version")),
                        DF_HF_TRANSFORMERS_VERSION);
    json_decref(j);
    /* qwen2 without biases (an engine-only variant) round-trips through "attention_bias": false. */
    c = tiny("qwen2", true);
    c.attention_bias = false;
    assert_int_equal(df_model_config_save(&c, NULL, path), 0);
    assert_int_equal(df_model_config_load(path, &back), 0);
    assert_false(back.attention_bias);
    /* An invalid config or original is refused. */
    c.num_key_value_heads = 3;
    assert_int_equal(df_model_config_save(&c, NULL, path), DF_EINVAL);
    c = tiny("qwen2", true);
    assert_int_equal(df_model_config_save(&c, "[1]", path), DF_EINVAL);
    /* llama's attention_bias is q/k/v AND o_proj biases (LlamaAttention): one without the
       other has no HF form. */
    c = tiny("llama", true);
    c.attention_bias = true;
    assert_int_equal(df_model_config_save(&c, NULL, path), DF_EINVAL);
    c.o_proj_bias = true;
    assert_int_equal(df_model_config_save(&c, NULL, path), 0);
    assert_int_equal(df_model_config_load(path, &back), 0);
    assert_true(back.attention_bias && back.o_proj_bias);
}

/* A run's chat template saved with the model (chat_template.jinja: the file transformers 4.47+ reads
 * first) loads back as the directory's template; the source directory's own jinja file is copied, and
 * one left by an earlier save is removed when the new save has none. */
static void test_save_chat_template(void **state)
{
    const char *dir = *state;
    const char *texts[] = {"the cat sat on the mat", "a dog ran in the park"};
    df_test_tiny_model(dir, texts, 2, 300, 16, 1, 7);
    char src[600], out[600], jinja[700];
    snprintf(src, sizeof src, "%s/model", dir);
    snprintf(out, sizeof out, "%s/saved", dir);
    snprintf(jinja, sizeof jinja, "%s/chat_template.jinja", out);
    df_model *m = NULL;
    df_tokenizer *tok = NULL;
    assert_int_equal(df_hf_dir_load(src, NULL, NULL, &m, &tok), 0);
    const char *tmpl = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}";
    assert_int_equal(df_hf_dir_save(m, DF_DTYPE_F32, src, tmpl, out), 0);
    df_tokenizer *back = NULL;
    assert_int_equal(df_tokenizer_load(out, &back), 0);
    assert_string_equal(df_tokenizer_chat_template(back), tmpl);
    df_tokenizer_free(back);
    /* saved again from a source without the file and no template: the earlier file goes */
    assert_int_equal(df_hf_dir_save(m, DF_DTYPE_F32, src, NULL, out), 0);
    assert_false(df_file_exists(jinja));
    /* a source directory's jinja file travels with its other tokenizer files */
    char sj[700];
    snprintf(sj, sizeof sj, "%s/chat_template.jinja", src);
    assert_int_equal(df_write_file_atomic(sj, tmpl, strlen(tmpl)), 0);
    assert_int_equal(df_hf_dir_save(m, DF_DTYPE_F32, src, NULL, out), 0);
    assert_int_equal(df_tokenizer_load(out, &back), 0);
    assert_string_equal(df_tokenizer_chat_template(back), tmpl);
    df_tokenizer_free(back);
    df_model_free(m);
    df_tokenizer_free(tok);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, df_test_mkdtemp, df_test_rmtree)
    const struct CMUnitTest tests[] = {
        T(test_roundtrip_all),
        T(test_half_precision_saves),
        T(test_ignored_tensors),
        T(test_weight_errors),
        T(test_index_errors),
        T(test_save_replaces_and_keeps_others),
        T(test_fresh_generation_config),
        T(test_failed_save_leaves_nothing),
        cmocka_unit_test(test_config_real_files),
        cmocka_unit_test(test_config_defaults),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_model_sizes),
        T(test_config_roundtrip_keeps_unknown_keys),
        T(test_config_fresh_save),
        T(test_score_cli_limits),
        T(test_init_model_cli),
        T(test_save_chat_template),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
