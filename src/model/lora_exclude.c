/* PEFT's exclude_modules as a regular expression, resolved against the model's module names
 * (distflow/lora.h, df_lora_exclude). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "distflow/lora.h"

#include <pcre2.h>
#include <stdio.h>

/* PEFT's name of module m in layer i of a causal LM. */
static void module_name(const df_lora_module *m, int64_t i, char *out, size_t cap)
{
    snprintf(out, cap, "model.layers.%lld.%s.%s", (long long)i, m->first <= DF_LORA_O ? "self_attn" : "mlp",
             m->name);
}

/* How many of the n_layers instances of module m the pattern matches whole; the first layer it
   matches and the first it does not, -1 for none. */
static int64_t count_matches(pcre2_code *re, pcre2_match_data *md, const df_lora_module *m, int64_t n_layers,
                             int64_t *first_in, int64_t *first_out)
{
    int64_t hits = 0;
    *first_in = *first_out = -1;
    for (int64_t i = 0; i < n_layers; i++) {
        char name[96];
        module_name(m, i, name, sizeof name);
        bool hit = pcre2_match(re, (PCRE2_SPTR)name, PCRE2_ZERO_TERMINATED, 0, 0, md, NULL) >= 0;
        hits += hit;
        int64_t *first = hit ? first_in : first_out;
        if (*first < 0)
            *first = i;
    }
    return hits;
}

int df_lora_exclude(const char *pattern, const df_model_config *c, unsigned *targets, const char *where)
{
    int err;
    PCRE2_SIZE off;
    /* re.fullmatch: anchored at both ends */
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_ANCHORED | PCRE2_ENDANCHORED, &err, &off, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return df_error(DF_EINVAL, "%s: '%s' is not a regular expression (at offset %zu: %s)", where, pattern,
                        (size_t)off, (const char *)msg);
    }
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    df_lora_module mods[DF_LORA_N_TARGETS];
    const int n_mods = df_lora_modules(c, *targets, mods);
    const int64_t n_layers = c->num_hidden_layers;
    unsigned keep = *targets;
    int rc = md ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    for (int k = 0; !rc && k < n_mods; k++) {
        const unsigned bits = df_lora_module_mask(&mods[k]);
        int64_t in, out, hits = count_matches(re, md, &mods[k], n_layers, &in, &out);
        char a[96], b[96];
        module_name(&mods[k], in, a, sizeof a);
        module_name(&mods[k], out, b, sizeof b);
        if (hits == n_layers && n_layers > 0)
            keep &= ~bits;
        else if (hits > 0)
            rc = df_error(DF_EUNSUPPORTED, "%s: '%s' excludes %s but not %s: distflow puts a target's adapters on "
                          "every layer (exclude a module in every layer, or none)", where, pattern, a, b);
    }
    if (!rc && !keep)
        rc = df_error(DF_EINVAL, "%s: '%s' excludes every target module: no adapter is left to train", where,
                      pattern);
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    if (!rc)
        *targets = keep;
    return rc;
}
