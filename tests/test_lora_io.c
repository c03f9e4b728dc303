/* LoRA adapters in PEFT's files: df_lora_save_peft / df_lora_load_peft (distflow/lora.h, model/lora_io.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include "distflow/lora.h"
#include "distflow/model.h"
#include "model/safetensors.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- helpers ---------------------------------------------------------------- */

enum { R = 4 };

/* The micro model with 4 query heads: q_proj is [32, 16], so its A [r, 16] and B [32, r] differ
 * from the swapped shapes; down_proj [16, 24] likewise (hidden 16, intermediate 24, kv_dim 8). */
static df_model *model(void)
{
    df_model_config c = df_test_micro_model_config();
    c.num_attention_heads = 4;
    c.num_key_value_heads = 1;
    c.intermediate_size = 24;
    df_model *m;
    assert_int_equal(df_model_create(&c, &m), 0);
    assert_int_equal(df_model_init_random(m, 7), 0);
    return m;
}

static df_lora *make_lora(const df_model *m, unsigned targets, double alpha, uint64_t seed)
{
    df_lora_config lc = {.rank = R, .alpha = alpha, .targets = targets};
    df_lora *l;
    assert_int_equal(df_lora_create(m, &lc, seed, &l), 0);
    return l;
}

/* Distinct values in every tensor (B is zero after create, so a lost B would show). */
static void fill(df_lora *l, float base)
{
    for (int i = 0; i < l->n_tensors; i++) {
        const df_param_desc *d = &l->tensors[i];
        for (int64_t k = 0; k < d->numel; k++)
            l->params[d->offset + k] = base + 0.001f * (float)(i * 1000 + k) - 0.37f * (float)(k % 3);
    }
}

static bool same_params(const df_lora *a, const df_lora *b)
{
    return a->n_params == b->n_params &&
           !memcmp(a->params, b->params, (size_t)a->n_params * sizeof(float));
}

static char *path_in(const char *dir, const char *name)
{
    char *p = df_path_join(dir, name);
    assert_non_null(p);
    return p;
}

static json_t *read_config(const char *dir)
{
    char *p = path_in(dir, "adapter_config.json");
    json_error_t e;
    json_t *o = json_load_file(p, JSON_REJECT_DUPLICATES, &e);
    if (!o)
        fail_msg("%s: %s", p, e.text);
    free(p);
    return o;
}

/* Replace adapter_config.json by o (decref'd). */
static void write_config(const char *dir, json_t *o)
{
    char *p = path_in(dir, "adapter_config.json");
    assert_int_equal(json_dump_file(o, p, JSON_INDENT(2)), 0);
    json_decref(o);
    free(p);
}

/* adapter_config.json with key set to v (NULL: key removed). */
static void set_config_key(const char *dir, const char *key, json_t *v)
{
    json_t *o = read_config(dir);
    if (v)
        json_object_set_new(o, key, v);
    else
        json_object_del(o, key);
    write_config(dir, o);
}

/* Write adapter_model.safetensors from l's tensors in `dtype`; tensor `skip` left out (-1: none),
 * `rename` (when not NULL) replaces tensor 0's name, tensor `transpose` gets its shape swapped,
 * and `extra` (when not NULL) is added as a copy of tensor 0. */
typedef struct {
    df_dtype dtype;
    int skip, transpose;
    const char *rename, *extra;
} variant;

static void write_weights(const df_lora *l, const char *dir, variant v)
{
    df_st_writer *w;
    assert_int_equal(df_st_writer_new(&w), 0);
    for (int i = 0; i < l->n_tensors; i++) {
        const df_param_desc *d = &l->tensors[i];
        if (i == v.skip)
            continue;
        int64_t shape[2] = {d->shape[0], d->shape[1]};
        if (i == v.transpose)
            shape[0] = d->shape[1], shape[1] = d->shape[0];
        const char *name = i == 0 && v.rename ? v.rename : d->name;
        assert_int_equal(df_st_writer_add(w, name, v.dtype, 2, shape, l->params + d->offset), 0);
    }
    if (v.extra)
        assert_int_equal(df_st_writer_add(w, v.extra, v.dtype, 2, l->tensors[0].shape, l->params), 0);
    char *p = path_in(dir, "adapter_model.safetensors");
    assert_int_equal(df_st_writer_write(w, p), 0);
    df_st_writer_free(w);
    free(p);
}

