/* The Parquet reader (src/data/parquet.c): every fixture of tests/fixtures/parquet read as
 * DuckDB reads it (X.jsonl, written by tests/golden/gen_parquet_fixtures.mjs), and malformed
 * files refused with the file's name and the problem. */
/* rounding-free (scripts/test-variants.sh skips it): parsing, text and integers only */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "data/jsonl.h"
#include "data/parquet.h"
#include "distflow/common.h"
#include "util/fsutil.h"

#define FIXTURES DF_SOURCE_DIR "/tests/fixtures/parquet/"

static char *slurp(const char *path, size_t *len)
{
    char *text = NULL;
    assert_int_equal(df_read_file(path, &text, len), DF_OK);
    return text;
}

/* Equal JSON, numbers compared by value (an integer and a real of one value are equal). */
static bool same_by_value(const json_t *a, const json_t *b)
{
    if (json_is_number(a) && json_is_number(b))
        return json_number_value(a) == json_number_value(b);
    if (json_typeof(a) != json_typeof(b))
        return false;
    if (json_is_array(a)) {
        bool same = json_array_size(a) == json_array_size(b);
        for (size_t i = 0; same && i < json_array_size(a); i++)
            same = same_by_value(json_array_get(a, i), json_array_get(b, i));
        return same;
    }
    if (json_is_object(a)) {
        const char *k;
        json_t *v;
        bool same = json_object_size(a) == json_object_size(b);
        json_object_foreach((json_t *)a, k, v) same = same && json_object_get(b, k) && same_by_value(v, json_object_get(b, k));
        return same;
    }
    return json_equal((json_t *)a, (json_t *)b);
}

/* The rows of FIXTURES/<base>.parquet equal those of <base>.jsonl, row by row: exactly, or with
   `by_value` numbers read as doubles on both sides (DuckDB prints DECIMAL(38, s) with every digit,
   beyond a double's and an int64's range; the reader gives the double nearest that text). */
static void check_rows(const char *base, bool by_value)
{
    char pq[256], js[256];
    snprintf(pq, sizeof pq, FIXTURES "%s.parquet", base);
    snprintf(js, sizeof js, FIXTURES "%s.jsonl", base);
    size_t n = 0, m = 0;
    char *bin = slurp(pq, &n), *text = slurp(js, &m);
    json_t *rows = NULL;
    int rc = df_parquet_rows(bin, n, pq, &rows);
    if (rc)
        fail_msg("%s: %s", base, df_last_error());
    df_jsonl_lines it;
    const char *s;
    size_t sl;
    size_t i = 0;
    df_jsonl_lines_init(&it, text, m);
    while (df_jsonl_lines_next(&it, &s, &sl)) {
        json_t *want = by_value ? json_loadb(s, sl, JSON_DECODE_INT_AS_REAL, NULL) : NULL;
        if (!by_value)
            assert_int_equal(df_jsonl_parse_line(s, sl, js, it.line, &want), DF_OK);
        assert_non_null(want);
        json_t *got = json_array_get(rows, i);
        if (!got || !(by_value ? same_by_value(got, want) : json_equal(got, want))) {
            char *g = got ? json_dumps(got, JSON_COMPACT) : NULL, *w = json_dumps(want, JSON_COMPACT);
            fail_msg("%s row %zu:\n got  %s\n want %s", base, i + 1, g ? g : "(none)", w);
        }
        json_decref(want);
        i++;
    }
    assert_int_equal(json_array_size(rows), i);
    json_decref(rows);
    free(bin);
    free(text);
}

static void check_fixture(const char *base) { check_rows(base, false); }

static void test_verl_gsm8k(void **state)
{
    (void)state;
    check_fixture("gsm8k_verl"); /* two row groups, each with its own dictionaries */
    check_fixture("empty");
    check_fixture("logical"); /* unsigned and small integers, decimals on INT32 / INT64, an enum */
    check_fixture("map");     /* MAP -> object: {"a": 1, "b": 2}, {}, null */
    check_fixture("maps");    /* string and integer keys, null values */
    check_rows("flba", true); /* DECIMAL(38, 4) / (20, 0) as 16-byte FIXED_LEN_BYTE_ARRAY, UUID */
}

static void test_codecs_and_nesting(void **state)
{
    (void)state;
    check_fixture("types_none");
    check_fixture("types_snappy");
    check_fixture("types_gzip");
    check_fixture("types_zstd");
    check_fixture("types_lz4raw");
    check_fixture("types_brotli");
    check_fixture("lz4_hadoop"); /* the deprecated LZ4 codec, Hadoop-framed (arrow-rs) */
}

