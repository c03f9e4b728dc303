/* df_batch: columns, row operations, metadata, sample info and the wire format. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "data/batch_internal.h"
#include "distflow/batch.h"

/* 3 rows: uid "a","b","c"; score 0.5,1.5,2.5; index 10,11,12;
 * prompt_ids lengths 2,0,3; response_ids lengths 1,2,0. */
static df_batch *make3(void)
{
    df_batch *b = df_batch_new(3);
    const char *uid[] = {"a", "b", "c"};
    const float score[] = {0.5f, 1.5f, 2.5f};
    const int64_t index[] = {10, 11, 12};
    const int64_t poff[] = {0, 2, 2, 5};
    const int32_t pdat[] = {1, 2, 3, 4, 5};
    const int64_t roff[] = {0, 1, 3, 3};
    const int32_t rdat[] = {7, 8, 9};
    assert_non_null(b);
    assert_int_equal(df_batch_set_str(b, "uid", uid), 0);
    assert_int_equal(df_batch_set_f32(b, "score", score), 0);
    assert_int_equal(df_batch_set_i64(b, "index", index), 0);
    assert_int_equal(df_batch_set_tok_i32(b, "prompt_ids", poff, pdat), 0);
    assert_int_equal(df_batch_set_tok_i32(b, "response_ids", roff, rdat), 0);
    assert_int_equal(df_batch_meta_set(b, "temperature", 0.7), 0);
    return b;
}

static void check_row(const df_batch *b, int64_t i, const char *uid, float score, int64_t index,
                      const int32_t *p, int64_t pl, const int32_t *r, int64_t rl)
{
    int64_t len = -1;
    assert_string_equal(df_batch_str(b, "uid", i), uid);
    assert_true(df_batch_f32(b, "score")[i] == score);
    assert_int_equal(df_batch_i64(b, "index")[i], index);
    const int32_t *pp = df_batch_tok_i32(b, "prompt_ids", i, &len);
    assert_non_null(pp);
    assert_int_equal(len, pl);
    if (pl)
        assert_memory_equal(pp, p, (size_t)pl * 4);
    const int32_t *rr = df_batch_tok_i32(b, "response_ids", i, &len);
    assert_non_null(rr);
    assert_int_equal(len, rl);
    if (rl)
        assert_memory_equal(rr, r, (size_t)rl * 4);
}

static const int32_t P0[] = {1, 2}, P2[] = {3, 4, 5}, R0[] = {7}, R1[] = {8, 9};
#define ROW0(b, i) check_row(b, i, "a", 0.5f, 10, P0, 2, R0, 1)
#define ROW1(b, i) check_row(b, i, "b", 1.5f, 11, NULL, 0, R1, 2)
#define ROW2(b, i) check_row(b, i, "c", 2.5f, 12, P2, 3, NULL, 0)

