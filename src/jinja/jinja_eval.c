/*
 * The Jinja evaluator: expressions to values, statements to output, with
 * Jinja2's scoping (a for-loop iteration, a macro call and a filter block are
 * scopes of their own, so a `set` inside them is not seen after them; `if` is
 * not a scope; namespace() attributes carry values out of loops), Python's semantics for
 * operators, and Jinja's default Undefined (renders as "", is false and
 * iterates as empty; an attribute, index or call on it is an error).
 */
#include "jinja/jinja_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

_Noreturn void jj_rt_fail(jj_eval *e, const jj_node *n, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    jj_fail(e->c, n ? n->line : 0, n ? n->col : 0, "%s", msg);
}

static jj_val lookup(jj_scope *s, const char *name)
{
    for (; s; s = s->up) {
        jj_val *v = jj_dict_getc(s->vars, name);
        if (v)
            return *v;
    }
    return (jj_val){.t = JT_UNDEF, .uname = name};
}

static void define(jj_eval *e, jj_scope *s, const char *name, jj_val v)
{
    jj_dict_set(e->c, s->vars, jj_cstr(e->c, name), v);
}

static jj_scope *scope_new(jj_eval *e, jj_scope *up)
{
    jj_scope *s = jj_alloc(e->c, sizeof *s);
    s->up = up;
    s->vars = jj_dict_new(e->c).d;
    return s;
}

_Noreturn static void undefined_fail(jj_eval *e, const jj_node *at, jj_val v)
{
    if (v.uname)
        jj_rt_fail(e, at, "'%s' is undefined", v.uname);
    jj_rt_fail(e, at, "an undefined value has no attributes or items");
}

/* Python's index normalisation: negative counts from the end; -1 when out of range. */
static int64_t norm_index(int64_t i, size_t n)
{
    if (i < 0)
        i += (int64_t)n;
    return i < 0 || i >= (int64_t)n ? -1 : i;
}

/* obj.name: a method first, then a key (Jinja2's getattr order) */
static jj_val get_attr(jj_eval *e, const jj_node *at, jj_val v, const char *name)
{
    if (v.t == JT_UNDEF)
        undefined_fail(e, at, v);
    if (v.t == JT_DICT && v.d->ns) {
        jj_val *x = jj_dict_getc(v.d, name);
        return x ? *x : (jj_val){.t = JT_UNDEF, .uname = name};
    }
    jj_val m = jj_method(e, v, name);
    if (m.t != JT_UNDEF)
        return m;
    if ((v.t == JT_LIST && (!strcmp(name, "append") || !strcmp(name, "pop") || !strcmp(name, "extend") ||
                            !strcmp(name, "insert") || !strcmp(name, "remove") || !strcmp(name, "clear"))) ||
        (v.t == JT_DICT && (!strcmp(name, "update") || !strcmp(name, "pop") || !strcmp(name, "setdefault"))))
        jj_rt_fail(e, at, "access to attribute '%s' of '%s' object is unsafe (the sandbox is immutable)",
                   name, jj_type_name(v));
    if (v.t == JT_DICT) {
        jj_val *x = jj_dict_getc(v.d, name);
        if (x)
            return *x;
    }
    return (jj_val){.t = JT_UNDEF, .uname = name};
}

/* obj[key]: a key / index first, then an attribute (Jinja2's getitem order) */
static jj_val get_item(jj_eval *e, const jj_node *at, jj_val v, jj_val k)
{
    if (v.t == JT_UNDEF)
        undefined_fail(e, at, v);
    if (v.t == JT_DICT) {
        jj_val *x = jj_dict_get(v.d, k);
        if (x)
            return *x;
    } else if ((v.t == JT_LIST || v.t == JT_STR) && (k.t == JT_INT || k.t == JT_BOOL)) {
        int64_t i = norm_index(k.t == JT_INT ? k.i : k.b, v.t == JT_LIST ? v.l->n : v.s->n);
        if (i >= 0 && v.t == JT_LIST)
            return v.l->v[i];
        if (i >= 0 && v.t == JT_STR) {
            /* a character, UTF-8 aware for ASCII-only strings' fast path; multi-byte via iteration */
            jj_list *chars = jj_iter(e, at, v);
            int64_t j = norm_index(k.t == JT_INT ? k.i : k.b, chars->n);
            return j >= 0 ? chars->v[j] : jj_undef;
        }
        return jj_undef;
    }
    if (k.t == JT_STR)
        return get_attr(e, at, v, k.s->s);
    return jj_undef;
}

