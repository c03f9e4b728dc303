/*
 * Rule-based scorers: verl's GSM8K (verl/utils/reward_score/gsm8k.py) and the
 * synthetic arithmetic task (include/distflow/synth.h).
 */
#include "distflow/reward.h"

#include <string.h>

/* Length of `-?[0-9.,]+` at p; 0 when it does not match there. */
static size_t gsm8k_number_len(const char *p)
{
    const char *q = p + (*p == '-');
    const char *d = q;
    while ((*q >= '0' && *q <= '9') || *q == '.' || *q == ',')
        q++;
    return q == d ? 0 : (size_t)(q - p);
}

/* re.search: the first "#### " followed by a number; its number's start and length. */
static const char *gsm8k_match(const char *response, size_t *len)
{
    for (const char *p = strstr(response, "#### "); p; p = strstr(p + 1, "#### "))
        if ((*len = gsm8k_number_len(p + 5)))
            return p + 5;
    return NULL;
}

bool df_reward_gsm8k_extract(const char *response, char *out, size_t cap)
{
    size_t len = 0;
    const char *m = response ? gsm8k_match(response, &len) : NULL;
    if (!m || cap == 0)
        return false;
    size_t k = 0;
    for (size_t j = 0; j < len; j++) {
        if (m[j] == ',' || m[j] == '$')
            continue;
        if (k + 1 >= cap)
            return false;
        out[k++] = m[j];
    }
    out[k] = '\0';
    return true;
}

int df_reward_gsm8k(const char *data_source, const char *solution_str, const char *ground_truth,
                    const char *extra_info, double *score)
{
    (void)data_source;
    (void)extra_info;
    *score = 0.0;
    size_t len = 0;
    const char *m = solution_str ? gsm8k_match(solution_str, &len) : NULL;
    if (!m || !ground_truth)
        return DF_OK;
    /* compare in place, the ',' (and '$') dropped: no length limit, as verl and siiRL */
    const char *g = ground_truth;
    for (size_t j = 0; j < len; j++) {
        if (m[j] == ',' || m[j] == '$')
            continue;
        if (*g++ != m[j])
            return DF_OK;
    }
    if (*g == '\0')
        *score = 1.0;
    return DF_OK;
}

/* Canonical integer text at p: sign kept unless the value is zero, leading
 * zeros dropped. Returns the number of bytes read (0: no integer), the
 * digits via *digits / *nd and the sign via *neg. */
static size_t int_at(const char *p, bool *neg, const char **digits, size_t *nd)
{
    const char *q = p;
    *neg = *q == '-';
    q += *neg;
    const char *d = q;
    while (*q >= '0' && *q <= '9')
        q++;
    if (q == d)
        return 0;
    size_t n = (size_t)(q - d);
    while (n > 1 && *d == '0') {
        d++;
        n--;
    }
    if (n == 1 && *d == '0')
        *neg = false;
    *digits = d;
    *nd = n;
    return (size_t)(q - p);
}

int df_reward_synthetic(const char *data_source, const char *solution_str,
                        const char *ground_truth, const char *extra_info, double *score)
{
    (void)data_source;
    (void)extra_info;
    *score = 0.0;
    if (!solution_str || !ground_truth)
        return DF_OK;
    bool gneg, aneg;
    const char *gd, *ad;
    size_t gn, an;
    const char *g = ground_truth;
    while (*g == ' ')
        g++;
    size_t gl = int_at(g, &gneg, &gd, &gn);
    if (!gl || g[gl] != '\0')
        return DF_OK; /* not an integer ground truth: nothing can match */
    for (const char *p = strstr(solution_str, "#### "); p; p = strstr(p + 1, "#### ")) {
        if (!int_at(p + 5, &aneg, &ad, &an))
            continue;
        if (aneg == gneg && an == gn && !memcmp(ad, gd, an))
            *score = 1.0;
        return DF_OK; /* the first match decides */
    }
    return DF_OK;
}
