/*
 * Jinja filters (`x | name(args)`) and tests (`x is name(args)`), with the
 * semantics of Jinja2's built-ins and transformers' `tojson`
 * (json.dumps(x, ensure_ascii=False, indent=indent, sort_keys=sort_keys)).
 */
#include "jinja/jinja_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

jj_val jj_arg(const jj_args *a, int i, const char *kw, jj_val def)
{
    for (int k = 0; kw && k < a->n_kw; k++)
        if (!strcmp(a->kw[k], kw))
            return a->kwv[k];
    return i >= 0 && i < a->n ? a->v[i] : def;
}

static const char *want_str(jj_eval *e, const jj_args *a, jj_val v, const char *what)
{
    if (v.t != JT_STR)
        jj_rt_fail(e, a->at, "%s expects a string, got %s", what, jj_type_name(v));
    return v.s->s;
}

static int64_t want_int(jj_eval *e, const jj_args *a, jj_val v, const char *what)
{
    if (v.t == JT_BOOL)
        return v.b;
    if (v.t != JT_INT)
        jj_rt_fail(e, a->at, "%s expects an integer, got %s", what, jj_type_name(v));
    return v.i;
}

static bool is_space(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v';
}

/* Python str.strip / lstrip / rstrip: whitespace, or the characters of `chars` */
jj_val jj_strip(jj_eval *e, jj_val v, jj_val chars, bool left, bool right)
{
    const char *s = v.s->s, *end = s + v.s->n;
    const char *set = chars.t == JT_STR ? chars.s->s : NULL;
#define STRIPPED(ch) (set ? strchr(set, (ch)) != NULL && (ch) != '\0' : is_space(ch))
    while (left && s < end && STRIPPED(*s))
        s++;
    while (right && end > s && STRIPPED(end[-1]))
        end--;
#undef STRIPPED
    return jj_str_n(e->c, s, (size_t)(end - s));
}

static jj_val f_length(jj_eval *e, jj_val v, const jj_args *a)
{
    switch (v.t) {
    case JT_STR:
    case JT_LIST:
    case JT_DICT:
    case JT_UNDEF: return jj_int((int64_t)jj_iter(e, a->at, v)->n);
    default: jj_rt_fail(e, a->at, "object of type '%s' has no len()", jj_type_name(v));
    }
}

static jj_val f_join(jj_eval *e, jj_val v, const jj_args *a)
{
    jj_val sep = jj_arg(a, 0, "d", jj_undef), attr = jj_arg(a, 1, "attribute", jj_undef);
    jj_list *l = jj_iter(e, a->at, v);
    jj_buf b = {.c = e->c};
    jj_put(&b, "", 0);
    for (size_t i = 0; i < l->n; i++) {
        if (i && sep.t == JT_STR)
            jj_put(&b, sep.s->s, sep.s->n);
        jj_val x = l->v[i];
        if (attr.t == JT_STR && x.t == JT_DICT) {
            jj_val *y = jj_dict_getc(x.d, attr.s->s);
            x = y ? *y : jj_undef;
        }
        jj_print(&b, x);
    }
    return jj_str_n(e->c, b.s, b.n);
}

jj_val jj_case_map(jj_eval *e, jj_val v, int mode) /* 0 lower, 1 upper, 2 title, 3 capitalize */
{
    jj_val out = jj_str_n(e->c, v.s->s, v.s->n);
    char *s = out.s->s;
    bool word_start = true;
    for (size_t i = 0; i < out.s->n; i++) {
        char ch = s[i];
        bool alpha = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
        bool up = mode == 1 || ((mode == 2 || mode == 3) && word_start && alpha);
        if (mode == 3 && i > 0)
            up = false;
        if (up && ch >= 'a' && ch <= 'z')
            s[i] = (char)(ch - 32);
        else if (!up && ch >= 'A' && ch <= 'Z')
            s[i] = (char)(ch + 32);
        word_start = !alpha && !((unsigned char)ch >= 0x80);
    }
    return out;
}

jj_val jj_replace(jj_eval *e, jj_val v, jj_val old, jj_val new_, int64_t count)
{
    jj_buf b = {.c = e->c};
    jj_put(&b, "", 0);
    const char *s = v.s->s, *end = s + v.s->n;
    int64_t done = 0;
    if (old.s->n == 0) { /* Python inserts between every character */
        for (; s <= end && (count < 0 || done < count); done++) {
            jj_put(&b, new_.s->s, new_.s->n);
            if (s < end)
                jj_put(&b, s, 1);
            s++;
        }
        if (s < end)
            jj_put(&b, s, (size_t)(end - s));
        return jj_str_n(e->c, b.s, b.n);
    }
    while (count < 0 || done < count) {
        const char *p = memmem(s, (size_t)(end - s), old.s->s, old.s->n);
        if (!p)
            break;
        jj_put(&b, s, (size_t)(p - s));
        jj_put(&b, new_.s->s, new_.s->n);
        s = p + old.s->n;
        done++;
    }
    jj_put(&b, s, (size_t)(end - s));
    return jj_str_n(e->c, b.s, b.n);
}