static int64_t slice_bound(jj_eval *e, const jj_node *at, jj_val b, int64_t n, int64_t def, int64_t step)
{
    if (b.t == JT_UNDEF || b.t == JT_NONE)
        return def;
    if (b.t != JT_INT)
        jj_rt_fail(e, at, "slice indices must be integers or None, not %s", jj_type_name(b));
    int64_t i = b.i < 0 ? b.i + n : b.i;
    if (step > 0)
        return i < 0 ? 0 : i > n ? n : i;
    return i < -1 ? -1 : i >= n ? n - 1 : i;
}

static jj_val slice(jj_eval *e, jj_scope *s, const jj_node *n)
{
    jj_val v = jj_expr(e, s, n->a), part[3];
    for (int i = 0; i < 3; i++)
        part[i] = n->items.v[i] ? jj_expr(e, s, n->items.v[i]) : jj_none;
    if (v.t == JT_UNDEF)
        undefined_fail(e, n, v);
    if (v.t != JT_LIST && v.t != JT_STR)
        jj_rt_fail(e, n, "'%s' object is not subscriptable", jj_type_name(v));
    jj_list *src = jj_iter(e, n, v);
    int64_t len = (int64_t)src->n, step = part[2].t == JT_INT ? part[2].i : 1;
    if (step == 0)
        jj_rt_fail(e, n, "slice step cannot be zero");
    int64_t a = slice_bound(e, n, part[0], len, step > 0 ? 0 : len - 1, step);
    int64_t b = slice_bound(e, n, part[1], len, step > 0 ? len : -1, step);
    jj_val out = jj_list_new(e->c, 0);
    for (int64_t i = a; step > 0 ? i < b : i > b; i += step)
        jj_list_push(e->c, out.l, src->v[i]);
    if (v.t == JT_LIST)
        return out;
    jj_buf buf = {.c = e->c};
    jj_put(&buf, "", 0);
    for (size_t i = 0; i < out.l->n; i++)
        jj_put(&buf, out.l->v[i].s->s, out.l->v[i].s->n);
    return jj_str_n(e->c, buf.s, buf.n);
}

/* The values of `*xs` (any iterable) after the positionals, as Jinja2 unpacks them. */
static jj_list *star_args(jj_eval *e, jj_scope *s, const jj_node *n)
{
    if (!n->b)
        return NULL;
    jj_val v = jj_expr(e, s, n->b);
    if (v.t != JT_LIST && v.t != JT_STR && v.t != JT_DICT && v.t != JT_UNDEF)
        jj_rt_fail(e, n->b, "value after '*' must be an iterable, not %s", jj_type_name(v));
    return jj_iter(e, n->b, v);
}

/* The mapping of `**kw`: string keys only, none repeating an explicit keyword. */
static jj_dict *star_kwargs(jj_eval *e, jj_scope *s, const jj_node *n)
{
    if (!n->c)
        return NULL;
    jj_val v = jj_expr(e, s, n->c);
    if (v.t != JT_DICT)
        jj_rt_fail(e, n->c, "value after '**' must be a mapping, not %s", jj_type_name(v));
    for (size_t i = 0; i < v.d->n; i++) {
        if (v.d->k[i].t != JT_STR)
            jj_rt_fail(e, n->c, "keywords must be strings, not %s", jj_type_name(v.d->k[i]));
        for (int k = 0; k < n->n_kw; k++)
            if (!strcmp(n->kw[k], v.d->k[i].s->s))
                jj_rt_fail(e, n->c, "got multiple values for keyword argument '%s'", n->kw[k]);
    }
    return v.d;
}

