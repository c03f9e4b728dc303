/*
 * The MATH scorer: verl's verl/utils/reward_score/math_reward.py (Hendrycks'
 * MATH normalisation as lm-evaluation-harness has it) at verl commit
 * b178a3cd56f58b2d502255daba591e92833930a7 — the last \boxed answer, then
 * is_equiv over strip_string. Where verl's Python raises (an assert or an
 * IndexError) the C code takes the branch verl's `except` takes: is_equiv
 * falls back to comparing the raw strings, compute_score to 0.0.
 */
#include "distflow/reward.h"

#include "algo/reward/rtext.h"

#include <stdlib.h>
#include <string.h>

#define BOXED_SP "\\boxed "

bool df_reward_math_last_boxed(const char *s, const char **answer, size_t *len)
{
    if (!s)
        return false;
    /* verl checks the "\boxed " form first: the text after its last occurrence, up to a '$' */
    const char *sp = df_rt_rfind(s, BOXED_SP);
    if (sp) {
        *answer = sp + strlen(BOXED_SP);
        const char *dollar = strchr(*answer, '$');
        *len = dollar ? (size_t)(dollar - *answer) : strlen(*answer);
        return true;
    }
    const char *idx = df_rt_rfind(s, "\\boxed");
    if (!idx && !(idx = df_rt_rfind(s, "\\fbox")))
        return false;
    int open = 0; /* verl's brace scan: the first '}' that brings the count back to 0 */
    const char *right = NULL;
    for (const char *p = idx; *p && !right; p++) {
        open += *p == '{';
        if (*p == '}' && --open == 0)
            right = p;
    }
    /* remove_boxed asserts a "\boxed{" prefix: \fbox{..} (and \boxedx{..}) raise there, score 0 */
    if (!right || strncmp(idx, "\\boxed{", 7))
        return false;
    *answer = idx + 7;
    *len = (size_t)(right - *answer);
    return true;
}

/* remove_right_units: cut at "\text{ "; more than one is verl's failed assert (raise). */
static char *remove_right_units(char *s, bool *raised)
{
    size_t n = s ? df_rt_count(s, "\\text{ ") : 0;
    if (n == 0)
        return s;
    if (n > 1) {
        *raised = true;
        return s;
    }
    char *cut = df_rt_ndup(s, (size_t)(strstr(s, "\\text{ ") - s));
    free(s);
    return cut;
}

/* fix_sqrt: "\sqrt3" -> "\sqrt{3}" (one code point); an empty piece is verl's IndexError. */
static char *fix_sqrt(char *s, bool *raised)
{
    if (!s || !strstr(s, "\\sqrt"))
        return s;
    df_rt_buf b = {0};
    const char *p = strstr(s, "\\sqrt");
    df_rt_add(&b, s, (size_t)(p - s));
    while (p && !*raised) {
        const char *piece = p + 5, *next = strstr(piece, "\\sqrt");
        size_t pl = next ? (size_t)(next - piece) : strlen(piece);
        if (pl == 0) {
            *raised = true;
            break;
        }
        if (piece[0] != '{') {
            size_t a = df_rt_cp_len(piece);
            df_rt_adds(&b, "\\sqrt{");
            df_rt_add(&b, piece, a);
            df_rt_adds(&b, "}");
            df_rt_add(&b, piece + a, pl - a);
        } else {
            df_rt_adds(&b, "\\sqrt");
            df_rt_add(&b, piece, pl);
        }
        p = next;
    }
    char *out = df_rt_take(&b);
    if (*raised) {
        free(out);
        return s;
    }
    free(s);
    return out;
}

/* fix_fracs: "\frac12" -> "\frac{1}{2}", "\frac1{2}" -> "\frac{1}{2}". A one-code-point piece
 * returns the input unchanged (verl's caught assert); an empty piece raises (IndexError). */
static char *fix_fracs(char *s, bool *raised)
{
    if (!s || !strstr(s, "\\frac"))
        return s;
    df_rt_buf b = {0};
    const char *p = strstr(s, "\\frac");
    df_rt_add(&b, s, (size_t)(p - s));
    bool keep = false;
    while (p && !*raised && !keep) {
        const char *piece = p + 5, *next = strstr(piece, "\\frac");
        size_t pl = next ? (size_t)(next - piece) : strlen(piece);
        df_rt_adds(&b, "\\frac");
        size_t a = pl ? df_rt_cp_len(piece) : 0;
        if (pl == 0)
            *raised = true;
        else if (piece[0] == '{')
            df_rt_add(&b, piece, pl);
        else if (a >= pl)
            keep = true;
        else {
            size_t bl = df_rt_cp_len(piece + a);
            df_rt_adds(&b, "{");
            df_rt_add(&b, piece, a);
            df_rt_adds(&b, piece[a] != '{' ? "}{" : "}");
            df_rt_add(&b, piece + a, bl);
            df_rt_adds(&b, piece[a] != '{' ? "}" : "");
            df_rt_add(&b, piece + a + bl, pl - a - bl);
        }
        p = next;
    }
    char *out = df_rt_take(&b);
    if (*raised || keep) {
        free(out);
        return s;
    }
    free(s);
    return out;
}