static jj_val f_tojson(jj_eval *e, jj_val v, const jj_args *a)
{
    jj_val indent = jj_arg(a, 1, "indent", jj_none), ascii = jj_arg(a, 0, "ensure_ascii", jj_bool(false));
    jj_val sort = jj_arg(a, 3, "sort_keys", jj_bool(false));
    /* transformers' signature: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
     */
    if (jj_arg(a, 2, "separators", jj_none).t != JT_NONE)
        jj_rt_fail(e, a->at, "tojson: separators is not supported");
    int ind = indent.t == JT_INT ? (int)indent.i : 0;
    jj_buf b = {.c = e->c};
    jj_put(&b, "", 0);
    jj_json_dump(e, &b, v, ind, jj_truthy(ascii), jj_truthy(sort), 0);
    return jj_str_n(e->c, b.s, b.n);
}

/* the item's attribute for selectattr / map / sort (dotted paths, integer parts as indices) */
static jj_val attr_of(jj_eval *e, jj_val x, jj_val attr)
{
    const char *p = attr.s->s;
    while (*p) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        char *part = jj_strndup(e->c, p, n);
        char *endp;
        long idx = strtol(part, &endp, 10);
        if (x.t == JT_DICT) {
            jj_val *y = jj_dict_getc(x.d, part);
            x = y ? *y : jj_undef;
        } else if (x.t == JT_LIST && *part && !*endp && idx >= 0 && (size_t)idx < x.l->n) {
            x = x.l->v[idx];
        } else {
            return jj_undef;
        }
        p += n + (dot ? 1 : 0);
    }
    return x;
}

/* select / reject / selectattr / rejectattr */
static jj_val f_select(jj_eval *e, jj_val v, const jj_args *a, bool attr, bool keep)
{
    jj_list *l = jj_iter(e, a->at, v);
    int t0 = attr ? 1 : 0;
    jj_val name = attr ? jj_arg(a, 0, NULL, jj_undef) : jj_undef;
    if (attr && name.t != JT_STR)
        jj_rt_fail(e, a->at, "selectattr / rejectattr need an attribute name");
    jj_val test = jj_arg(a, t0, NULL, jj_undef);
    jj_args ta = {.n = a->n > t0 + 1 ? a->n - t0 - 1 : 0, .v = a->v + t0 + 1, .at = a->at};
    jj_val out = jj_list_new(e->c, 0);
    for (size_t i = 0; i < l->n; i++) {
        jj_val x = attr ? attr_of(e, l->v[i], name) : l->v[i];
        bool ok = test.t == JT_STR ? jj_test(e, a->at, test.s->s, x, &ta) : jj_truthy(x);
        if (ok == keep)
            jj_list_push(e->c, out.l, l->v[i]);
    }
    return out;
}

static jj_val f_map(jj_eval *e, jj_scope *s, jj_val v, const jj_args *a)
{
    jj_list *l = jj_iter(e, a->at, v);
    jj_val attr = jj_arg(a, -1, "attribute", jj_undef), def = jj_arg(a, -1, "default", jj_undef);
    jj_val out = jj_list_new(e->c, l->n);
    if (attr.t == JT_STR) {
        for (size_t i = 0; i < l->n; i++) {
            jj_val x = attr_of(e, l->v[i], attr);
            jj_list_push(e->c, out.l, x.t == JT_UNDEF ? def : x);
        }
        return out;
    }
    jj_val f = jj_arg(a, 0, NULL, jj_undef);
    if (f.t != JT_STR)
        jj_rt_fail(e, a->at, "map needs a filter name or attribute=");
    jj_args fa = {.n = a->n - 1, .v = a->v + 1, .at = a->at};
    for (size_t i = 0; i < l->n; i++)
        jj_list_push(e->c, out.l, jj_filter(e, s, a->at, f.s->s, l->v[i], &fa));
    return out;
}

