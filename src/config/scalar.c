/* YAML scalar parsing and formatting, edit-distance hints (config_internal.h). */
#include "config/config_internal.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- parsing (YAML 1.2 core schema, plus 1.1's yes/no/on/off and `_`) ---- */

bool cfg_is_null_text(const char *s, bool plain)
{
    return plain && (!*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") ||
                     !strcmp(s, "NULL"));
}

int cfg_parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"true", "yes", "on"}, *const no[] = {"false", "no", "off"};
    for (int i = 0; i < 3; i++) {
        if (!strcasecmp(s, yes[i]))
            return *out = true, 0;
        if (!strcasecmp(s, no[i]))
            return *out = false, 0;
    }
    return -1;
}

/* Copy s without `_` separators (only between digits) into buf; -1 if malformed. */
static int strip_underscores(const char *s, char *buf, size_t cap)
{
    size_t n = 0;
    for (const char *p = s; *p; p++) {
        if (*p == '_') {
            if (p == s || !isxdigit((unsigned char)p[-1]) || !isxdigit((unsigned char)p[1]))
                return -1;
            continue;
        }
        if (n + 1 >= cap)
            return -1;
        buf[n++] = *p;
    }
    buf[n] = '\0';
    return 0;
}

int cfg_parse_int(const char *s, int64_t *out)
{
    char buf[80];
    if (strip_underscores(s, buf, sizeof buf))
        return -1;
    const char *p = buf;
    bool neg = false;
    if (*p == '+' || *p == '-')
        neg = *p++ == '-';
    int base = 10;
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X'))
        base = 16, p += 2;
    else if (p[0] == '0' && p[1] == 'o')
        base = 8, p += 2;
    if (!*p)
        return -1;
    for (const char *q = p; *q; q++)
        if (base == 16 ? !isxdigit((unsigned char)*q) : (*q < '0' || *q >= '0' + base))
            return -1;
    errno = 0;
    unsigned long long u = strtoull(p, NULL, base);
    if (errno == ERANGE || u > (unsigned long long)INT64_MAX + (neg ? 1u : 0u))
        return -2;
    *out = neg ? (int64_t)(0 - u) : (int64_t)u;
    return 0;
}

static size_t count_digits(const char *p)
{
    size_t n = 0;
    while (isdigit((unsigned char)p[n]))
        n++;
    return n;
}

int cfg_parse_float(const char *s, double *out)
{
    const char *p = s;
    int sign = 1;
    if (*p == '+' || *p == '-')
        sign = *p++ == '-' ? -1 : 1;
    if (!strcmp(p, ".inf") || !strcmp(p, ".Inf") || !strcmp(p, ".INF"))
        return *out = sign * INFINITY, 0;
    if (p == s && (!strcmp(p, ".nan") || !strcmp(p, ".NaN") || !strcmp(p, ".NAN")))
        return *out = NAN, 0;
    char buf[80];
    if (strip_underscores(p, buf, sizeof buf))
        return -1;
    /* [digits][.digits][(e|E)[sign]digits] with at least one mantissa digit */
    const char *q = buf;
    size_t d1 = count_digits(q), d2 = 0;
    q += d1;
    if (*q == '.')
        q++, d2 = count_digits(q), q += d2;
    if (d1 + d2 == 0)
        return -1;
    if (*q == 'e' || *q == 'E') {
        q++;
        if (*q == '+' || *q == '-')
            q++;
        size_t d3 = count_digits(q);
        if (!d3)
            return -1;
        q += d3;
    }
    if (*q)
        return -1;
    errno = 0;
    double x = strtod(buf, NULL);
    if (errno == ERANGE && isinf(x))
        return -2;
    *out = sign * x;
    return 0;
}

/* ---- formatting ---- */