/* Arguments in Python's order of evaluation: positionals, `*xs`, keywords, `**kw`. */
static void eval_args(jj_eval *e, jj_scope *s, const jj_node *n, jj_args *a)
{
    jj_val *pos = jj_alloc(e->c, (size_t)(n->items.n + 1) * sizeof *pos);
    for (int i = 0; i < n->items.n; i++)
        pos[i] = jj_expr(e, s, n->items.v[i]);
    jj_list *xs = star_args(e, s, n);
    jj_val *kwv = jj_alloc(e->c, (size_t)(n->n_kw + 1) * sizeof *kwv);
    for (int i = 0; i < n->n_kw; i++)
        kwv[i] = jj_expr(e, s, n->kwv.v[i]);
    jj_dict *kws = star_kwargs(e, s, n);
    int nx = xs ? (int)xs->n : 0, nk = kws ? (int)kws->n : 0;
    a->n = n->items.n + nx;
    a->n_kw = n->n_kw + nk;
    a->at = n;
    a->v = pos;
    a->kw = n->kw;
    a->kwv = kwv;
    if (nx) {
        a->v = jj_alloc(e->c, (size_t)a->n * sizeof *a->v);
        memcpy(a->v, pos, (size_t)n->items.n * sizeof *pos);
        memcpy(a->v + n->items.n, xs->v, (size_t)nx * sizeof *pos);
    }
    if (nk) {
        a->kw = jj_alloc(e->c, (size_t)a->n_kw * sizeof *a->kw);
        a->kwv = jj_alloc(e->c, (size_t)a->n_kw * sizeof *a->kwv);
        for (int i = 0; i < n->n_kw; i++) {
            a->kw[i] = n->kw[i];
            a->kwv[i] = kwv[i];
        }
        for (int i = 0; i < nk; i++) {
            a->kw[n->n_kw + i] = kws->k[i].s->s;
            a->kwv[n->n_kw + i] = kws->v[i];
        }
    }
}

static bool is_num(jj_val v)
{
    return v.t == JT_INT || v.t == JT_FLOAT || v.t == JT_BOOL;
}
static double num(jj_val v)
{
    return v.t == JT_FLOAT ? v.f : v.t == JT_INT ? (double)v.i : v.b;
}
static int64_t inum(jj_val v)
{
    return v.t == JT_INT ? v.i : v.b;
}

static jj_val concat(jj_eval *e, jj_val a, jj_val b)
{
    jj_buf buf = {.c = e->c};
    jj_put(&buf, "", 0);
    jj_print(&buf, a);
    jj_print(&buf, b);
    return jj_str_n(e->c, buf.s, buf.n);
}

static jj_val repeat(jj_eval *e, jj_val seq, int64_t k)
{
    if (seq.t == JT_STR) {
        jj_buf buf = {.c = e->c};
        jj_put(&buf, "", 0);
        for (int64_t i = 0; i < k; i++)
            jj_put(&buf, seq.s->s, seq.s->n);
        return jj_str_n(e->c, buf.s, buf.n);
    }
    jj_val out = jj_list_new(e->c, 0);
    for (int64_t i = 0; i < k; i++)
        for (size_t j = 0; j < seq.l->n; j++)
            jj_list_push(e->c, out.l, seq.l->v[j]);
    return out;
}

/* Integers are 64-bit (Python's are unbounded): an overflow is an error, never a wrap. */
_Noreturn static void overflow(jj_eval *e, const jj_node *n, const char *op)
{
    jj_rt_fail(e, n, "integer overflow in '%s' (integers are 64-bit)", op);
}

static int64_t ipow(jj_eval *e, const jj_node *n, int64_t x, int64_t y)
{
    if (x == 0 || x == 1 || y == 0)
        return y == 0 ? 1 : x;
    if (x == -1)
        return y % 2 ? -1 : 1;
    int64_t r = 1;
    for (; y > 0; y--) /* |x| >= 2: overflows within 64 steps */
        if (__builtin_mul_overflow(r, x, &r))
            overflow(e, n, "**");
    return r;
}

