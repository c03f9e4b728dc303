/*
 * The math_dapo scorer: verl's verl/utils/reward_score/math_dapo.py at verl
 * commit b178a3cd56f58b2d502255daba591e92833930a7 (DAPO's Minerva-style
 * check): the last "Answer: ..." line of the response's last 300 characters,
 * normalize_final_answer on it and on the ground truth, +1.0 when equal else
 * -1.0, with acc and the normalised prediction. strict_box_verify compares
 * the last \boxed{} of the last 100 characters with the raw ground truth.
 * verl's regular expressions are spelled out by hand below; each helper names
 * the expression it reproduces.
 */
#include "distflow/reward.h"

#include "algo/reward/rtext.h"

#include <stdlib.h>
#include <string.h>

#define CLIP_CHARS 300 /* verl: solution_str[-300:] */
#define BOX_CLIP 100   /* verl is_correct_strict_box: pred[-100:] */

/* verl's SUBSTITUTIONS, applied in order. */
static const char *const SUBST[][2] = {
    {"an ", ""}, {"a ", ""},       {".$", "$"},           {"\\$", ""},          {"\\ ", ""},
    {" ", ""},   {"mbox", "text"}, {",\\text{and}", ","}, {"\\text{and}", ","}, {"\\text{m}", "\\text{}"},
};

/* verl's REMOVED_EXPRESSIONS, removed in order. */
static const char *const REMOVED[] = {
    "square",     "ways",       "integers",  "dollars",      "mph",
    "inches",     "hours",      "km",        "units",        "\\ldots",
    "sue",        "points",     "feet",      "minutes",      "digits",
    "cents",      "degrees",    "cm",        "gm",           "pounds",
    "meters",     "meals",      "edges",     "students",     "childrentickets",
    "multiples",  "\\text{s}",  "\\text{.}", "\\text{\ns}",  "\\text{}^2",
    "\\text{}^3", "\\text{\n}", "\\text{}",  "\\mathrm{th}", "^\\circ",
    "^{\\circ}",  "\\;",        ",\\!",      "{,}",          "\"",
    "\\dots",
};

/* re.sub(r"(.*?)(\$)(.*?)(\$)(.*)", "$\\3$", s): each line (no DOTALL) holding two '$' becomes
 * "$" + the text between its first two '$' + "$". */
static char *sub_dollar_pairs(char *s)
{
    if (!s)
        return NULL;
    df_rt_buf b = {0};
    for (const char *line = s;;) {
        size_t n = strcspn(line, "\n");
        const char *d1 = memchr(line, '$', n);
        const char *d2 = d1 ? memchr(d1 + 1, '$', n - (size_t)(d1 + 1 - line)) : NULL;
        if (d2) {
            df_rt_adds(&b, "$");
            df_rt_add(&b, d1 + 1, (size_t)(d2 - d1 - 1));
            df_rt_adds(&b, "$");
        } else {
            df_rt_add(&b, line, n);
        }
        if (!line[n])
            break;
        df_rt_adds(&b, "\n");
        line += n + 1;
    }
    free(s);
    return df_rt_take(&b);
}

/* re.sub(r"(<open>)(.*?)(\})", "\\2", s) (lazy) or with (.*) (greedy): `open` followed by the
 * text up to the first (or, greedy, the last) '}' on the same line becomes that text. */
static char *sub_unwrap(char *s, const char *open, bool greedy)
{
    if (!s || !strstr(s, open))
        return s;
    size_t ol = strlen(open);
    df_rt_buf b = {0};
    const char *p = s;
    for (const char *m = strstr(p, open); m; m = strstr(m + 1, open)) {
        const char *body = m + ol, *close = NULL;
        for (const char *q = body; *q && *q != '\n'; q++)
            if (*q == '}' && (!close || greedy))
                close = q;
        if (!close)
            continue; /* no match here: the scan goes on from the next position */
        df_rt_add(&b, p, (size_t)(m - p));
        df_rt_add(&b, body, (size_t)(close - body));
        p = close + 1;
        m = close; /* strstr(m + 1) resumes after the match */
    }
    df_rt_adds(&b, p);
    free(s);
    return df_rt_take(&b);
}

/* re.sub(r"(frac)([^{])(.)", "frac{\\2}{\\3}") with two = true, re.sub(r"(sqrt)([^{])",
 * "sqrt{\\2}") with two = false (code points; '.' is not '\n', [^{] may be). */
static char *sub_brace_args(char *s, const char *word, bool two)
{
    if (!s || !strstr(s, word))
        return s;
    size_t wl = strlen(word);
    df_rt_buf b = {0};
    const char *p = s;
    for (const char *m = strstr(p, word); m; m = strstr(m + 1, word)) {
        const char *c1 = m + wl;
        size_t l1 = df_rt_cp_len(c1), l2 = l1 ? df_rt_cp_len(c1 + l1) : 0;
        if (!l1 || *c1 == '{' || (two && (!l2 || c1[l1] == '\n')))
            continue;
        df_rt_add(&b, p, (size_t)(c1 - p));
        df_rt_adds(&b, "{");
        df_rt_add(&b, c1, l1);
        df_rt_adds(&b, "}");
        if (two) {
            df_rt_adds(&b, "{");
            df_rt_add(&b, c1 + l1, l2);
            df_rt_adds(&b, "}");
        }
        p = c1 + l1 + (two ? l2 : 0);
        m = p - 1;
    }
    df_rt_adds(&b, p);
    free(s);
    return df_rt_take(&b);
}

/* str.isdigit() after dropping ',' (ASCII digits; Python also counts other Unicode digits). */
static bool digits_and_commas(const char *s)
{
    bool any = false;
    for (; *s; s++) {
        if (*s == ',')
            continue;
        if (*s < '0' || *s > '9')
            return false;
        any = true;
    }
    return any;
}