static const variant plain = {.dtype = DF_DTYPE_F32, .skip = -1, .transpose = -1};

/* Load must fail with `code`, a message naming `file` and `what`, and leave l->params as they were. */
static void expect_refused(df_lora *l, const char *dir, int code, const char *file, const char *what)
{
    const size_t bytes = (size_t)l->n_params * sizeof(float);
    float *before = malloc(bytes);
    assert_non_null(before);
    memcpy(before, l->params, bytes);
    int rc = df_lora_load_peft(l, dir);
    if (rc != code)
        fail_msg("rc %d, expected %d (%s)", rc, code, df_last_error());
    print_message("  refused: %s\n", df_last_error());
    assert_last_error_mentions(file);
    assert_last_error_mentions(what);
    assert_memory_equal(before, l->params, bytes);
    free(before);
}

/* A saved adapter (all seven targets) in state dir and a second adapter (another seed) to load into. */
typedef struct {
    df_model *m;
    df_lora *src, *dst;
} fixture;

static fixture saved(const char *dir, unsigned targets)
{
    fixture f;
    f.m = model();
    f.src = make_lora(f.m, targets, 16.0, 1);
    fill(f.src, 0.25f);
    assert_int_equal(df_lora_save_peft(f.src, dir, "Qwen/Qwen2.5-0.5B"), 0);
    f.dst = make_lora(f.m, targets, 16.0, 2);
    assert_false(same_params(f.src, f.dst));
    return f;
}

static void fixture_free(fixture *f)
{
    df_lora_free(f->src);
    df_lora_free(f->dst);
    df_model_free(f->m);
}

/* ---- round trip and the written files ------------------------------------------ */

static void test_round_trip(void **state)
{
    const char *dir = *state;
    fixture f = saved(dir, DF_LORA_ALL_LINEAR);
    assert_int_equal(df_lora_load_peft(f.dst, dir), 0);
    assert_true(same_params(f.src, f.dst));
    fixture_free(&f);

    /* A subset, a non-integral alpha, into a directory that does not exist yet. */
    char *sub = path_in(dir, "a/b");
    df_model *m = model();
    const unsigned mask = 1u << DF_LORA_K | 1u << DF_LORA_UP;
    df_lora *a = make_lora(m, mask, 12.5, 3), *b = make_lora(m, mask, 12.5, 4);
    fill(a, -1.5f);
    assert_int_equal(df_lora_save_peft(a, sub, NULL), 0);
    assert_false(same_params(a, b));
    assert_int_equal(df_lora_load_peft(b, sub), 0);
    assert_true(same_params(a, b));
    json_t *o = read_config(sub);
    assert_true(json_is_real(json_object_get(o, "lora_alpha")));
    assert_true(json_real_value(json_object_get(o, "lora_alpha")) == 12.5);
    assert_true(json_is_null(json_object_get(o, "base_model_name_or_path")));
    json_decref(o);
    df_lora_free(a);
    df_lora_free(b);
    df_model_free(m);
    free(sub);
}