static jj_val arith(jj_eval *e, const jj_node *n, const char *op, jj_val a, jj_val b)
{
    if (op[0] == '~') /* str() of an undefined value is "" */
        return concat(e, a, b);
    if (op[0] == '%' && a.t == JT_STR)
        jj_rt_fail(e, n,
                   "'%%'-formatting of strings is not supported (nor by @huggingface/jinja, the "
                   "reference engine); join with '~' or '+' instead");
    if (a.t == JT_UNDEF || b.t == JT_UNDEF)
        undefined_fail(e, n, a.t == JT_UNDEF ? a : b);
    if (op[0] == '+' && a.t == JT_STR && b.t == JT_STR)
        return concat(e, a, b);
    if (op[0] == '+' && a.t == JT_LIST && b.t == JT_LIST) {
        jj_val out = jj_list_new(e->c, a.l->n + b.l->n);
        for (size_t i = 0; i < a.l->n; i++)
            jj_list_push(e->c, out.l, a.l->v[i]);
        for (size_t i = 0; i < b.l->n; i++)
            jj_list_push(e->c, out.l, b.l->v[i]);
        return out;
    }
    if (op[0] == '*' && !op[1] && (a.t == JT_STR || a.t == JT_LIST) && (b.t == JT_INT || b.t == JT_BOOL))
        return repeat(e, a, inum(b));
    if (op[0] == '*' && !op[1] && (b.t == JT_STR || b.t == JT_LIST) && (a.t == JT_INT || a.t == JT_BOOL))
        return repeat(e, b, inum(a));
    if (!is_num(a) || !is_num(b))
        jj_rt_fail(e, n, "unsupported operand type(s) for %s: '%s' and '%s'", op, jj_type_name(a),
                   jj_type_name(b));
    bool ints = a.t != JT_FLOAT && b.t != JT_FLOAT;
    int64_t x = inum(a), y = inum(b), r = 0;
    double fx = num(a), fy = num(b);
    switch (op[0]) {
    case '+':
        if (ints && __builtin_add_overflow(x, y, &r))
            overflow(e, n, op);
        return ints ? jj_int(r) : jj_float(fx + fy);
    case '-':
        if (ints && __builtin_sub_overflow(x, y, &r))
            overflow(e, n, op);
        return ints ? jj_int(r) : jj_float(fx - fy);
    case '*':
        if (op[1]) /* ** */
            return ints && y >= 0 ? jj_int(ipow(e, n, x, y)) : jj_float(pow(fx, fy));
        if (ints && __builtin_mul_overflow(x, y, &r))
            overflow(e, n, op);
        return ints ? jj_int(r) : jj_float(fx * fy);
    case '/':
        if (ints ? y == 0 : fy == 0.0)
            jj_rt_fail(e, n, "division by zero");
        if (!op[1])
            return jj_float(fx / fy);
        if (ints && x == INT64_MIN && y == -1)
            overflow(e, n, op);
        if (ints) /* Python floors */
            return jj_int(x / y - ((x % y != 0) && ((x < 0) != (y < 0))));
        return jj_float(floor(fx / fy));
    case '%':
        if (ints ? y == 0 : fy == 0.0)
            jj_rt_fail(e, n, "modulo by zero");
        if (ints) {
            if (y == -1)
                return jj_int(0);
            r = x % y;
            return jj_int(r != 0 && ((r < 0) != (y < 0)) ? r + y : r);
        }
        {
            double m = fmod(fx, fy);
            return jj_float(m != 0 && ((m < 0) != (fy < 0)) ? m + fy : m);
        }
    }
    jj_rt_fail(e, n, "unknown operator %s", op);
}

static bool contains(jj_eval *e, const jj_node *n, jj_val item, jj_val box)
{
    switch (box.t) {
    case JT_STR:
        if (item.t != JT_STR)
            jj_rt_fail(e, n, "'in <string>' requires string as left operand, not %s", jj_type_name(item));
        return item.s->n == 0 || memmem(box.s->s, box.s->n, item.s->s, item.s->n) != NULL;
    case JT_LIST:
        for (size_t i = 0; i < box.l->n; i++)
            if (jj_equal(box.l->v[i], item))
                return true;
        return false;
    case JT_DICT: return jj_dict_get(box.d, item) != NULL;
    case JT_UNDEF: return false;
    default: jj_rt_fail(e, n, "argument of type '%s' is not iterable", jj_type_name(box));
    }
}