static void test_columns(void **state)
{
    (void)state;
    df_batch *b = make3();
    assert_int_equal(df_batch_size(b), 3);
    assert_int_equal(df_batch_num_columns(b), 5);
    assert_string_equal(df_batch_column_at(b, 0)->name, "uid");
    assert_string_equal(df_batch_column_at(b, 4)->name, "response_ids");
    assert_null(df_batch_column_at(b, 5));
    ROW0(b, 0);
    ROW1(b, 1);
    ROW2(b, 2);
    /* wrong kind / absent / out of range */
    assert_null(df_batch_i64(b, "score"));
    assert_null(df_batch_f32(b, "nope"));
    assert_null(df_batch_str(b, "uid", 3));
    assert_null(df_batch_tok_f32(b, "prompt_ids", 0, NULL));
    assert_null(df_batch_offsets(b, "uid"));
    assert_int_equal(df_batch_offsets(b, "prompt_ids")[3], 5);
    /* replacing keeps the position; dropping removes */
    const int64_t idx2[] = {1, 2, 3};
    assert_int_equal(df_batch_set_i64(b, "uid", idx2), 0);
    assert_string_equal(df_batch_column_at(b, 0)->name, "uid");
    assert_int_equal(df_batch_column_at(b, 0)->kind, DF_COL_I64);
    df_batch_drop(b, "uid");
    df_batch_drop(b, "absent");
    assert_int_equal(df_batch_num_columns(b), 4);
    assert_false(df_batch_has(b, "uid"));
    /* rename keeps data and position, replaces a column of the new name */
    const char *first = df_batch_column_at(b, 0)->name;
    char was[DF_COL_NAME_MAX];
    snprintf(was, sizeof was, "%s", first);
    const void *data0 = df_batch_column_at(b, 0)->data;
    assert_int_equal(df_batch_rename(b, was, "agent_group_1_x"), 0);
    assert_string_equal(df_batch_column_at(b, 0)->name, "agent_group_1_x");
    assert_ptr_equal(df_batch_column_at(b, 0)->data, data0);
    assert_int_equal(df_batch_rename(b, "prompt_ids", "agent_group_1_x"), 0);
    assert_int_equal(df_batch_num_columns(b), 3);
    assert_false(df_batch_has(b, "prompt_ids"));
    assert_int_equal(df_batch_offsets(b, "agent_group_1_x")[3], 5);
    assert_int_equal(df_batch_rename(b, "absent", "y"), DF_ENOTFOUND);
    assert_int_equal(df_batch_rename(b, "agent_group_1_x", ""), DF_EINVAL);
    assert_int_equal(df_batch_rename(b, "agent_group_1_x", "prompt_ids"), 0);
    /* set_str_at */
    const char *s[] = {"x", NULL, "z"};
    assert_int_equal(df_batch_set_str(b, "s", s), 0);
    assert_string_equal(df_batch_str(b, "s", 1), "");
    assert_int_equal(df_batch_set_str_at(b, "s", 1, "yy"), 0);
    assert_string_equal(df_batch_str(b, "s", 1), "yy");
    assert_int_equal(df_batch_set_str_at(b, "s", 3, "q"), DF_EINVAL);
    assert_int_equal(df_batch_set_str_at(b, "score", 0, "q"), DF_ENOTFOUND);
    df_batch_free(b);
}

static void test_bad_columns(void **state)
{
    (void)state;
    df_batch *b = df_batch_new(2);
    const int64_t v[] = {1, 2};
    char longname[80];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    assert_int_equal(df_batch_set_i64(b, longname, v), DF_EINVAL);
    assert_int_equal(df_batch_set_i64(b, "", v), DF_EINVAL);
    assert_int_equal(df_batch_set_i64(b, "v", NULL), DF_EINVAL);
    const int64_t bad0[] = {1, 2, 3}, dec[] = {0, 2, 1};
    const int32_t d[] = {1, 2, 3};
    assert_int_equal(df_batch_set_tok_i32(b, "t", bad0, d), DF_EINVAL);
    assert_int_equal(df_batch_set_tok_i32(b, "t", dec, d), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "decrease"));
    assert_int_equal(df_batch_num_columns(b), 0);
    assert_null(df_batch_new(-1));
    df_batch_free(b);
}

static void test_alloc_like_and_meta(void **state)
{
    (void)state;
    df_batch *b = make3();
    float *tls = NULL;
    assert_int_equal(df_batch_alloc_tok_f32_like(b, "token_level_scores", "response_ids", &tls), 0);
    assert_non_null(tls);
    const int64_t *off = df_batch_offsets(b, "token_level_scores");
    assert_int_equal(off[0], 0);
    assert_int_equal(off[1], 1);
    assert_int_equal(off[2], 3);
    assert_int_equal(off[3], 3);
    for (int i = 0; i < 3; i++)
        assert_true(tls[i] == 0.0f);
    tls[2] = 4.0f;
    int64_t len;
    assert_true(df_batch_tok_f32(b, "token_level_scores", 1, &len)[1] == 4.0f);
    assert_int_equal(len, 2);
    /* replacing a column shaped like itself */
    assert_int_equal(df_batch_alloc_tok_f32_like(b, "token_level_scores", "token_level_scores", &tls), 0);
    assert_true(tls[2] == 0.0f);
    assert_int_equal(df_batch_alloc_tok_f32_like(b, "x", "uid", &tls), DF_EINVAL);
    assert_int_equal(df_batch_alloc_tok_f32_like(b, "x", "nope", &tls), DF_ENOTFOUND);

    assert_true(df_batch_meta_get(b, "temperature", 0) == 0.7);
    assert_true(df_batch_meta_get(b, "absent", -3) == -3);
    assert_int_equal(df_batch_meta_set(b, "temperature", 1.0), 0);
    assert_int_equal(df_batch_meta_set(b, "global_step", 5), 0);
    assert_int_equal(df_batch_meta_count(b), 2);
    double v;
    assert_string_equal(df_batch_meta_at(b, 1, &v), "global_step");
    assert_true(v == 5);
    assert_null(df_batch_meta_at(b, 2, &v));
    assert_int_equal(df_batch_meta_set(b, "", 1), DF_EINVAL);
    df_batch_free(b);
}