void cfg_format_float(double x, char *buf, size_t cap)
{
    if (isinf(x)) {
        snprintf(buf, cap, "%s", x > 0 ? ".inf" : "-.inf");
        return;
    }
    if (isnan(x)) {
        snprintf(buf, cap, ".nan");
        return;
    }
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, x);
        if (strtod(buf, NULL) == x)
            break;
    }
    /* Positional notation for moderate magnitudes (1000.0, not 1e+03). */
    double ax = fabs(x);
    if (strchr(buf, 'e') && ax >= 1e-4 && ax < 1e16) {
        int decimals = prec - 1 - (int)floor(log10(ax));
        char fixed[48];
        snprintf(fixed, sizeof fixed, "%.*f", decimals > 0 ? decimals : 0, x);
        if (strtod(fixed, NULL) == x && strlen(fixed) < cap)
            strcpy(buf, fixed);
    }
    /* Keep a float look for integral values ("1.0"), as Python / verl print them. */
    if (!strpbrk(buf, ".eEn") && strlen(buf) + 3 < cap)
        strcat(buf, ".0");
}

static bool plain_safe(const char *s)
{
    if (!*s || cfg_is_null_text(s, true))
        return false;
    bool bv;
    int64_t iv;
    double fv;
    if (!cfg_parse_bool(s, &bv) || cfg_parse_int(s, &iv) != -1 || cfg_parse_float(s, &fv) != -1)
        return false; /* would read back as another type in generic YAML tools */
    if (!isalpha((unsigned char)s[0]) && !strchr("_./~", s[0]))
        return false; /* digit-led text may be a date or number to other YAML readers */
    for (const char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("_./~+-", *p))
            return false;
    return true;
}

void cfg_quote(df_sbuf *b, const char *s)
{
    if (plain_safe(s)) {
        df_sbuf_puts(b, s);
        return;
    }
    df_sbuf_puts(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            char e[2] = {'\\', (char)*p};
            df_sbuf_put(b, e, 2);
        } else if (*p == '\n') {
            df_sbuf_puts(b, "\\n");
        } else if (*p == '\t') {
            df_sbuf_puts(b, "\\t");
        } else if (*p < 0x20 || *p == 0x7f) {
            df_sbuf_printf(b, "\\x%02x", *p);
        } else {
            df_sbuf_put(b, (const char *)p, 1);
        }
    }
    df_sbuf_puts(b, "\"");
}

void cfg_format_value(df_sbuf *b, const df_config_entry *e, const cfg_value *v)
{
    char num[48];
    if (v->is_null) {
        df_sbuf_puts(b, "null");
        return;
    }
    switch (e->type) {
    case DF_CFG_BOOL:
        df_sbuf_puts(b, v->b ? "true" : "false");
        break;
    case DF_CFG_INT:
        df_sbuf_printf(b, "%" PRId64, v->i);
        break;
    case DF_CFG_FLOAT:
        cfg_format_float(v->f, num, sizeof num);
        df_sbuf_puts(b, num);
        break;
    case DF_CFG_STR:
        cfg_quote(b, v->s);
        break;
    case DF_CFG_MAP: /* already canonical flow YAML */
        df_sbuf_puts(b, v->s);
        break;
    case DF_CFG_STR_LIST:
    case DF_CFG_FLOAT_LIST:
        df_sbuf_puts(b, "[");
        for (int i = 0; i < v->n_items; i++) {
            if (i)
                df_sbuf_puts(b, ", ");
            if (e->type == DF_CFG_STR_LIST) {
                cfg_quote(b, v->items[i]);
            } else {
                cfg_format_float(v->fitems[i], num, sizeof num);
                df_sbuf_puts(b, num);
            }
        }
        df_sbuf_puts(b, "]");
        break;
    }
}

void cfg_show_text(const char *s, char *buf, size_t cap)
{
    size_t n = strlen(s);
    if (n > 60)
        snprintf(buf, cap, "\"%.57s...\"", s);
    else
        snprintf(buf, cap, "\"%s\"", s);
}

/* ---- hints ---- */

#define ED_MAX 255