static jj_val compare(jj_eval *e, const jj_node *n, jj_val a, jj_val b)
{
    const char *op = n->name;
    if (!strcmp(op, "=="))
        return jj_bool(jj_equal(a, b));
    if (!strcmp(op, "!="))
        return jj_bool(!jj_equal(a, b));
    if (!strcmp(op, "in"))
        return jj_bool(contains(e, n, a, b));
    if (!strcmp(op, "not in"))
        return jj_bool(!contains(e, n, a, b));
    int r = jj_compare(e, n, a, b);
    if (!strcmp(op, "<"))
        return jj_bool(r < 0);
    if (!strcmp(op, "<="))
        return jj_bool(r <= 0);
    if (!strcmp(op, ">"))
        return jj_bool(r > 0);
    return jj_bool(r >= 0);
}

jj_val jj_expr(jj_eval *e, jj_scope *s, const jj_node *n)
{
    switch (n->kind) {
    case E_CONST: return n->val;
    case E_NAME: return lookup(s, n->name);
    case E_ATTR: return get_attr(e, n, jj_expr(e, s, n->a), n->name);
    case E_INDEX: return get_item(e, n, jj_expr(e, s, n->a), jj_expr(e, s, n->b));
    case E_SLICE: return slice(e, s, n);
    case E_CALL: {
        jj_val f = jj_expr(e, s, n->a);
        jj_args a;
        eval_args(e, s, n, &a);
        if (f.t == JT_UNDEF)
            undefined_fail(e, n, f);
        if (f.t != JT_FUNC)
            jj_rt_fail(e, n, "'%s' object is not callable", jj_type_name(f));
        return jj_call(e, s, f, &a);
    }
    case E_FILTER: {
        jj_val v = jj_expr(e, s, n->a);
        jj_args a;
        eval_args(e, s, n, &a);
        return jj_filter(e, s, n, n->name, v, &a);
    }
    case E_TEST: {
        jj_val v = jj_expr(e, s, n->a);
        jj_args a;
        eval_args(e, s, n, &a);
        return jj_bool(jj_test(e, n, n->name, v, &a) != n->negate);
    }
    case E_NEG:
    case E_POS: {
        jj_val v = jj_expr(e, s, n->a);
        if (!is_num(v))
            jj_rt_fail(e, n, "bad operand type for unary %c: '%s'", n->kind == E_NEG ? '-' : '+',
                       jj_type_name(v));
        if (n->kind == E_POS)
            return v.t == JT_BOOL ? jj_int(v.b) : v;
        if (v.t != JT_FLOAT && inum(v) == INT64_MIN)
            overflow(e, n, "-");
        return v.t == JT_FLOAT ? jj_float(-v.f) : jj_int(-inum(v));
    }
    case E_NOT: return jj_bool(!jj_truthy(jj_expr(e, s, n->a)));
    case E_BIN: return arith(e, n, n->name, jj_expr(e, s, n->a), jj_expr(e, s, n->b));
    case E_AND: {
        jj_val a = jj_expr(e, s, n->a);
        return jj_truthy(a) ? jj_expr(e, s, n->b) : a;
    }
    case E_OR: {
        jj_val a = jj_expr(e, s, n->a);
        return jj_truthy(a) ? a : jj_expr(e, s, n->b);
    }
    case E_CMP: return compare(e, n, jj_expr(e, s, n->a), jj_expr(e, s, n->b));
    case E_COND:
        if (jj_truthy(jj_expr(e, s, n->b)))
            return jj_expr(e, s, n->a);
        return n->c ? jj_expr(e, s, n->c) : jj_undef;
    case E_LIST: {
        jj_val l = jj_list_new(e->c, (size_t)n->items.n);
        for (int i = 0; i < n->items.n; i++)
            jj_list_push(e->c, l.l, jj_expr(e, s, n->items.v[i]));
        return l;
    }
    case E_DICT: {
        jj_val d = jj_dict_new(e->c);
        for (int i = 0; i < n->items.n; i++)
            jj_dict_set(e->c, d.d, jj_expr(e, s, n->items.v[i]), jj_expr(e, s, n->kwv.v[i]));
        return d;
    }
    default: jj_rt_fail(e, n, "not an expression");
    }
}