static void test_page_versions_and_encodings(void **state)
{
    (void)state;
    check_fixture("v1_plain_snappy");
    check_fixture("v2_plain_zstd");
    check_fixture("v2_dict_zstd");
    check_fixture("v2_delta_zstd");
    check_fixture("types_v2");  /* DuckDB's v2: DELTA_BINARY_PACKED, DELTA_LENGTH_BYTE_ARRAY, BYTE_STREAM_SPLIT */
    check_fixture("bss_zstd");  /* BYTE_STREAM_SPLIT on floats and integers, required columns, pages stored raw */
}

/* rc and an error naming the file and containing `what`. */
static void expect_error(const char *bin, size_t n, int want_rc, const char *what)
{
    json_t *rows = NULL;
    int rc = df_parquet_rows(bin, n, "bad.parquet", &rows);
    assert_int_equal(rc, want_rc);
    assert_null(rows);
    assert_non_null(strstr(df_last_error(), "bad.parquet"));
    if (!strstr(df_last_error(), what))
        fail_msg("error '%s' lacks '%s'", df_last_error(), what);
}

static void test_refusals(void **state)
{
    (void)state;
    size_t n = 0;
    char *big = slurp(FIXTURES "u64_big.parquet", &n);
    expect_error(big, n, DF_EINVAL, "row 2, column 'u': unsigned value 18446744073709551615 is above INT64_MAX");
    free(big);
    char *blob = slurp(FIXTURES "blob.parquet", &n);
    expect_error(blob, n, DF_EINVAL, "row 2, column 'b': a value that is not UTF-8 text");
    free(blob);

    char *bin = slurp(FIXTURES "types_snappy.parquet", &n);
    expect_error(bin, 3, DF_EINVAL, "truncated Parquet file");
    expect_error(bin, n - 1, DF_EINVAL, "truncated Parquet file"); /* the end magic cut */
    char *copy = malloc(n);
    /* a footer length beyond the file */
    memcpy(copy, bin, n);
    copy[n - 5] = 0x7f;
    expect_error(copy, n, DF_EINVAL, "footer");
    /* the footer cut short at every length: refused, never read past */
    uint32_t flen = (uint8_t)bin[n - 8] | (uint8_t)bin[n - 7] << 8 | (uint8_t)bin[n - 6] << 16;
    for (uint32_t cut = 1; cut < flen; cut += 7) {
        memcpy(copy, bin, n);
        uint32_t f = flen - cut;
        memcpy(copy + n - 8 - f, bin + n - 8 - flen, f); /* its first f bytes, then length and magic */
        memcpy(copy + n - 8, &f, 4);
        json_t *rows = NULL;
        int rc = df_parquet_rows(copy, n, "bad.parquet", &rows);
        assert_int_not_equal(rc, DF_OK);
        assert_non_null(strstr(df_last_error(), "bad.parquet"));
    }
    /* the first data page's bytes flipped: a codec or page error, never a crash */
    memcpy(copy, bin, n);
    for (size_t i = 4; i < 64; i++)
        copy[i] ^= 0x5a;
    json_t *rows = NULL;
    assert_int_not_equal(df_parquet_rows(copy, n, "bad.parquet", &rows), DF_OK);
    assert_non_null(strstr(df_last_error(), "bad.parquet"));
    free(copy);
    free(bin);
}

/* `distflow data jsonl` writes the rows as DuckDB renders them, byte for byte (compact JSON, keys in
   schema order, UTF-8 as is, reals as read); a refused file leaves no output. */
static void test_cli_jsonl(void **state)
{
    (void)state;
    char dir[] = "/tmp/df_test_parquet_XXXXXX", cmd[1024], out[256];
    assert_non_null(mkdtemp(dir));
    const char *bases[] = {"gsm8k_verl", "types_zstd", "v2_delta_zstd"};
    for (int i = 0; i < 3; i++) {
        snprintf(out, sizeof out, "%s/%s.jsonl", dir, bases[i]);
        snprintf(cmd, sizeof cmd, "%s/distflow data jsonl --in " FIXTURES "%s.parquet --out %s 2>/dev/null",
                 DF_BINARY_DIR, bases[i], out);
        assert_int_equal(system(cmd), 0);
        char want[256];
        snprintf(want, sizeof want, FIXTURES "%s.jsonl", bases[i]);
        size_t n = 0, m = 0;
        char *got = slurp(out, &n), *exp = slurp(want, &m);
        assert_int_equal(n, m);
        assert_memory_equal(got, exp, n);
        free(got);
        free(exp);
        remove(out);
    }
    snprintf(out, sizeof out, "%s/blob.jsonl", dir);
    snprintf(cmd, sizeof cmd, "%s/distflow data jsonl --in " FIXTURES "blob.parquet --out %s 2>/dev/null",
             DF_BINARY_DIR, out);
    assert_int_not_equal(system(cmd), 0);
    assert_int_not_equal(access(out, F_OK), 0);
    assert_int_equal(rmdir(dir), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_verl_gsm8k),
        cmocka_unit_test(test_codecs_and_nesting),
        cmocka_unit_test(test_page_versions_and_encodings),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_cli_jsonl),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