static jj_val f_indent(jj_eval *e, jj_val v, const jj_args *a)
{
    jj_val w = jj_arg(a, 0, "width", jj_int(4));
    bool first = jj_truthy(jj_arg(a, 1, "first", jj_bool(false)));
    bool blank = jj_truthy(jj_arg(a, 2, "blank", jj_bool(false)));
    jj_val pad = w.t == JT_STR ? w : jj_undef;
    if (w.t != JT_STR) {
        jj_buf p = {.c = e->c};
        jj_put(&p, "", 0);
        for (int64_t i = 0; i < want_int(e, a, w, "indent"); i++)
            jj_put(&p, " ", 1);
        pad = jj_str_n(e->c, p.s, p.n);
    }
    v = jj_to_str(e->c, v);
    jj_buf b = {.c = e->c};
    jj_put(&b, "", 0);
    if (first)
        jj_put(&b, pad.s->s, pad.s->n);
    /* Jinja appends a newline before splitting, so a trailing newline survives */
    const char *s = v.s->s, *end = s + v.s->n;
    bool line0 = true;
    for (;;) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        const char *le = nl ? nl : end;
        if (!line0) {
            jj_put(&b, "\n", 1);
            if (le > s || blank)
                jj_put(&b, pad.s->s, pad.s->n);
        }
        jj_put(&b, s, (size_t)(le - s));
        line0 = false;
        if (!nl)
            break;
        s = nl + 1;
    }
    return jj_str_n(e->c, b.s, b.n);
}

static jj_val f_round(jj_eval *e, jj_val v, const jj_args *a)
{
    int64_t prec = want_int(e, a, jj_arg(a, 0, "precision", jj_int(0)), "round");
    jj_val method = jj_arg(a, 1, "method", jj_undef);
    const char *m = method.t == JT_STR ? method.s->s : "common";
    double x = v.t == JT_FLOAT ? v.f : v.t == JT_INT ? (double)v.i : 0.0, k = pow(10.0, (double)prec);
    double r = !strcmp(m, "ceil")    ? ceil(x * k) / k
               : !strcmp(m, "floor") ? floor(x * k) / k
                                     : nearbyint(x * k) / k;
    return jj_float(r);
}

static int sort_cmp_key(jj_eval *e, const jj_node *at, jj_val x, jj_val y, bool cs)
{
    if (!cs && x.t == JT_STR && y.t == JT_STR) {
        jj_val lx = jj_case_map(e, x, 0), ly = jj_case_map(e, y, 0);
        return jj_compare(e, at, lx, ly);
    }
    return jj_compare(e, at, x, y);
}

/* dictsort and sort: a stable insertion sort (lists are short) */
static jj_val f_sort(jj_eval *e, jj_val v, const jj_args *a, bool dict)
{
    bool rev = jj_truthy(jj_arg(a, dict ? 2 : 0, "reverse", jj_bool(false)));
    bool cs = jj_truthy(jj_arg(a, dict ? 0 : 1, "case_sensitive", jj_bool(false)));
    jj_val by = dict ? jj_arg(a, 1, "by", jj_undef) : jj_arg(a, 2, "attribute", jj_undef);
    jj_val items = jj_list_new(e->c, 0);
    if (dict) {
        if (v.t != JT_DICT)
            jj_rt_fail(e, a->at, "dictsort expects a dict, got %s", jj_type_name(v));
        for (size_t i = 0; i < v.d->n; i++) {
            jj_val pair = jj_list_new(e->c, 2);
            jj_list_push(e->c, pair.l, v.d->k[i]);
            jj_list_push(e->c, pair.l, v.d->v[i]);
            jj_list_push(e->c, items.l, pair);
        }
    } else {
        jj_list *l = jj_iter(e, a->at, v);
        for (size_t i = 0; i < l->n; i++)
            jj_list_push(e->c, items.l, l->v[i]);
    }
    int ki = dict && by.t == JT_STR && !strcmp(by.s->s, "value") ? 1 : 0;
    jj_val *x = items.l->v;
    for (size_t i = 1; i < items.l->n; i++) {
        jj_val cur = x[i];
        size_t j = i;
        while (j > 0) {
            jj_val p = x[j - 1];
            jj_val kp = dict ? p.l->v[ki] : by.t == JT_STR ? attr_of(e, p, by) : p;
            jj_val kc = dict ? cur.l->v[ki] : by.t == JT_STR ? attr_of(e, cur, by) : cur;
            int r = sort_cmp_key(e, a->at, kp, kc, cs);
            if (rev ? r >= 0 : r <= 0)
                break;
            x[j] = x[j - 1];
            j--;
        }
        x[j] = cur;
    }
    return items;
}