static void test_config_keys(void **state)
{
    const char *dir = *state;
    fixture f = saved(dir, DF_LORA_ALL_LINEAR);
    json_t *o = read_config(dir);
    json_t *r = json_object_get(o, "r"), *alpha = json_object_get(o, "lora_alpha");
    assert_true(json_is_integer(r));
    assert_int_equal(json_integer_value(r), R);
    assert_true(json_is_integer(alpha)); /* 16, as verl's / PEFT's configs carry it */
    assert_int_equal(json_integer_value(alpha), 16);
    assert_string_equal(json_string_value(json_object_get(o, "peft_type")), "LORA");
    assert_string_equal(json_string_value(json_object_get(o, "task_type")), "CAUSAL_LM");
    assert_string_equal(json_string_value(json_object_get(o, "base_model_name_or_path")),
                        "Qwen/Qwen2.5-0.5B");
    assert_string_equal(json_string_value(json_object_get(o, "bias")), "none");
    assert_true(json_is_false(json_object_get(o, "fan_in_fan_out")));
    assert_true(json_is_false(json_object_get(o, "use_rslora")));
    assert_true(json_is_false(json_object_get(o, "use_dora")));
    assert_true(json_is_true(json_object_get(o, "init_lora_weights")));
    assert_true(json_is_number(json_object_get(o, "lora_dropout")));
    assert_true(json_number_value(json_object_get(o, "lora_dropout")) == 0.0);
    assert_int_equal(json_object_size(o), 12);
    static const char *const sorted[] = {"down_proj", "gate_proj", "k_proj", "o_proj",
                                         "q_proj", "up_proj", "v_proj"};
    json_t *tm = json_object_get(o, "target_modules");
    assert_true(json_is_array(tm));
    assert_int_equal(json_array_size(tm), 7);
    for (size_t i = 0; i < 7; i++)
        assert_string_equal(json_string_value(json_array_get(tm, i)), sorted[i]);
    json_decref(o);

    /* As transformers / PEFT write it: sorted keys, indent 2, trailing newline. */
    char *p = path_in(dir, "adapter_config.json"), *text;
    assert_int_equal(df_read_file(p, &text, NULL), 0);
    const char *head = "{\n  \"base_model_name_or_path\": \"Qwen/Qwen2.5-0.5B\",\n  \"bias\": \"none\",\n";
    assert_memory_equal(text, head, strlen(head));
    assert_non_null(strstr(text, "  \"lora_dropout\": 0.0,\n"));
    assert_non_null(strstr(text, "  \"target_modules\": [\n    \"down_proj\",\n"));
    const char *tail = "  \"use_rslora\": false\n}\n";
    assert_true(strlen(text) > strlen(tail));
    assert_string_equal(text + strlen(text) - strlen(tail), tail);
    free(text);
    free(p);
    fixture_free(&f);
}

static void test_tensor_names_shapes(void **state)
{
    const char *dir = *state;
    const unsigned mask = 1u << DF_LORA_Q | 1u << DF_LORA_DOWN;
    fixture f = saved(dir, mask);
    char *p = path_in(dir, "adapter_model.safetensors");
    df_st_file *sf;
    assert_int_equal(df_st_open(p, &sf), 0);
    assert_int_equal(df_st_count(sf), 2 * 2 * 2); /* layers x targets x (A, B) */
    assert_non_null(df_st_metadata(sf, "format"));
    assert_string_equal(df_st_metadata(sf, "format"), "pt");
    const int64_t H = 16, I = 24, qd = 32;
    struct { const char *mod; int64_t out, in; } want[2] = {{"self_attn.q_proj", qd, H},
                                                             {"mlp.down_proj", H, I}};
    for (int li = 0; li < 2; li++)
        for (int k = 0; k < 2; k++)
            for (int ab = 0; ab < 2; ab++) {
                char name[160];
                snprintf(name, sizeof name, "base_model.model.model.layers.%d.%s.lora_%c.weight", li,
                         want[k].mod, ab ? 'B' : 'A');
                df_st_tensor t;
                if (df_st_find(sf, name, &t))
                    fail_msg("%s", df_last_error());
                assert_int_equal(t.dtype, DF_DTYPE_F32);
                assert_int_equal(t.ndim, 2);
                assert_int_equal(t.shape[0], ab ? want[k].out : R);
                assert_int_equal(t.shape[1], ab ? R : want[k].in);
                const df_param_desc *d = df_lora_find_tensor(f.src, name);
                assert_non_null(d);
                assert_int_equal(t.nbytes, (size_t)d->numel * sizeof(float));
                assert_memory_equal(t.data, f.src->params + d->offset, t.nbytes);
            }
    df_st_close(sf);
    free(p);
    fixture_free(&f);
}