/* ---- calls ------------------------------------------------------------------ */

static void enter(jj_eval *e, const jj_node *at)
{
    if (++e->depth > e->max_depth)
        jj_rt_fail(e, at, "nesting deeper than %d (max_depth): runaway recursion?", e->max_depth);
}

/* Render body in scope s into a new string (macro bodies, block sets). */
static jj_val capture(jj_eval *e, jj_scope *s, const jj_nodes *body)
{
    jj_buf buf = {.c = e->c}, *saved = e->out;
    jj_put(&buf, "", 0);
    e->out = &buf;
    jj_exec(e, s, body);
    e->out = saved;
    return jj_str_n(e->c, buf.s, buf.n);
}

/*
 * Bind a macro's (or caller's) parameters from the arguments, as Jinja2: positionals first, then
 * keywords for the parameters left, then defaults; extra positionals go to `varargs` and other
 * keywords to `kwargs` when the body reads them, else they are an error. `caller` travels as a
 * keyword.
 */
static void bind_params(jj_eval *e, jj_scope *ms, const jj_node *def, const char *name, const jj_args *a)
{
    if (a->n > def->n_kw && !def->varargs)
        jj_rt_fail(e, a->at, "macro '%s' takes not more than %d argument(s)", name, def->n_kw);
    for (int i = 0; i < def->n_kw; i++) {
        bool set = i < a->n;
        jj_val v = set ? a->v[i] : jj_undef;
        for (int k = 0; k < a->n_kw && !set; k++)
            if (!strcmp(a->kw[k], def->kw[i])) {
                v = a->kwv[k];
                set = true;
            }
        if (!set && def->items.v[i])
            v = jj_expr(e, ms, def->items.v[i]);
        else if (!set)
            v = (jj_val){.t = JT_UNDEF, .uname = def->kw[i]};
        define(e, ms, def->kw[i], v);
    }
    jj_val kwargs = jj_dict_new(e->c);
    for (int k = 0; k < a->n_kw; k++) {
        bool known = !strcmp(a->kw[k], "caller");
        for (int i = a->n; i < def->n_kw; i++) /* a parameter given positionally is not free */
            known |= !strcmp(a->kw[k], def->kw[i]);
        if (!strcmp(a->kw[k], "caller"))
            define(e, ms, "caller", a->kwv[k]);
        else if (!known && def->kwargs)
            jj_dict_set(e->c, kwargs.d, jj_cstr(e->c, a->kw[k]), a->kwv[k]);
        else if (!known)
            jj_rt_fail(e, a->at, "macro '%s' takes no keyword argument '%s'", name, a->kw[k]);
    }
    if (def->kwargs)
        define(e, ms, "kwargs", kwargs);
    if (def->varargs) {
        jj_val rest = jj_list_new(e->c, 0);
        for (int i = def->n_kw; i < a->n; i++)
            jj_list_push(e->c, rest.l, a->v[i]);
        define(e, ms, "varargs", rest);
    }
}

jj_val jj_call(jj_eval *e, jj_scope *s, jj_val f, const jj_args *a)
{
    (void)s;
    jj_func *fn = f.fn;
    if (fn->fn)
        return fn->fn(e, fn->self, a);
    enter(e, a->at);
    const jj_node *def = fn->macro ? fn->macro : fn->caller_def;
    jj_scope *ms = scope_new(e, fn->closure);
    bind_params(e, ms, def, fn->name, a);
    jj_val out = capture(e, ms, fn->macro ? &def->body : &fn->caller_body->body);
    e->depth--;
    return out;
}

/* ---- statements -------------------------------------------------------------- */