int df_reward_math_dapo_normalize(const char *answer, char **out)
{
    const char *eq = strrchr(answer, '=');
    char *s = df_rt_ndup(eq ? eq + 1 : answer, strlen(eq ? eq + 1 : answer)); /* split("=")[-1] */
    for (size_t i = 0; i < sizeof SUBST / sizeof *SUBST; i++)
        s = df_rt_replace(s, SUBST[i][0], SUBST[i][1]);
    for (size_t i = 0; i < sizeof REMOVED / sizeof *REMOVED; i++)
        s = df_rt_replace(s, REMOVED[i], "");
    s = sub_dollar_pairs(s);
    s = sub_unwrap(s, "\\text{", false);
    s = sub_unwrap(s, "\\textbf{", false);
    s = sub_unwrap(s, "\\overline{", false);
    s = sub_unwrap(s, "\\boxed{", true);
    s = sub_brace_args(s, "frac", true);
    s = sub_brace_args(s, "sqrt", false);
    s = df_rt_replace(s, "$", "");
    if (s && digits_and_commas(s))
        s = df_rt_replace(s, ",", "");
    *out = df_rt_strip(s);
    return *out ? DF_OK : df_error(DF_ENOMEM, "math_dapo scorer: out of memory");
}

/* One match of (?i)Answer\s*:\s*([^\n]+) starting at p: the group's [*b, *e). */
static bool answer_at(const char *p, const char **b, const char **e)
{
    size_t l;
    const char *q = p + 6;
    while (df_rt_is_space(q, &l))
        q += l;
    if (*q++ != ':')
        return false;
    const char *ws = q;
    while (df_rt_is_space(q, &l))
        q += l;
    if (*q) { /* [^\n]+ from the first non-space to the line's end */
        *b = q;
        *e = q + strcspn(q, "\n");
        return true;
    }
    /* the whitespace runs to the end: \s* backtracks to its last code point that is not '\n' */
    const char *last = NULL;
    for (const char *r = ws; *r; r += df_rt_cp_len(r))
        if (*r != '\n')
            last = r;
    if (!last)
        return false;
    *b = last;
    *e = last + df_rt_cp_len(last);
    return true;
}

/* re.findall(...)[-1]: matches do not overlap, so an "Answer:" inside an earlier match's line is
 * part of that match, not a match of its own. */
static bool last_answer(const char *s, const char **b, const char **e)
{
    bool found = false;
    const char *p = s, *mb, *me;
    for (const char *m = strcasestr(p, "answer"); m; m = strcasestr(p, "answer")) {
        if (answer_at(m, &mb, &me)) {
            *b = mb;
            *e = me;
            found = true;
            p = me;
        } else {
            p = m + 1;
        }
    }
    return found;
}

/* Copy src[0, n) into pred[cap], cut at a code point boundary. */
static void set_pred(char *pred, size_t cap, const char *src, size_t n)
{
    size_t k = 0;
    while (k < n) {
        size_t l = df_rt_cp_len(src + k);
        if (!l || k + l >= cap)
            break;
        k += l;
    }
    memcpy(pred, src, k);
    pred[k] = '\0';
}

/* verl's is_correct_strict_box on the (already clipped) response. */
static void strict_box(const char *sol, const char *gt, df_reward_result *r)
{
    const char *p = df_rt_tail(sol, BOX_CLIP), *idx = df_rt_rfind(p, "\\boxed{"), *right = NULL;
    int open = 0;
    for (const char *q = idx; q && *q && !right; q++) {
        open += *q == '{';
        if (*q == '}' && --open == 0)
            right = q;
    }
    r->pred[0] = '\0'; /* verl: None when there is no complete \boxed{} */
    bool ok = false;
    if (right) {
        size_t n = (size_t)(right - idx - 7);
        ok = strlen(gt) == n && !memcmp(idx + 7, gt, n);
        set_pred(r->pred, sizeof r->pred, idx + 7, n);
    }
    r->acc = ok;
    r->score = ok ? 1.0 : -1.0;
}

int df_reward_math_dapo_ex(const char *solution_str, const char *ground_truth, const df_reward_kwargs *kw,
                           df_reward_result *r)
{
    *r = (df_reward_result){.score = -1.0, .extra_pred = true}; /* verl returns {"score", "acc", "pred"} */
    const char *sol = df_rt_tail(solution_str ? solution_str : "", CLIP_CHARS);
    const char *gt = ground_truth ? ground_truth : "";
    if (kw && kw->strict_box_verify) {
        strict_box(sol, gt, r);
        return DF_OK;
    }
    const char *b, *e;
    char *ans = last_answer(sol, &b, &e) ? df_rt_ndup(b, (size_t)(e - b)) : df_rt_ndup("[INVALID]", 9);
    char *pred = NULL, *ngt = NULL;
    int rc =
        ans ? df_reward_math_dapo_normalize(ans, &pred) : df_error(DF_ENOMEM, "math_dapo: out of memory");
    if (!rc)
        rc = df_reward_math_dapo_normalize(gt, &ngt);
    if (!rc) {
        r->acc = !strcmp(pred, ngt);
        r->score = r->acc ? 1.0 : -1.0;
        set_pred(r->pred, sizeof r->pred, pred, strlen(pred));
    }
    free(ans);
    free(pred);
    free(ngt);
    return rc;
}

int df_reward_math_dapo(const char *data_source, const char *solution_str, const char *ground_truth,
                        const char *extra_info, double *score)
{
    (void)data_source;
    (void)extra_info;
    df_reward_result r;
    int rc = df_reward_math_dapo_ex(solution_str, ground_truth, NULL, &r);
    *score = rc ? 0.0 : r.score;
    return rc;
}