static jj_val f_unique(jj_eval *e, jj_val v, const jj_args *a)
{
    jj_list *l = jj_iter(e, a->at, v);
    jj_val out = jj_list_new(e->c, 0);
    for (size_t i = 0; i < l->n; i++) {
        bool seen = false;
        for (size_t j = 0; j < out.l->n && !seen; j++)
            seen = jj_equal(out.l->v[j], l->v[i]);
        if (!seen)
            jj_list_push(e->c, out.l, l->v[i]);
    }
    return out;
}

static jj_val to_number(jj_eval *e, jj_val v, const jj_args *a, bool integer)
{
    jj_val def = jj_arg(a, 0, "default", integer ? jj_int(0) : jj_float(0.0));
    switch (v.t) {
    case JT_INT: return integer ? v : jj_float((double)v.i);
    case JT_BOOL: return integer ? jj_int(v.b) : jj_float(v.b);
    case JT_FLOAT: return integer ? jj_int((int64_t)v.f) : v;
    case JT_STR: {
        char *end;
        const char *s = v.s->s;
        while (is_space(*s))
            s++;
        double f = strtod(s, &end);
        while (is_space(*end))
            end++;
        if (end == s || *end)
            return def;
        return integer ? jj_int((int64_t)f) : jj_float(f);
    }
    default: (void)e; return def;
    }
}

jj_val jj_filter(jj_eval *e, jj_scope *s, const jj_node *at, const char *name, jj_val v, const jj_args *a)
{
    jj_ctx *c = e->c;
    bool str_in = v.t == JT_STR;
#define IS(n) (!strcmp(name, n))
    if (IS("default") || IS("d")) {
        jj_val def = jj_arg(a, 0, "default_value", jj_cstr(c, ""));
        bool boolean = jj_truthy(jj_arg(a, 1, "boolean", jj_bool(false)));
        return v.t == JT_UNDEF || (boolean && !jj_truthy(v)) ? def : v;
    }
    if (IS("safe") || IS("e") || IS("escape") || IS("forceescape"))
        return IS("safe") ? v : jj_to_str(c, v); /* chat templates run without autoescape */
    if (IS("string"))
        return jj_to_str(c, v);
    if (IS("tojson"))
        return f_tojson(e, v, a);
    if (IS("length") || IS("count"))
        return f_length(e, v, a);
    if (IS("list")) {
        jj_list *l = jj_iter(e, at, v);
        jj_val out = jj_list_new(c, l->n);
        for (size_t i = 0; i < l->n; i++)
            jj_list_push(c, out.l, l->v[i]);
        return out;
    }
    if (IS("items")) {
        if (v.t == JT_UNDEF)
            return jj_list_new(c, 0);
        if (v.t != JT_DICT)
            jj_rt_fail(e, at, "items expects a dict, got %s", jj_type_name(v));
        return jj_method(e, v, "items").fn->fn(e, v, a);
    }
    if (IS("first") || IS("last")) {
        jj_list *l = jj_iter(e, at, v);
        return l->n ? l->v[IS("first") ? 0 : l->n - 1] : jj_undef;
    }
    if (IS("join"))
        return f_join(e, v, a);
    if (IS("int") || IS("float"))
        return to_number(e, v, a, IS("int"));
    if (IS("abs")) {
        if (v.t == JT_INT && v.i == INT64_MIN)
            jj_rt_fail(e, at, "integer overflow in abs (integers are 64-bit)");
        if (v.t == JT_INT || v.t == JT_BOOL)
            return jj_int(llabs(v.t == JT_INT ? v.i : v.b));
        if (v.t == JT_FLOAT)
            return jj_float(fabs(v.f));
        jj_rt_fail(e, at, "bad operand type for abs(): '%s'", jj_type_name(v));
    }
    if (IS("round"))
        return f_round(e, v, a);
    if (IS("select") || IS("reject"))
        return f_select(e, v, a, false, IS("select"));
    if (IS("selectattr") || IS("rejectattr"))
        return f_select(e, v, a, true, IS("selectattr"));
    if (IS("map"))
        return f_map(e, s, v, a);
    if (IS("unique"))
        return f_unique(e, v, a);
    if (IS("dictsort") || IS("sort"))
        return f_sort(e, v, a, IS("dictsort"));
    if (IS("reverse")) {
        jj_list *l = jj_iter(e, at, v);
        jj_val out = jj_list_new(c, l->n);
        for (size_t i = l->n; i > 0; i--)
            jj_list_push(c, out.l, l->v[i - 1]);
        if (!str_in)
            return out;
        jj_args none = {.at = at};
        return f_join(e, out, &none);
    }
    if (IS("indent"))
        return f_indent(e, v, a);
    /* the rest work on text */
    v = jj_to_str(c, v);
    if (IS("trim"))
        return jj_strip(e, v, jj_arg(a, 0, "chars", jj_none), true, true);
    if (IS("upper") || IS("lower") || IS("title") || IS("capitalize"))
        return jj_case_map(e, v, IS("lower") ? 0 : IS("upper") ? 1 : IS("title") ? 2 : 3);
    if (IS("replace")) {
        jj_val old = jj_to_str(c, jj_arg(a, 0, "old", jj_undef)),
               nw = jj_to_str(c, jj_arg(a, 1, "new", jj_undef));
        jj_val cnt = jj_arg(a, 2, "count", jj_none);
        return jj_replace(e, v, old, nw, cnt.t == JT_INT ? cnt.i : -1);
    }
    if (IS("wordcount")) {
        int64_t n = 0;
        for (size_t i = 0; i < v.s->n; i++)
            n += !is_space(v.s->s[i]) && (i == 0 || is_space(v.s->s[i - 1]));
        return jj_int(n);
    }
#undef IS
    (void)want_str;
    jj_rt_fail(e, at, "unknown filter '%s'", name);
}