static void assign(jj_eval *e, jj_scope *s, const jj_node *n, jj_val v)
{
    if (n->n_kw == 1) {
        define(e, s, n->kw[0], v);
        return;
    }
    jj_list *l = jj_iter(e, n, v);
    if ((int)l->n != n->n_kw)
        jj_rt_fail(e, n, "cannot unpack %zu values into %d names", l->n, n->n_kw);
    for (int i = 0; i < n->n_kw; i++)
        define(e, s, n->kw[i], l->v[i]);
}

static jj_val loop_cycle(jj_eval *e, jj_val self, const jj_args *a)
{
    (void)e;
    if (a->n == 0)
        return jj_undef;
    int64_t i = self.d->n ? jj_dict_getc(self.d, "index0")->i : 0;
    return a->v[i % a->n];
}

enum { LOOP_NKEYS = 12 };
static const char *const LOOP_KEYS[LOOP_NKEYS] = {"index0", "index",    "revindex0", "revindex",
                                                  "first",  "last",     "length",    "depth",
                                                  "depth0", "previtem", "nextitem",  "cycle"};

/*
 * The `loop` variable of iteration i. Built directly (a dict whose key array is shared by all
 * the iterations of one loop, made once): a loop body runs per message and per tool, and this
 * is most of an iteration's cost.
 */
static jj_val loop_var(jj_eval *e, jj_val *keys, jj_list *items, size_t i)
{
    jj_ctx *c = e->c;
    jj_val d = jj_dict_new(c);
    jj_val *v = jj_alloc(c, LOOP_NKEYS * sizeof *v);
    int64_t n = (int64_t)items->n, k = (int64_t)i;
    jj_func *fn = jj_alloc(c, sizeof *fn);
    fn->name = "cycle";
    fn->fn = loop_cycle;
    fn->self = d;
    const jj_val vals[LOOP_NKEYS] = {jj_int(k),
                                     jj_int(k + 1),
                                     jj_int(n - k - 1),
                                     jj_int(n - k),
                                     jj_bool(k == 0),
                                     jj_bool(k + 1 == n),
                                     jj_int(n),
                                     jj_int(1),
                                     jj_int(0),
                                     k > 0 ? items->v[k - 1] : jj_undef,
                                     k + 1 < n ? items->v[k + 1] : jj_undef,
                                     (jj_val){.t = JT_FUNC, .fn = fn}};
    memcpy(v, vals, sizeof vals);
    d.d->k = keys; /* never written: a new key would grow the dict into new arrays first */
    d.d->v = v;
    d.d->n = d.d->cap = LOOP_NKEYS;
    return d;
}

static void exec_for(jj_eval *e, jj_scope *s, const jj_node *n)
{
    jj_list *all = jj_iter(e, n->a, jj_expr(e, s, n->a)), *items = all;
    if (n->b) { /* `for x in xs if cond`: loop.* counts the kept items */
        items = jj_list_new(e->c, all->n).l;
        for (size_t i = 0; i < all->n; i++) {
            jj_scope *fs = scope_new(e, s);
            assign(e, fs, n, all->v[i]);
            if (jj_truthy(jj_expr(e, fs, n->b)))
                jj_list_push(e->c, items, all->v[i]);
        }
    }
    jj_val *keys = jj_alloc(e->c, LOOP_NKEYS * sizeof *keys);
    for (int k = 0; k < LOOP_NKEYS; k++)
        keys[k] = jj_cstr(e->c, LOOP_KEYS[k]);
    for (size_t i = 0; i < items->n; i++) {
        jj_scope *is = scope_new(e, s);
        define(e, is, "loop", loop_var(e, keys, items, i));
        assign(e, is, n, items->v[i]);
        jj_exec(e, is, &n->body);
        int ctl = e->loop_ctl;
        e->loop_ctl = 0;
        if (ctl == 1)
            break;
    }
    if (items->n == 0)
        jj_exec(e, s, &n->orelse);
}

static void exec_set(jj_eval *e, jj_scope *s, const jj_node *n)
{
    jj_val v = jj_expr(e, s, n->b);
    if (!n->a) {
        assign(e, s, n, v);
        return;
    }
    jj_val target = jj_expr(e, s, n->a->a);
    if (target.t != JT_DICT || !target.d->ns)
        jj_rt_fail(e, n, "cannot assign attribute on non-namespace object '%s'", n->a->a->name);
    jj_dict_set(e->c, target.d, jj_cstr(e->c, n->a->name), v);
}

