/*
 * Methods of values (Python's str / dict / list methods that chat templates
 * call: `content.split('</think>')`, `message.get('x')`, `d.items()`) and the
 * globals every render sees (methods that mutate, like list.append, are
 * refused as transformers' ImmutableSandboxedEnvironment refuses them): range, namespace, dict,
 * raise_exception and transformers' strftime_now.
 */
#include "jinja/jinja_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static jj_val mk_func(jj_eval *e, const char *name, jj_builtin fn, jj_val self)
{
    jj_func *f = jj_alloc(e->c, sizeof *f);
    f->name = name;
    f->fn = fn;
    f->self = self;
    return (jj_val){.t = JT_FUNC, .fn = f};
}

static jj_val want_str(jj_eval *e, const jj_args *a, jj_val v, const char *what)
{
    if (v.t != JT_STR)
        jj_rt_fail(e, a->at, "%s expects a string argument, got %s", what, jj_type_name(v));
    return v;
}

/* ---- str ------------------------------------------------------------------------ */

static jj_val m_strip(jj_eval *e, jj_val s, const jj_args *a)
{
    return jj_strip(e, s, jj_arg(a, 0, "chars", jj_none), true, true);
}
static jj_val m_lstrip(jj_eval *e, jj_val s, const jj_args *a)
{
    return jj_strip(e, s, jj_arg(a, 0, "chars", jj_none), true, false);
}
static jj_val m_rstrip(jj_eval *e, jj_val s, const jj_args *a)
{
    return jj_strip(e, s, jj_arg(a, 0, "chars", jj_none), false, true);
}
static jj_val m_upper(jj_eval *e, jj_val s, const jj_args *a)
{
    (void)a;
    return jj_case_map(e, s, 1);
}
static jj_val m_lower(jj_eval *e, jj_val s, const jj_args *a)
{
    (void)a;
    return jj_case_map(e, s, 0);
}
static jj_val m_title(jj_eval *e, jj_val s, const jj_args *a)
{
    (void)a;
    return jj_case_map(e, s, 2);
}
static jj_val m_capitalize(jj_eval *e, jj_val s, const jj_args *a)
{
    (void)a;
    return jj_case_map(e, s, 3);
}

static bool ws(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v';
}

static jj_val m_split(jj_eval *e, jj_val s, const jj_args *a)
{
    jj_val sep = jj_arg(a, 0, "sep", jj_none), maxv = jj_arg(a, 1, "maxsplit", jj_int(-1));
    int64_t max = maxv.t == JT_INT ? maxv.i : -1, done = 0;
    jj_val out = jj_list_new(e->c, 0);
    const char *p = s.s->s, *end = p + s.s->n;
    if (sep.t == JT_NONE) { /* runs of whitespace, no empty parts */
        for (;;) {
            while (p < end && ws(*p))
                p++;
            if (p == end)
                break;
            const char *q = p;
            if (max >= 0 && done >= max)
                q = end;
            else
                while (q < end && !ws(*q))
                    q++;
            if (q == end && max >= 0 && done >= max)
                while (q > p && ws(q[-1]))
                    q--;
            jj_list_push(e->c, out.l, jj_str_n(e->c, p, (size_t)(q - p)));
            done++;
            p = q;
        }
        return out;
    }
    want_str(e, a, sep, "split");
    if (sep.s->n == 0)
        jj_rt_fail(e, a->at, "split: empty separator");
    for (;;) {
        const char *q = max >= 0 && done >= max ? NULL : memmem(p, (size_t)(end - p), sep.s->s, sep.s->n);
        if (!q) {
            jj_list_push(e->c, out.l, jj_str_n(e->c, p, (size_t)(end - p)));
            return out;
        }
        jj_list_push(e->c, out.l, jj_str_n(e->c, p, (size_t)(q - p)));
        p = q + sep.s->n;
        done++;
    }
}

static bool affix(jj_val s, jj_val x, bool start)
{
    if (x.t != JT_STR || x.s->n > s.s->n)
        return false;
    const char *at = start ? s.s->s : s.s->s + s.s->n - x.s->n;
    return memcmp(at, x.s->s, x.s->n) == 0;
}

static jj_val starts_or_ends(jj_eval *e, jj_val s, const jj_args *a, bool start)
{
    jj_val x = jj_arg(a, 0, NULL, jj_undef);
    if (x.t == JT_LIST) { /* a tuple of prefixes */
        for (size_t i = 0; i < x.l->n; i++)
            if (affix(s, x.l->v[i], start))
                return jj_bool(true);
        return jj_bool(false);
    }
    want_str(e, a, x, start ? "startswith" : "endswith");
    return jj_bool(affix(s, x, start));
}

static jj_val m_startswith(jj_eval *e, jj_val s, const jj_args *a)
{
    return starts_or_ends(e, s, a, true);
}
static jj_val m_endswith(jj_eval *e, jj_val s, const jj_args *a)
{
    return starts_or_ends(e, s, a, false);
}

