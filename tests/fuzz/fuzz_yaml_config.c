/*
 * Fuzz target: a training config YAML through df_config_load_text with the train
 * schema (src/config/loader.c, yaml_guard.c, config.c: the size and nesting
 * limits, anchors and merge keys, interpolation, typed values), then the
 * cross-key validation and the typed struct the trainer reads.
 * Property of an accepted file: `distflow config show` output (df_config_dump)
 * loads back to the same value for every key, as config.h promises.
 */
#include "fuzz.h"

#include "distflow/config.h"
#include "distflow/train_config.h"

#include <math.h>

int df_fuzz_status;

static bool same_value(const df_config *a, const df_config *b, const df_config_entry *e)
{
    const char *k = e->key;
    if (df_config_is_null(a, k) || df_config_is_null(b, k))
        return df_config_is_null(a, k) == df_config_is_null(b, k);
    switch (e->type) {
    case DF_CFG_BOOL:
        return df_config_bool(a, k) == df_config_bool(b, k);
    case DF_CFG_INT:
        return df_config_int(a, k) == df_config_int(b, k);
    case DF_CFG_FLOAT: {
        double x = df_config_float(a, k), y = df_config_float(b, k);
        return x == y || (isnan(x) && isnan(y));
    }
    case DF_CFG_STR:
        return !strcmp(df_config_str(a, k), df_config_str(b, k));
    case DF_CFG_MAP:
        return !strcmp(df_config_map_text(a, k), df_config_map_text(b, k));
    case DF_CFG_STR_LIST:
    case DF_CFG_FLOAT_LIST:
        if (df_config_list_len(a, k) != df_config_list_len(b, k))
            return false;
        for (int i = 0; i < df_config_list_len(a, k); i++) {
            bool same = e->type == DF_CFG_STR_LIST
                            ? !strcmp(df_config_list_at(a, k, i), df_config_list_at(b, k, i))
                            : df_config_list_float_at(a, k, i) == df_config_list_float_at(b, k, i);
            if (!same)
                return false;
        }
        return true;
    }
    return false;
}

/* What `config show` prints must load back to the same values. */
static void check_dump_reloads(const df_config *c)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    DF_FUZZ_CHECK(f != NULL);
    DF_FUZZ_CHECK(df_config_dump(c, f) == DF_OK);
    DF_FUZZ_CHECK(fclose(f) == 0);
    df_config *back = NULL;
    int rc = df_config_load_text(df_config_get_schema(c), text, "dumped config", NULL, 0, &back);
    if (rc)
        fprintf(stderr, "reloading the dump: %s\n--- dump:\n%s", df_last_error(), text);
    DF_FUZZ_CHECK(rc == DF_OK);
    const df_config_schema *s = df_config_get_schema(c);
    for (int i = 0; i < df_config_schema_count(s); i++) {
        const df_config_entry *e = df_config_schema_at(s, i);
        if (!same_value(c, back, e))
            fprintf(stderr, "key %s differs after reloading the dump:\n%s", e->key, text);
        DF_FUZZ_CHECK(same_value(c, back, e));
    }
    df_config_free(back);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    df_clear_error(); /* a message left by the previous input must not count for this one */
    char *text = df_fuzz_cstr(data, size);
    df_config *c = NULL;
    df_fuzz_status = df_config_load_text(df_config_schema_train(), text, "config.yaml", NULL, 0, &c);
    if (df_fuzz_status == DF_OK) {
        (void)df_config_validate_train(c, 1);
        (void)df_config_validate_train(c, 3);
        df_train_config tc;
        DF_FUZZ_CHECK(df_train_config_resolve(c, &tc) == DF_OK);
        check_dump_reloads(c);
        df_config_free(c);
    } else {
        DF_FUZZ_CHECK(c == NULL && df_last_error()[0] != '\0');
    }
    free(text);
    return 0;
}