/* BF16 and F16 tensors load as their float32 values (exact widening). */
static void test_half_tensors(void **state)
{
    const char *dir = *state;
    fixture f = saved(dir, DF_LORA_ALL_LINEAR);
    const df_dtype dts[2] = {DF_DTYPE_BF16, DF_DTYPE_F16};
    for (int k = 0; k < 2; k++) {
        variant v = plain;
        v.dtype = dts[k];
        write_weights(f.src, dir, v);
        assert_int_equal(df_lora_load_peft(f.dst, dir), 0);
        int64_t changed = 0;
        for (int i = 0; i < f.src->n_tensors; i++) {
            const df_param_desc *d = &f.src->tensors[i];
            for (int64_t j = 0; j < d->numel; j++) {
                float x = f.src->params[d->offset + j];
                float want = k == 0 ? df_bf16_to_f32(df_f32_to_bf16(x)) : df_f16_to_f32(df_f32_to_f16(x));
                float got = f.dst->params[d->offset + j];
                if (memcmp(&got, &want, sizeof got))
                    fail_msg("%s[%lld] = %.9g, expected %.9g", d->name, (long long)j, got, want);
                changed += got != x;
            }
        }
        assert_true(changed > 0); /* the values did go through the half type */
    }
    fixture_free(&f);
}

/* Keys PEFT writes that load does not check, target_modules as "all-linear" or in another order,
 * lora_dropout other than 0. */
static void test_peft_config_accepted(void **state)
{
    const char *dir = *state;
    fixture f = saved(dir, DF_LORA_ALL_LINEAR);
    json_t *o = read_config(dir);
    json_t *extra = json_pack("{s:n, s:n, s:n, s:n, s:{}, s:{}, s:b, s:f, s:n, s:b, s:n, s:s}",
                              "revision", "layers_to_transform", "layers_pattern",
                              "modules_to_save", "rank_pattern", "alpha_pattern", "inference_mode",
                              1, "lora_dropout", 0.05, "megatron_config", "use_rslora", 0,
                              "exclude_modules", "bias", "none");
    assert_non_null(extra);
    assert_int_equal(json_object_update(o, extra), 0);
    json_decref(extra);
    json_object_set_new(o, "target_modules", json_string("all-linear"));
    write_config(dir, o);
    assert_int_equal(df_lora_load_peft(f.dst, dir), 0);
    assert_true(same_params(f.src, f.dst));
    fixture_free(&f);

    /* A list in another order, and a single module name as a string. */
    const unsigned mask = 1u << DF_LORA_V | 1u << DF_LORA_Q;
    f = saved(dir, mask);
    set_config_key(dir, "target_modules", json_pack("[s, s]", "v_proj", "q_proj"));
    assert_int_equal(df_lora_load_peft(f.dst, dir), 0);
    assert_true(same_params(f.src, f.dst));
    fixture_free(&f);
    f = saved(dir, 1u << DF_LORA_O);
    set_config_key(dir, "target_modules", json_string("o_proj"));
    assert_int_equal(df_lora_load_peft(f.dst, dir), 0);
    assert_true(same_params(f.src, f.dst));
    fixture_free(&f);
}

/* ---- refusals --------------------------------------------------------------------- */

static void test_missing_files(void **state)
{
    const char *dir = *state;
    fixture f = saved(dir, DF_LORA_ALL_LINEAR);
    char *nope = path_in(dir, "nope");
    expect_refused(f.dst, nope, DF_ENOTFOUND, "nope", "directory");
    free(nope);

    char *w = path_in(dir, "adapter_model.safetensors"), *c = path_in(dir, "adapter_config.json");
    char *w2 = path_in(dir, "w.bak");
    assert_int_equal(rename(w, w2), 0);
    expect_refused(f.dst, dir, DF_ENOTFOUND, "adapter_model.safetensors", "no such file");
    assert_int_equal(rename(w2, w), 0);
    assert_int_equal(unlink(c), 0);
    expect_refused(f.dst, dir, DF_ENOTFOUND, "adapter_config.json", "no such file");
    free(w);
    free(w2);
    free(c);
    fixture_free(&f);
}