static void test_select_slice(void **state)
{
    (void)state;
    df_batch *b = make3(), *s = NULL;
    const int64_t idx[] = {2, 0, 2, 1};
    assert_int_equal(df_batch_select(b, idx, 4, &s), 0);
    assert_int_equal(df_batch_size(s), 4);
    ROW2(s, 0);
    ROW0(s, 1);
    ROW2(s, 2);
    ROW1(s, 3);
    assert_int_equal(df_batch_offsets(s, "prompt_ids")[4], 8);
    assert_true(df_batch_meta_get(s, "temperature", 0) == 0.7);
    df_batch_free(s);
    const int64_t bad[] = {0, 3};
    assert_int_equal(df_batch_select(b, bad, 2, &s), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "index 3"));
    assert_int_equal(df_batch_select(b, idx, 0, &s), 0);
    assert_int_equal(df_batch_size(s), 0);
    assert_int_equal(df_batch_num_columns(s), 5);
    df_batch_free(s);

    assert_int_equal(df_batch_slice(b, 1, 3, &s), 0);
    assert_int_equal(df_batch_size(s), 2);
    ROW1(s, 0);
    ROW2(s, 1);
    assert_int_equal(df_batch_offsets(s, "response_ids")[2], 2);
    df_batch_free(s);
    assert_int_equal(df_batch_slice(b, 2, 4, &s), DF_EINVAL);
    assert_int_equal(df_batch_slice(b, 2, 1, &s), DF_EINVAL);
    assert_int_equal(df_batch_copy(b, &s), 0); /* every row, every column, the metadata */
    assert_int_equal(df_batch_size(s), 3);
    assert_int_equal(df_batch_num_columns(s), 5);
    ROW0(s, 0);
    ROW1(s, 1);
    ROW2(s, 2);
    assert_true(df_batch_meta_get(s, "temperature", 0) == 0.7);
    df_batch_free(s);
    df_batch_free(b);
}

static void test_concat(void **state)
{
    (void)state;
    df_batch *b = make3(), *x = NULL, *y = NULL, *c = NULL;
    assert_int_equal(df_batch_slice(b, 0, 1, &x), 0);
    assert_int_equal(df_batch_slice(b, 1, 3, &y), 0);
    df_batch_meta_set(y, "temperature", 9);
    const df_batch *parts[] = {y, x, y};
    assert_int_equal(df_batch_concat(parts, 3, &c), 0);
    assert_int_equal(df_batch_size(c), 5);
    ROW1(c, 0);
    ROW2(c, 1);
    ROW0(c, 2);
    ROW1(c, 3);
    ROW2(c, 4);
    assert_true(df_batch_meta_get(c, "temperature", 0) == 9); /* first part's metadata */
    df_batch_free(c);

    /* different column order is fine; the first part's order is kept */
    df_batch_drop(x, "uid");
    const char *u[] = {"a"};
    df_batch_set_str(x, "uid", u);
    const df_batch *p2[] = {b, x};
    assert_int_equal(df_batch_concat(p2, 2, &c), 0);
    assert_string_equal(df_batch_column_at(c, 0)->name, "uid");
    ROW0(c, 3);
    df_batch_free(c);

    /* mismatched columns */
    df_batch_drop(x, "score");
    assert_int_equal(df_batch_concat(p2, 2, &c), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "columns"));
    const float f[] = {1};
    df_batch_set_f32(x, "uid2", f);
    assert_int_equal(df_batch_concat(p2, 2, &c), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "lacks column score"));
    df_batch_drop(x, "uid2");
    const int64_t iv[] = {1};
    df_batch_set_i64(x, "score", iv);
    assert_int_equal(df_batch_concat(p2, 2, &c), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "kind"));
    assert_int_equal(df_batch_concat(p2, 0, &c), DF_EINVAL);
    df_batch_free(x);
    df_batch_free(y);
    df_batch_free(b);
}