int cfg_edit_distance(const char *a, size_t na, const char *b, size_t nb)
{
    if (na > ED_MAX)
        na = ED_MAX;
    if (nb > ED_MAX)
        nb = ED_MAX;
    int rows[3][ED_MAX + 1];
    int *pp = rows[0], *prev = rows[1], *cur = rows[2];
    for (size_t j = 0; j <= nb; j++)
        prev[j] = (int)j;
    for (size_t i = 1; i <= na; i++) {
        cur[0] = (int)i;
        for (size_t j = 1; j <= nb; j++) {
            int cost = a[i - 1] != b[j - 1];
            int d = prev[j] + 1;
            if (cur[j - 1] + 1 < d)
                d = cur[j - 1] + 1;
            if (prev[j - 1] + cost < d)
                d = prev[j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && pp[j - 2] + 1 < d)
                d = pp[j - 2] + 1;
            cur[j] = d;
        }
        int *t = pp;
        pp = prev;
        prev = cur;
        cur = t;
    }
    return prev[nb];
}

static const char *leaf_of(const char *s, size_t n)
{
    const char *p = s + n;
    while (p > s && p[-1] != '.')
        p--;
    return p;
}

typedef struct {
    const char *key, *leaf;
    size_t nkey, nleaf;
    int tier, d, d_full; /* best so far: lower tier, then d, then d_full */
    const char *best;
    size_t nbest;
} hint_state;

/* Tier 0: the whole key is close; tier 1: only the last component is. */
static void consider(hint_state *h, const char *cand, size_t n)
{
    int d_full = cfg_edit_distance(h->key, h->nkey, cand, n);
    int tier = 2, d = 0;
    int full_tol = (int)(h->nkey / 5) > 1 ? (int)(h->nkey / 5) : 1;
    if (d_full <= full_tol) {
        tier = 0;
        d = d_full;
    } else {
        const char *cl = leaf_of(cand, n);
        size_t ncl = (size_t)(cand + n - cl);
        int dl = cfg_edit_distance(h->leaf, h->nleaf, cl, ncl);
        if (dl <= (int)(h->nleaf / 4))
            tier = 1, d = dl;
    }
    if (tier == 2)
        return;
    if (!h->best || tier < h->tier || (tier == h->tier && (d < h->d || (d == h->d && d_full < h->d_full)))) {
        h->best = cand;
        h->nbest = n;
        h->tier = tier;
        h->d = d;
        h->d_full = d_full;
    }
}

bool cfg_suggest_key(const df_config_schema *s, const char *key, char *buf, size_t cap)
{
    hint_state h = {.key = key, .nkey = strlen(key)};
    h.leaf = leaf_of(key, h.nkey);
    h.nleaf = (size_t)(key + h.nkey - h.leaf);
    for (int i = 0; i < s->n; i++) {
        const char *k = s->entries[i].key;
        for (const char *dot = strchr(k, '.'); dot; dot = strchr(dot + 1, '.'))
            consider(&h, k, (size_t)(dot - k)); /* its groups */
        if (!cfg_is_open(&s->entries[i])) /* "g.*" is no name to suggest */
            consider(&h, k, strlen(k));
    }
    if (!h.best)
        return false;
    snprintf(buf, cap, "%.*s", (int)h.nbest, h.best);
    return true;
}

bool cfg_choice_ok(const char *choices, const char *text)
{
    size_t n = strlen(text);
    for (const char *p = choices; *p;) {
        size_t m = strcspn(p, "|");
        if (m == n && !strncmp(p, text, n))
            return true;
        p += m + (p[m] == '|');
    }
    return false;
}

bool cfg_suggest_choice(const char *choices, const char *text, char *buf, size_t cap)
{
    size_t n = strlen(text);
    int best = -1;
    const char *bp = NULL;
    size_t bm = 0;
    int tol = (int)(n / 3) > 1 ? (int)(n / 3) : 1;
    for (const char *p = choices; *p;) {
        size_t m = strcspn(p, "|");
        int d = cfg_edit_distance(text, n, p, m);
        if (d <= tol && (best < 0 || d < best))
            best = d, bp = p, bm = m;
        p += m + (p[m] == '|');
    }
    if (!bp)
        return false;
    snprintf(buf, cap, "%.*s", (int)bm, bp);
    return true;
}