static void exec_call_block(jj_eval *e, jj_scope *s, const jj_node *n)
{
    const jj_node *call = n->a;
    jj_val f = jj_expr(e, s, call->a);
    if (f.t != JT_FUNC)
        jj_rt_fail(e, call, "'%s' object is not callable", jj_type_name(f));
    jj_args a;
    eval_args(e, s, call, &a);
    jj_func *caller = jj_alloc(e->c, sizeof *caller);
    caller->name = "caller";
    caller->caller_def = n;
    caller->caller_body = n;
    caller->closure = s;
    /* add `caller` as one more keyword argument */
    const char **kw = jj_alloc(e->c, (size_t)(a.n_kw + 1) * sizeof *kw);
    jj_val *kwv = jj_alloc(e->c, (size_t)(a.n_kw + 1) * sizeof *kwv);
    if (a.n_kw) {
        memcpy(kw, a.kw, (size_t)a.n_kw * sizeof *kw);
        memcpy(kwv, a.kwv, (size_t)a.n_kw * sizeof *kwv);
    }
    kw[a.n_kw] = "caller";
    kwv[a.n_kw] = (jj_val){.t = JT_FUNC, .fn = caller};
    a.kw = kw;
    a.kwv = kwv;
    a.n_kw++;
    jj_print(e->out, jj_call(e, s, f, &a));
}

/* The body rendered in a scope of its own, through the filters; a break / continue inside it
   drops the block's text, as in Jinja2 (the filtered text would be written after the body). */
static void exec_filter_block(jj_eval *e, jj_scope *s, const jj_node *n)
{
    jj_val v = capture(e, scope_new(e, s), &n->body);
    if (e->loop_ctl)
        return;
    for (int i = 0; i < n->items.n; i++) {
        const jj_node *f = n->items.v[i];
        jj_args a;
        eval_args(e, s, f, &a);
        v = jj_filter(e, s, f, f->name, v, &a);
    }
    if (v.t != JT_STR) /* Jinja2 joins the block's output as strings and fails on others */
        jj_rt_fail(e, n, "a filter block must give a string; its filters gave %s", jj_type_name(v));
    jj_put(e->out, v.s->s, v.s->n);
}

void jj_exec(jj_eval *e, jj_scope *s, const jj_nodes *body)
{
    for (int i = 0; i < body->n && !e->loop_ctl; i++) {
        const jj_node *n = body->v[i];
        switch (n->kind) {
        case N_TEXT: jj_put(e->out, n->val.s->s, n->val.s->n); break;
        case N_OUTPUT: jj_print(e->out, jj_expr(e, s, n->a)); break;
        case N_IF:
            enter(e, n);
            jj_exec(e, s, jj_truthy(jj_expr(e, s, n->a)) ? &n->body : &n->orelse);
            e->depth--;
            break;
        case N_FOR:
            enter(e, n);
            exec_for(e, s, n);
            e->depth--;
            break;
        case N_SET: exec_set(e, s, n); break;
        case N_SETBLOCK: define(e, s, n->kw[0], capture(e, scope_new(e, s), &n->body)); break;
        case N_MACRO: {
            jj_func *fn = jj_alloc(e->c, sizeof *fn);
            fn->name = n->name;
            fn->macro = n;
            fn->closure = s;
            define(e, s, n->name, (jj_val){.t = JT_FUNC, .fn = fn});
            break;
        }
        case N_CALLBLOCK: exec_call_block(e, s, n); break;
        case N_FILTERBLOCK:
            enter(e, n);
            exec_filter_block(e, s, n);
            e->depth--;
            break;
        case N_BREAK: e->loop_ctl = 1; break;
        case N_CONTINUE: e->loop_ctl = 2; break;
        case N_BLOCK: jj_exec(e, s, &n->body); break;
        default: jj_rt_fail(e, n, "not a statement");
        }
    }
}