/* Text Python's str(int(t)) gives back unchanged: "-"? then "0" or a digit string without a leading 0. */
static bool canonical_int(const char *t, size_t n)
{
    size_t i = t[0] == '-';
    if (i == n)
        return false;
    for (size_t j = i; j < n; j++)
        if (t[j] < '0' || t[j] > '9')
            return false;
    return !(t[i] == '0' && (n - i > 1 || i == 1)); /* no leading zero, no "-0" */
}

/* fix_a_slash_b: "a/b" of two integers -> "\frac{a}{b}". */
static char *fix_a_slash_b(char *s)
{
    const char *slash = s ? strchr(s, '/') : NULL;
    if (!slash || strchr(slash + 1, '/'))
        return s;
    size_t an = (size_t)(slash - s), bn = strlen(slash + 1);
    if (!canonical_int(s, an) || !canonical_int(slash + 1, bn))
        return s;
    df_rt_buf b = {0};
    df_rt_adds(&b, "\\frac{");
    df_rt_add(&b, s, an);
    df_rt_adds(&b, "}{");
    df_rt_add(&b, slash + 1, bn);
    df_rt_adds(&b, "}");
    free(s);
    return df_rt_take(&b);
}

/* "k = 5" -> " 5": one '=' with at most two code points before it. */
static char *drop_short_lhs(char *s)
{
    const char *eq = s ? strchr(s, '=') : NULL;
    if (!eq || strchr(eq + 1, '=') || df_rt_cp_count(s, (size_t)(eq - s)) > 2)
        return s;
    char *r = df_rt_ndup(eq + 1, strlen(eq + 1));
    free(s);
    return r;
}

/* Replacements of strip_string before its first fallible step, in verl's order. */
static const char *const STRIP_REPL[][2] = {
    {"\n", ""},     {"\\!", ""},     {"\\\\", "\\"},    {"tfrac", "frac"}, {"dfrac", "frac"},
    {"\\left", ""}, {"\\right", ""}, {"^{\\circ}", ""}, {"^\\circ", ""},   {"\\$", ""},
};

int df_reward_math_strip(const char *in, char **out)
{
    *out = NULL;
    char *s = df_rt_ndup(in, strlen(in));
    bool raised = false;
    for (size_t i = 0; i < sizeof STRIP_REPL / sizeof *STRIP_REPL; i++)
        s = df_rt_replace(s, STRIP_REPL[i][0], STRIP_REPL[i][1]);
    s = remove_right_units(s, &raised);
    s = df_rt_replace(s, "\\\\%", "");
    s = df_rt_replace(s, "\\%", "");
    s = df_rt_replace(s, " .", " 0.");
    s = df_rt_replace(s, "{.", "{0.");
    if (s && s[0] && !raised) {
        if (s[0] == '.') {
            char *z = malloc(strlen(s) + 2);
            if (z) {
                z[0] = '0';
                strcpy(z + 1, s);
            }
            free(s);
            s = z;
        }
        s = drop_short_lhs(s);
        s = fix_sqrt(s, &raised);
        s = df_rt_replace(s, " ", "");
        s = raised ? s : fix_fracs(s, &raised);
        if (s && !strcmp(s, "0.5")) {
            free(s);
            s = df_rt_ndup("\\frac{1}{2}", 11);
        }
        s = raised ? s : fix_a_slash_b(s);
    }
    if (!s)
        return df_error(DF_ENOMEM, "math scorer: out of memory");
    if (raised) {
        free(s);
        return df_error(DF_EINVAL, "math strip_string: '%.60s' takes a branch where verl's Python raises",
                        in);
    }
    *out = s;
    return DF_OK;
}

int df_reward_math_is_equiv(const char *a, const char *b, bool *equiv)
{
    char *sa = NULL, *sb = NULL;
    *equiv = false;
    int rc = df_reward_math_strip(a, &sa);
    if (!rc)
        rc = df_reward_math_strip(b, &sb);
    if (rc == DF_EINVAL) /* verl: `except Exception: return str1 == str2` */
        *equiv = !strcmp(a, b);
    else if (!rc)
        *equiv = !strcmp(sa, sb);
    free(sa);
    free(sb);
    return rc == DF_EINVAL ? DF_OK : rc;
}

int df_reward_math(const char *data_source, const char *solution_str, const char *ground_truth,
                   const char *extra_info, double *score)
{
    (void)data_source;
    (void)extra_info;
    *score = 0.0;
    const char *ans;
    size_t len;
    if (!ground_truth || !df_reward_math_last_boxed(solution_str, &ans, &len))
        return DF_OK;
    char *a = df_rt_ndup(ans, len);
    if (!a)
        return df_error(DF_ENOMEM, "math scorer: out of memory");
    bool eq;
    int rc = df_reward_math_is_equiv(a, ground_truth, &eq);
    free(a);
    if (!rc && eq)
        *score = 1.0;
    return rc;
}