static void test_bad_json(void **state)
{
    const char *dir = *state;
    fixture f = saved(dir, DF_LORA_ALL_LINEAR);
    char *c = path_in(dir, "adapter_config.json");
    const char *bad = "{\"peft_type\": \"LORA\", \"r\": 4,";
    assert_int_equal(df_write_file_atomic(c, bad, strlen(bad)), 0);
    expect_refused(f.dst, dir, DF_EINVAL, "adapter_config.json", "invalid JSON");
    const char *list = "[1, 2]\n";
    assert_int_equal(df_write_file_atomic(c, list, strlen(list)), 0);
    expect_refused(f.dst, dir, DF_EINVAL, "adapter_config.json", "object");
    free(c);
    fixture_free(&f);
}

/* One config key changed: the code, and what the message must name beside the file. */
typedef struct {
    const char *key;
    const char *json; /* the new value as JSON text; NULL: the key removed */
    int code;
    const char *what, *what2;
} key_case;

static void test_config_refused(void **state)
{
    const char *dir = *state;
    static const key_case cases[] = {
        {"peft_type", "\"IA3\"", DF_EUNSUPPORTED, "\"peft_type\"", "IA3"},
        {"peft_type", NULL, DF_EINVAL, "\"peft_type\"", "missing"},
        {"r", "8", DF_EINVAL, "\"r\" is 8", "rank (lora_rank) is 4"},
        {"r", "4.0", DF_EINVAL, "\"r\"", "integer"},
        {"r", NULL, DF_EINVAL, "\"r\"", "missing"},
        {"lora_alpha", "32", DF_EINVAL, "\"lora_alpha\" is 32", "lora_alpha is 16"},
        {"lora_alpha", "\"16\"", DF_EINVAL, "\"lora_alpha\"", "a number"},
        {"target_modules", "[\"q_proj\", \"v_proj\"]", DF_EINVAL, "\"target_modules\" is [q_proj, v_proj]",
         "[down_proj, gate_proj, k_proj, o_proj, q_proj, up_proj, v_proj]"},
        {"target_modules", "[\"q_proj\", \"lm_head\"]", DF_EINVAL, "\"target_modules\"", "lm_head"},
        {"target_modules", "null", DF_EINVAL, "\"target_modules\"", "null"},
        {"use_rslora", "true", DF_EUNSUPPORTED, "\"use_rslora\"", "true"},
        {"use_dora", "true", DF_EUNSUPPORTED, "\"use_dora\"", "true"},
        {"use_dora", "1", DF_EINVAL, "\"use_dora\"", "boolean"},
        {"rank_pattern", "{\"q_proj\": 8}", DF_EUNSUPPORTED, "\"rank_pattern\"", "not empty"},
        {"alpha_pattern", "{\"q_proj\": 8}", DF_EUNSUPPORTED, "\"alpha_pattern\"", "not empty"},
        {"layers_to_transform", "[0]", DF_EUNSUPPORTED, "\"layers_to_transform\"", "not null"},
        {"exclude_modules", "\".*o_proj\"", DF_EUNSUPPORTED, "\"exclude_modules\"", "is set"},
        {"exclude_modules", "[\"o_proj\"]", DF_EUNSUPPORTED, "\"exclude_modules\"", "is set"},
        {"modules_to_save", "[\"lm_head\"]", DF_EUNSUPPORTED, "\"modules_to_save\"", "lm_head"},
        {"bias", "\"lora_only\"", DF_EUNSUPPORTED, "\"bias\"", "lora_only"},
    };
    fixture f = saved(dir, DF_LORA_ALL_LINEAR);
    char *c = path_in(dir, "adapter_config.json"), *good;
    assert_int_equal(df_read_file(c, &good, NULL), 0);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const key_case *k = &cases[i];
        json_t *v = NULL;
        if (k->json) {
            json_error_t e;
            v = json_loads(k->json, JSON_DECODE_ANY, &e);
            assert_non_null(v);
        }
        set_config_key(dir, k->key, v);
        print_message("%s = %s\n", k->key, k->json ? k->json : "(removed)");
        expect_refused(f.dst, dir, k->code, "adapter_config.json", k->what);
        assert_last_error_mentions(k->what2);
        assert_int_equal(df_write_file_atomic(c, good, strlen(good)), 0);
    }
    /* The restored config loads: the cases failed for their key, not for the rewrite. */
    assert_int_equal(df_lora_load_peft(f.dst, dir), 0);
    assert_true(same_params(f.src, f.dst));
    free(good);
    free(c);
    fixture_free(&f);
}