static jj_val m_replace(jj_eval *e, jj_val s, const jj_args *a)
{
    jj_val old = want_str(e, a, jj_arg(a, 0, NULL, jj_undef), "replace");
    jj_val nw = want_str(e, a, jj_arg(a, 1, NULL, jj_undef), "replace");
    jj_val cnt = jj_arg(a, 2, "count", jj_int(-1));
    return jj_replace(e, s, old, nw, cnt.t == JT_INT ? cnt.i : -1);
}

static jj_val m_find(jj_eval *e, jj_val s, const jj_args *a)
{
    jj_val x = want_str(e, a, jj_arg(a, 0, NULL, jj_undef), "find");
    const char *p = memmem(s.s->s, s.s->n, x.s->s, x.s->n);
    return jj_int(p ? (int64_t)(p - s.s->s) : -1);
}

static jj_val m_count(jj_eval *e, jj_val s, const jj_args *a)
{
    jj_val x = want_str(e, a, jj_arg(a, 0, NULL, jj_undef), "count");
    if (x.s->n == 0)
        return jj_int((int64_t)jj_iter(e, a->at, s)->n + 1);
    int64_t n = 0;
    for (const char *p = s.s->s, *end = p + s.s->n; (p = memmem(p, (size_t)(end - p), x.s->s, x.s->n));
         p += x.s->n)
        n++;
    return jj_int(n);
}

static jj_val m_join(jj_eval *e, jj_val s, const jj_args *a)
{
    jj_list *l = jj_iter(e, a->at, jj_arg(a, 0, NULL, jj_undef));
    jj_buf b = {.c = e->c};
    jj_put(&b, "", 0);
    for (size_t i = 0; i < l->n; i++) {
        if (i)
            jj_put(&b, s.s->s, s.s->n);
        jj_print(&b, l->v[i]);
    }
    return jj_str_n(e->c, b.s, b.n);
}

/* "{} {0} {name}".format(...): fields by position or keyword, printed with str() */
static jj_val m_format(jj_eval *e, jj_val s, const jj_args *a)
{
    jj_buf b = {.c = e->c};
    jj_put(&b, "", 0);
    int auto_i = 0;
    for (const char *p = s.s->s, *end = p + s.s->n; p < end; p++) {
        if ((*p == '{' || *p == '}') && p + 1 < end && p[1] == *p) {
            jj_put(&b, p++, 1);
            continue;
        }
        if (*p != '{') {
            jj_put(&b, p, 1);
            continue;
        }
        const char *q = memchr(p, '}', (size_t)(end - p));
        if (!q)
            jj_rt_fail(e, a->at, "format: unmatched '{'");
        const char *colon = memchr(p, ':', (size_t)(q - p));
        size_t n = (size_t)((colon ? colon : q) - p - 1);
        char *field = jj_strndup(e->c, p + 1, n);
        jj_val v;
        if (n == 0)
            v = jj_arg(a, auto_i++, NULL, jj_undef);
        else if (field[0] >= '0' && field[0] <= '9')
            v = jj_arg(a, atoi(field), NULL, jj_undef);
        else
            v = jj_arg(a, -1, field, jj_undef);
        if (v.t == JT_UNDEF)
            jj_rt_fail(e, a->at, "format: no argument for field '{%s}'", field);
        jj_print(&b, v);
        p = q;
    }
    return jj_str_n(e->c, b.s, b.n);
}

/* ---- dict and list ------------------------------------------------------------- */

static jj_val m_get(jj_eval *e, jj_val d, const jj_args *a)
{
    (void)e;
    jj_val *v = jj_dict_get(d.d, jj_arg(a, 0, NULL, jj_undef));
    return v ? *v : jj_arg(a, 1, "default", jj_none);
}

static jj_val m_items(jj_eval *e, jj_val d, const jj_args *a)
{
    (void)a;
    jj_val out = jj_list_new(e->c, d.d->n);
    for (size_t i = 0; i < d.d->n; i++) {
        jj_val pair = jj_list_new(e->c, 2);
        jj_list_push(e->c, pair.l, d.d->k[i]);
        jj_list_push(e->c, pair.l, d.d->v[i]);
        jj_list_push(e->c, out.l, pair);
    }
    return out;
}

static jj_val m_keys(jj_eval *e, jj_val d, const jj_args *a)
{
    return (jj_val){.t = JT_LIST, .l = jj_iter(e, a->at, d)};
}

static jj_val m_values(jj_eval *e, jj_val d, const jj_args *a)
{
    (void)a;
    jj_val out = jj_list_new(e->c, d.d->n);
    for (size_t i = 0; i < d.d->n; i++)
        jj_list_push(e->c, out.l, d.d->v[i]);
    return out;
}

typedef struct method {
    jj_type t;
    const char *name;
    jj_builtin fn;
} method;