/* ---- tests --------------------------------------------------------------------- */

bool jj_test(jj_eval *e, const jj_node *at, const char *name, jj_val v, const jj_args *a)
{
    jj_val x = jj_arg(a, 0, NULL, jj_undef);
#define IS(n) (!strcmp(name, n))
    if (IS("defined"))
        return v.t != JT_UNDEF;
    if (IS("undefined"))
        return v.t == JT_UNDEF;
    if (IS("none"))
        return v.t == JT_NONE;
    if (IS("string"))
        return v.t == JT_STR;
    if (IS("number")) /* Python's bool is an int */
        return v.t == JT_INT || v.t == JT_FLOAT || v.t == JT_BOOL;
    if (IS("integer"))
        return v.t == JT_INT;
    if (IS("float"))
        return v.t == JT_FLOAT;
    if (IS("boolean"))
        return v.t == JT_BOOL;
    if (IS("true") || IS("false"))
        return v.t == JT_BOOL && v.b == IS("true");
    if (IS("mapping"))
        return v.t == JT_DICT;
    if (IS("iterable"))
        return v.t == JT_LIST || v.t == JT_DICT || v.t == JT_STR || v.t == JT_UNDEF;
    if (IS("sequence"))
        return v.t == JT_LIST || v.t == JT_DICT || v.t == JT_STR;
    if (IS("callable"))
        return v.t == JT_FUNC;
    if (IS("odd") || IS("even") || IS("divisibleby")) {
        if (v.t != JT_INT && v.t != JT_BOOL)
            jj_rt_fail(e, at, "test '%s' expects an integer, got %s", name, jj_type_name(v));
        int64_t i = v.t == JT_INT ? v.i : v.b;
        if (IS("divisibleby")) {
            int64_t d = x.t == JT_INT ? x.i : 0;
            if (d == 0)
                jj_rt_fail(e, at, "divisibleby needs a non-zero integer");
            return i % d == 0;
        }
        return (i % 2 != 0) == IS("odd");
    }
    if (IS("equalto") || IS("eq") || IS("==") || IS("sameas"))
        return jj_equal(v, x);
    if (IS("ne") || IS("!="))
        return !jj_equal(v, x);
    if (IS("lt") || IS("<") || IS("lessthan"))
        return jj_compare(e, at, v, x) < 0;
    if (IS("le") || IS("<="))
        return jj_compare(e, at, v, x) <= 0;
    if (IS("gt") || IS(">") || IS("greaterthan"))
        return jj_compare(e, at, v, x) > 0;
    if (IS("ge") || IS(">="))
        return jj_compare(e, at, v, x) >= 0;
    if (IS("in")) {
        if (x.t == JT_STR && v.t == JT_STR)
            return memmem(x.s->s, x.s->n, v.s->s, v.s->n) != NULL;
        if (x.t == JT_DICT)
            return jj_dict_get(x.d, v) != NULL;
        jj_list *l = jj_iter(e, at, x);
        for (size_t i = 0; i < l->n; i++)
            if (jj_equal(l->v[i], v))
                return true;
        return false;
    }
    if (IS("lower") || IS("upper")) {
        if (v.t != JT_STR)
            return false;
        for (size_t i = 0; i < v.s->n; i++)
            if (IS("lower") ? (v.s->s[i] >= 'A' && v.s->s[i] <= 'Z') : (v.s->s[i] >= 'a' && v.s->s[i] <= 'z'))
                return false;
        return true;
    }
#undef IS
    jj_rt_fail(e, at, "unknown test '%s'", name);
}