static void test_split_repeat(void **state)
{
    (void)state;
    df_batch *b = make3(), **parts = NULL, *r = NULL;
    int np = 0;
    assert_int_equal(df_batch_split(b, 2, &parts, &np), 0);
    assert_int_equal(np, 2);
    assert_int_equal(df_batch_size(parts[0]), 2);
    assert_int_equal(df_batch_size(parts[1]), 1);
    ROW0(parts[0], 0);
    ROW1(parts[0], 1);
    ROW2(parts[1], 0);
    for (int i = 0; i < np; i++)
        df_batch_free(parts[i]);
    free(parts);
    assert_int_equal(df_batch_split(b, 3, &parts, &np), 0);
    assert_int_equal(np, 1);
    df_batch_free(parts[0]);
    free(parts);
    assert_int_equal(df_batch_split(b, 1, &parts, &np), 0);
    assert_int_equal(np, 3);
    ROW2(parts[2], 0);
    for (int i = 0; i < np; i++)
        df_batch_free(parts[i]);
    free(parts);
    assert_int_equal(df_batch_split(b, 0, &parts, &np), DF_EINVAL);
    df_batch *e = df_batch_new(0);
    assert_int_equal(df_batch_split(e, 4, &parts, &np), 0);
    assert_int_equal(np, 0);
    free(parts);
    df_batch_free(e);

    assert_int_equal(df_batch_repeat_interleave(b, 2, &r), 0);
    assert_int_equal(df_batch_size(r), 6);
    ROW0(r, 0);
    ROW0(r, 1);
    ROW1(r, 2);
    ROW1(r, 3);
    ROW2(r, 4);
    ROW2(r, 5);
    assert_int_equal(df_batch_offsets(r, "prompt_ids")[6], 10);
    df_batch_free(r);
    assert_int_equal(df_batch_repeat_interleave(b, 0, &r), DF_EINVAL);
    df_batch_free(b);
}

static void test_sample_info(void **state)
{
    (void)state;
    df_batch *b = make3();
    df_sample_info s = df_batch_sample_info(b, 0);
    assert_int_equal(s.prompt_length, 2);
    assert_int_equal(s.response_length, 1);
    assert_int_equal(s.sum_tokens, 3);
    assert_string_equal(s.uid, "a");
    s = df_batch_sample_info(b, 2);
    assert_int_equal(s.prompt_length, 3);
    assert_int_equal(s.response_length, 0);
    assert_int_equal(s.sum_tokens, 3);
    df_batch_drop(b, "uid");
    df_batch_drop(b, "prompt_ids");
    s = df_batch_sample_info(b, 1);
    assert_int_equal(s.prompt_length, 0);
    assert_int_equal(s.response_length, 2);
    assert_null(s.uid);
    /* a multi-agent batch: every agent's prompt and response count (the balancing key) */
    const int64_t off[] = {0, 1, 4, 4};
    const int32_t ids[] = {1, 2, 3, 4};
    assert_int_equal(df_batch_set_tok_i32(b, "agent_group_0_prompt_ids", off, ids), 0);
    assert_int_equal(df_batch_set_tok_i32(b, "agent_group_1_response_ids", off, ids), 0);
    assert_int_equal(df_batch_set_tok_i32(b, "agent_group_1_old_log_probs_ids_not", off, ids), 0);
    s = df_batch_sample_info(b, 1);
    assert_int_equal(s.prompt_length, 3);
    assert_int_equal(s.response_length, 2 + 3);
    assert_int_equal(s.sum_tokens, 8);
    df_batch_free(b);
}

/* Batch with every kind, metadata and an empty row. */
static df_batch *make_all_kinds(void)
{
    df_batch *b = make3();
    const int64_t off[] = {0, 2, 2, 3};
    const float lp[] = {-0.25f, -1.5f, -3.0f};
    const char *gt[] = {"18", "", "caf\xc3\xa9"};
    df_batch_set_tok_f32(b, "old_log_probs", off, lp);
    df_batch_set_str(b, "ground_truth", gt);
    df_batch_meta_set(b, "global_step", 42);
    return b;
}