static const method METHODS[] = {
    {JT_STR, "strip", m_strip},           {JT_STR, "lstrip", m_lstrip},
    {JT_STR, "rstrip", m_rstrip},         {JT_STR, "upper", m_upper},
    {JT_STR, "lower", m_lower},           {JT_STR, "title", m_title},
    {JT_STR, "capitalize", m_capitalize}, {JT_STR, "split", m_split},
    {JT_STR, "startswith", m_startswith}, {JT_STR, "endswith", m_endswith},
    {JT_STR, "replace", m_replace},       {JT_STR, "find", m_find},
    {JT_STR, "count", m_count},           {JT_STR, "join", m_join},
    {JT_STR, "format", m_format},         {JT_DICT, "get", m_get},
    {JT_DICT, "items", m_items},          {JT_DICT, "keys", m_keys},
    {JT_DICT, "values", m_values},
};

jj_val jj_method(jj_eval *e, jj_val v, const char *name)
{
    for (size_t i = 0; i < sizeof METHODS / sizeof METHODS[0]; i++)
        if (METHODS[i].t == v.t && !strcmp(METHODS[i].name, name))
            return mk_func(e, METHODS[i].name, METHODS[i].fn, v);
    return jj_undef;
}

/* ---- globals ------------------------------------------------------------------- */

static jj_val g_range(jj_eval *e, jj_val self, const jj_args *a)
{
    (void)self;
    int64_t v[3] = {0, 0, 1};
    if (a->n < 1 || a->n > 3)
        jj_rt_fail(e, a->at, "range expects 1 to 3 integer arguments, got %d", a->n);
    for (int i = 0; i < a->n; i++) {
        if (a->v[i].t != JT_INT && a->v[i].t != JT_BOOL)
            jj_rt_fail(e, a->at, "range: '%s' object cannot be interpreted as an integer",
                       jj_type_name(a->v[i]));
        v[a->n == 1 ? 1 : i] = a->v[i].t == JT_INT ? a->v[i].i : a->v[i].b;
    }
    if (v[2] == 0)
        jj_rt_fail(e, a->at, "range() arg 3 must not be zero");
    /* in 128 bits: the bounds may be anywhere in int64 */
    __int128 span = v[2] > 0 ? (__int128)v[1] - v[0] + v[2] - 1 : (__int128)v[0] - v[1] - v[2] - 1;
    __int128 n128 = span / (v[2] > 0 ? (__int128)v[2] : -(__int128)v[2]);
    int64_t n = n128 > 10000001 ? 10000001 : (int64_t)n128;
    if (n > 10000000)
        jj_rt_fail(e, a->at, "range of more than 10000000 items");
    jj_val out = jj_list_new(e->c, n > 0 ? (size_t)n : 0);
    for (int64_t i = 0; i < n; i++)
        jj_list_push(e->c, out.l, jj_int(v[0] + i * v[2]));
    return out;
}

/* namespace(dict?, key=value...) and dict(key=value...) */
static jj_val make_dict(jj_eval *e, const jj_args *a, bool ns)
{
    jj_val d = jj_dict_new(e->c);
    d.d->ns = ns;
    for (int i = 0; i < a->n; i++) {
        if (a->v[i].t != JT_DICT)
            jj_rt_fail(e, a->at, "%s: positional arguments must be dicts", ns ? "namespace" : "dict");
        for (size_t k = 0; k < a->v[i].d->n; k++)
            jj_dict_set(e->c, d.d, a->v[i].d->k[k], a->v[i].d->v[k]);
    }
    for (int k = 0; k < a->n_kw; k++)
        jj_dict_set(e->c, d.d, jj_cstr(e->c, a->kw[k]), a->kwv[k]);
    return d;
}

static jj_val g_namespace(jj_eval *e, jj_val self, const jj_args *a)
{
    (void)self;
    return make_dict(e, a, true);
}
static jj_val g_dict(jj_eval *e, jj_val self, const jj_args *a)
{
    (void)self;
    return make_dict(e, a, false);
}

static jj_val g_raise(jj_eval *e, jj_val self, const jj_args *a)
{
    (void)self;
    jj_val msg = jj_to_str(e->c, jj_arg(a, 0, NULL, jj_cstr(e->c, "")));
    jj_fail(e->c, 0, 0, "raise_exception: %s", msg.s->s);
}

static jj_val g_strftime_now(jj_eval *e, jj_val self, const jj_args *a)
{
    (void)self;
    jj_val fmt = want_str(e, a, jj_arg(a, 0, NULL, jj_undef), "strftime_now");
    time_t now = e->now ? e->now : time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char out[512];
    size_t n = strftime(out, sizeof out, fmt.s->s, &tm);
    return jj_str_n(e->c, out, n);
}

void jj_add_globals(jj_eval *e, jj_dict *g)
{
    static const struct {
        const char *name;
        jj_builtin fn;
    } G[] = {{"range", g_range},
             {"namespace", g_namespace},
             {"dict", g_dict},
             {"raise_exception", g_raise},
             {"strftime_now", g_strftime_now}};
    for (size_t i = 0; i < sizeof G / sizeof G[0]; i++)
        jj_dict_set(e->c, g, jj_cstr(e->c, G[i].name), mk_func(e, G[i].name, G[i].fn, jj_none));
}
