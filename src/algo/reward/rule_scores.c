/*
 * Rule-based scorers: verl's GSM8K (verl/utils/reward_score/gsm8k.py) and the
 * synthetic arithmetic task (include/distflow/synth.h).
 */
#include "distflow/reward.h"

#include "algo/reward/rtext.h"

#include <stdlib.h>
#include <string.h>

#define GSM8K_CLIP_CHARS 300 /* verl gsm8k.py _SOLUTION_CLIP_CHARS */

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

df_reward_kwargs df_reward_kwargs_default(void)
{
    return (df_reward_kwargs){.method = "strict", .format_score = 0.0, .score = 1.0};
}

/* re.findall("#### (\\-?[0-9\\.\\,]+)")[-1] (last) or re.search (first), ',' and '$' dropped. */
static bool gsm8k_strict(const char *text, bool last, df_rt_buf *out)
{
    const char *m = NULL;
    size_t len = 0, l;
    for (const char *p = strstr(text, "#### "); p; p = strstr(p + 1, "#### "))
        if ((l = gsm8k_number_len(p + 5))) {
            m = p + 5;
            len = l;
            if (!last)
                break;
        }
    for (size_t j = 0; m && j < len; j++)
        if (m[j] != ',' && m[j] != '$')
            df_rt_add(out, m + j, 1);
    return m != NULL;
}

/* verl's method="flexible": the last match of (\-?[0-9\.\,]+) that is not "." (the first match
 * when all are "."), kept as matched (commas stay). */
static bool gsm8k_flexible(const char *text, df_rt_buf *out)
{
    const char *first = NULL, *pick = NULL;
    size_t first_n = 0, pick_n = 0;
    for (const char *p = text; *p;) {
        size_t n = gsm8k_number_len(p);
        if (!n) {
            p++;
            continue;
        }
        if (!first) {
            first = p;
            first_n = n;
        }
        if (!(n == 1 && *p == '.')) {
            pick = p;
            pick_n = n;
        }
        p += n;
    }
    if (!pick) {
        pick = first;
        pick_n = first_n;
    }
    if (pick)
        df_rt_add(out, pick, pick_n);
    return pick != NULL;
}

int df_reward_gsm8k_ex(const char *solution_str, const char *ground_truth, const df_reward_kwargs *kw,
                       df_reward_result *r)
{
    df_reward_kwargs def = df_reward_kwargs_default();
    kw = kw ? kw : &def;
    *r = (df_reward_result){.score = 0.0};
    bool flexible = kw->method && !strcmp(kw->method, "flexible");
    if (kw->method && !flexible && strcmp(kw->method, "strict"))
        return df_error(DF_EINVAL, "gsm8k scorer: method '%s' is neither strict nor flexible", kw->method);
    const char *text = solution_str ? solution_str : "";
    if (kw->last_match)
        text = df_rt_tail(text, GSM8K_CLIP_CHARS);
    df_rt_buf ans = {0};
    bool found = flexible ? gsm8k_flexible(text, &ans) : gsm8k_strict(text, kw->last_match, &ans);
    char *a = found ? df_rt_take(&ans) : NULL;
    if (found && !a)
        return df_error(DF_ENOMEM, "gsm8k scorer: out of memory");
    if (!a) /* verl: no answer scores 0, not format_score */
        return DF_OK;
    r->acc = ground_truth && !strcmp(a, ground_truth);
    r->score = r->acc ? kw->score : kw->format_score;
    size_t n = strlen(a) < sizeof r->pred ? strlen(a) : sizeof r->pred - 1; /* ASCII: no cut code point */
    memcpy(r->pred, a, n);
    r->pred[n] = '\0';
    free(a);
    return DF_OK;
}

int df_reward_gsm8k(const char *data_source, const char *solution_str, const char *ground_truth,
                    const char *extra_info, double *score)
{
    (void)data_source;
    (void)extra_info;
    df_reward_result r;
    int rc = df_reward_gsm8k_ex(solution_str, ground_truth, NULL, &r);
    *score = rc ? 0.0 : r.score;
    return rc;
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
