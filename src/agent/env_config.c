/* Reading an environment class's config against its options (include/distflow/env.h,
 * df_env_config_read): the one place the built-in classes and plugins check their `config:`, so an
 * unknown key, a wrong type or a value out of range is an error rather than a default. */
#include "distflow/env.h"

#include "config/config_internal.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An unknown key: the known ones, and the closest when one is close. */
static int unknown_key(const char *who, const char *key, const df_env_option *opts, int n)
{
    char shown[512] = "", choices[512] = "", near[128];
    for (int i = 0; i < n; i++) {
        size_t a = strlen(shown), b = strlen(choices);
        snprintf(shown + a, sizeof shown - a, "%s%s", i ? ", " : "", opts[i].key);
        snprintf(choices + b, sizeof choices - b, "%s%s", i ? "|" : "", opts[i].key);
    }
    bool hint = n > 0 && cfg_suggest_choice(choices, key, near, sizeof near);
    return df_error(DF_EINVAL, "%s: unknown key config.%.100s (known: %s)%s%s%s", who, key, n ? shown : "none",
                    hint ? "; did you mean '" : "", hint ? near : "", hint ? "'?" : "");
}

/* Option o's value x, checked and stored. */
static int read_value(const char *who, const df_env_option *o, json_t *x)
{
    bool is_int = o->type == DF_ENV_OPT_INT;
    double v = json_number_value(x);
    bool ok = is_int ? json_is_integer(x) : json_is_number(x) && isfinite(v);
    if (ok && v >= o->min && v <= o->max) {
        if (is_int)
            *(int64_t *)o->value = json_integer_value(x);
        else
            *(double *)o->value = v;
        return DF_OK;
    }
    char *got = json_dumps(x, JSON_COMPACT | JSON_ENCODE_ANY);
    int rc;
    if (is_int)
        rc = df_error(DF_EINVAL, "%s: config.%s must be an integer in [%lld, %lld], got %.40s", who, o->key,
                      (long long)o->min, (long long)o->max, got ? got : "?");
    else
        rc = df_error(DF_EINVAL, "%s: config.%s must be a number in [%g, %g], got %.40s", who, o->key, o->min,
                      o->max, got ? got : "?");
    free(got);
    return rc;
}

int df_env_config_read(const char *who, const char *config_json, const df_env_option *opts, int n)
{
    who = who ? who : "environment";
    json_t *cfg = config_json ? json_loads(config_json, 0, NULL) : NULL;
    if (!json_is_object(cfg)) {
        json_decref(cfg);
        return df_error(DF_EINVAL, "%s: config is not a JSON object", who);
    }
    const char *key;
    json_t *val;
    int rc = DF_OK;
    json_object_foreach(cfg, key, val) {
        int i = 0;
        while (i < n && strcmp(opts[i].key, key))
            i++;
        rc = i == n ? unknown_key(who, key, opts, n) : read_value(who, &opts[i], val);
        if (rc)
            break;
    }
    json_decref(cfg);
    return rc;
}