static void assert_batches_equal(const df_batch *a, const df_batch *b)
{
    assert_int_equal(df_batch_size(a), df_batch_size(b));
    assert_int_equal(df_batch_num_columns(a), df_batch_num_columns(b));
    int64_t n = df_batch_size(a);
    for (int i = 0; i < df_batch_num_columns(a); i++) {
        const df_column *x = df_batch_column_at(a, i), *y = df_batch_column_at(b, i);
        assert_string_equal(x->name, y->name);
        assert_int_equal(x->kind, y->kind);
        if (x->kind == DF_COL_STR) {
            for (int64_t r = 0; r < n; r++)
                assert_string_equal(((char **)x->data)[r], ((char **)y->data)[r]);
        } else if (x->kind == DF_COL_TOK_I32 || x->kind == DF_COL_TOK_F32) {
            assert_memory_equal(x->offsets, y->offsets, (size_t)(n + 1) * 8);
            if (x->offsets[n])
                assert_memory_equal(x->data, y->data, (size_t)x->offsets[n] * 4);
        } else {
            size_t es = x->kind == DF_COL_I64 ? 8 : 4;
            if (n)
                assert_memory_equal(x->data, y->data, (size_t)n * es);
        }
    }
    assert_int_equal(df_batch_meta_count(a), df_batch_meta_count(b));
    for (int i = 0; i < df_batch_meta_count(a); i++) {
        double va, vb;
        assert_string_equal(df_batch_meta_at(a, i, &va), df_batch_meta_at(b, i, &vb));
        assert_true(va == vb);
    }
}

static void test_serialize_roundtrip(void **state)
{
    (void)state;
    df_batch *b = make_all_kinds(), *r = NULL;
    uint8_t *buf = NULL;
    size_t len = 0;
    assert_int_equal(df_batch_serialize(b, &buf, &len), 0);
    assert_memory_equal(buf, "DFBATCH", 8);
    assert_int_equal(buf[8], 1); /* version, little-endian */
    assert_int_equal(buf[12], 7); /* 7 columns */
    assert_int_equal(buf[16], 3); /* 3 rows */
    assert_int_equal(df_batch_deserialize(buf, len, &r), 0);
    assert_batches_equal(b, r);
    ROW2(r, 2);
    assert_string_equal(df_batch_str(r, "ground_truth", 2), "caf\xc3\xa9");
    assert_true(df_batch_meta_get(r, "global_step", 0) == 42);
    df_batch_free(r);
    free(buf);

    /* empty batch with columns, and a batch with no columns */
    df_batch *e = NULL;
    const int64_t none[] = {0};
    assert_int_equal(df_batch_select(b, none, 0, &e), 0);
    assert_int_equal(df_batch_serialize(e, &buf, &len), 0);
    assert_int_equal(df_batch_deserialize(buf, len, &r), 0);
    assert_batches_equal(e, r);
    df_batch_free(r);
    free(buf);
    df_batch_free(e);
    e = df_batch_new(5);
    assert_int_equal(df_batch_serialize(e, &buf, &len), 0);
    assert_int_equal(df_batch_deserialize(buf, len, &r), 0);
    assert_int_equal(df_batch_size(r), 5);
    df_batch_free(r);
    free(buf);
    df_batch_free(e);
    df_batch_free(b);
}

static void test_serialize_corruption(void **state)
{
    (void)state;
    df_batch *b = make_all_kinds(), *r = NULL;
    uint8_t *buf = NULL;
    size_t len = 0;
    assert_int_equal(df_batch_serialize(b, &buf, &len), 0);
    assert_true(len > 200);
    /* every truncation */
    for (size_t l = 0; l < len; l++) {
        r = NULL;
        assert_int_equal(df_batch_deserialize(buf, l, &r), DF_EINVAL);
        assert_null(r);
    }
    /* every flipped byte, two different flips */
    uint8_t *cp = malloc(len);
    for (size_t i = 0; i < len; i++) {
        for (int f = 0; f < 2; f++) {
            memcpy(cp, buf, len);
            cp[i] ^= f ? 0xff : 0x01;
            r = NULL;
            assert_int_equal(df_batch_deserialize(cp, len, &r), DF_EINVAL);
            assert_null(r);
        }
    }
    /* trailing garbage */
    uint8_t *big = malloc(len + 1);
    memcpy(big, buf, len);
    big[len] = 0;
    assert_int_equal(df_batch_deserialize(big, len + 1, &r), DF_EINVAL);
    free(big);
    free(cp);
    free(buf);
    df_batch_free(b);
}