static void test_tensors_refused(void **state)
{
    const char *dir = *state;
    const unsigned mask = 1u << DF_LORA_Q | 1u << DF_LORA_DOWN;
    fixture f = saved(dir, mask);
    const char *q0a = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight";
    assert_string_equal(f.src->tensors[0].name, q0a);

    variant v = plain;
    v.skip = 3; /* layer 0's down_proj lora_B */
    write_weights(f.src, dir, v);
    expect_refused(f.dst, dir, DF_EINVAL, "adapter_model.safetensors", "missing tensor");
    assert_last_error_mentions(f.src->tensors[3].name);

    v = plain;
    v.extra = "base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight"; /* k not targeted */
    write_weights(f.src, dir, v);
    expect_refused(f.dst, dir, DF_EINVAL, "adapter_model.safetensors", "extra tensor");
    assert_last_error_mentions(v.extra);

    v = plain; /* PEFT's in-memory name, with the adapter name */
    v.rename = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight";
    write_weights(f.src, dir, v);
    expect_refused(f.dst, dir, DF_EINVAL, "adapter_model.safetensors", "adapter name");
    assert_last_error_mentions(v.rename);

    for (int i = 0; i < 4; i++) { /* q A, q B, down A, down B of layer 0, each with shape swapped */
        v = plain;
        v.transpose = i;
        write_weights(f.src, dir, v);
        expect_refused(f.dst, dir, DF_EINVAL, "adapter_model.safetensors", "shape");
        assert_last_error_mentions(f.src->tensors[i].name);
    }

    /* Truncated: the header promises more data than the file holds. */
    write_weights(f.src, dir, plain);
    char *p = path_in(dir, "adapter_model.safetensors");
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(truncate(p, st.st_size - 100), 0);
    expect_refused(f.dst, dir, DF_EINVAL, "adapter_model.safetensors", "adapter_model.safetensors");
    free(p);

    /* The intact file loads: the cases failed for their tensor, not for the rewrite. */
    write_weights(f.src, dir, plain);
    assert_int_equal(df_lora_load_peft(f.dst, dir), 0);
    assert_true(same_params(f.src, f.dst));
    fixture_free(&f);
}

/* The weights cannot be renamed into place (a directory holds the name): DF_EIO, no config, no
 * temporaries left. */
static void test_save_fails(void **state)
{
    const char *dir = *state;
    char *out = path_in(dir, "out");
    char *blocker = path_in(out, "adapter_model.safetensors");
    assert_int_equal(df_mkdir_p(blocker), 0);
    df_model *m = model();
    df_lora *l = make_lora(m, DF_LORA_ALL_LINEAR, 16.0, 1);
    int rc = df_lora_save_peft(l, out, NULL);
    print_message("  refused: %s\n", df_last_error());
    assert_error_mentions(rc, DF_EIO, "adapter_model.safetensors");
    DIR *d = opendir(out);
    assert_non_null(d);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            assert_string_equal(e->d_name, "adapter_model.safetensors");
            n++;
        }
    closedir(d);
    assert_int_equal(n, 1);
    assert_true(df_dir_exists(blocker));
    df_lora_free(l);
    df_model_free(m);
    free(blocker);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_config_keys, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_tensor_names_shapes, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_half_tensors, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_peft_config_accepted, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_missing_files, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_bad_json, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_config_refused, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_tensors_refused, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_save_fails, df_test_mkdtemp, df_test_rmtree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