/* Recompute the trailing checksum so only the structural checks can object. */
static void reseal(uint8_t *buf, size_t len)
{
    uint64_t h = df_batch_wire_checksum(buf, len - 8);
    for (int i = 0; i < 8; i++)
        buf[len - 8 + i] = (uint8_t)(h >> (8 * i));
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, int64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)((uint64_t)v >> (8 * i));
}

/* Forge one field at `at` (width 4 or 8), reseal, expect DF_EINVAL mentioning `what`. */
static void expect_forged(const uint8_t *buf, size_t len, size_t at, int width, int64_t v,
                          const char *what)
{
    uint8_t *cp = malloc(len);
    df_batch *r = NULL;
    memcpy(cp, buf, len);
    if (width == 4)
        put32(cp + at, (uint32_t)v);
    else if (width == 8)
        put64(cp + at, v);
    else
        cp[at] = (uint8_t)v;
    reseal(cp, len);
    assert_int_equal(df_batch_deserialize(cp, len, &r), DF_EINVAL);
    assert_null(r);
    if (!strstr(df_last_error(), what))
        fail_msg("forged byte %zu: message '%s' lacks '%s'", at, df_last_error(), what);
    free(cp);
}

static void test_serialize_structure(void **state)
{
    (void)state;
    /* n = 2, one TOK_I32 column "t" (offsets 0,1,3; data 5,6,7) and one STR column "u". */
    df_batch *b = df_batch_new(2), *r = NULL;
    const int64_t off[] = {0, 1, 3};
    const int32_t d[] = {5, 6, 7};
    const char *u[] = {"ab", "c"};
    df_batch_set_tok_i32(b, "t", off, d);
    df_batch_set_str(b, "u", u);
    uint8_t *buf;
    size_t len;
    assert_int_equal(df_batch_serialize(b, &buf, &len), 0);
    /* header 32 | "t": len@32 name@36 kind@37 offsets@41,49,57 data@65..76 |
     * "u": len@77 name@81 kind@82 offsets@86,94,102 bytes@110..112 | checksum@113 */
    assert_int_equal(len, 121);
    reseal(buf, len); /* resealing an intact buffer changes nothing */
    assert_int_equal(df_batch_deserialize(buf, len, &r), 0);
    df_batch_free(r);
    expect_forged(buf, len, 0, 1, 'X', "magic");
    expect_forged(buf, len, 8, 4, 2, "version");
    expect_forged(buf, len, 12, 4, 3, "truncated");
    expect_forged(buf, len, 16, 8, -1, "rows");
    expect_forged(buf, len, 16, 8, 1000, "cannot fit");
    expect_forged(buf, len, 28, 4, 1, "header");
    expect_forged(buf, len, 32, 4, 0, "name length");
    expect_forged(buf, len, 32, 4, 64, "name length");
    expect_forged(buf, len, 36, 1, 0, "NUL inside column name");
    expect_forged(buf, len, 37, 4, 9, "unknown kind");
    expect_forged(buf, len, 41, 8, 1, "offsets[0]");
    expect_forged(buf, len, 49, 8, 4, "decrease");
    expect_forged(buf, len, 57, 8, 4, "deserialize");
    expect_forged(buf, len, 57, 8, 2, "deserialize");
    expect_forged(buf, len, 81, 1, 't', "duplicate column");
    expect_forged(buf, len, 110, 1, 0, "NUL inside a string");
    expect_forged(buf, len, 102, 8, 4, "truncated");
    expect_forged(buf, len, 102, 8, 2, "trailing");
    free(buf);
    df_batch_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_columns),
        cmocka_unit_test(test_bad_columns),
        cmocka_unit_test(test_alloc_like_and_meta),
        cmocka_unit_test(test_select_slice),
        cmocka_unit_test(test_concat),
        cmocka_unit_test(test_split_repeat),
        cmocka_unit_test(test_sample_info),
        cmocka_unit_test(test_serialize_roundtrip),
        cmocka_unit_test(test_serialize_corruption),
        cmocka_unit_test(test_serialize_structure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
