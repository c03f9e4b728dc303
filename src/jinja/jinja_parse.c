/*
 * The Jinja parser: tokens into an AST, with Jinja2's operator precedence
 * (lowest first): `a if c else b`, or, and, not, comparisons (== != < <= > >=
 * in, not in), + -, ~, * / // %, **, unary - +, then postfix (.attr, [index],
 * [a:b:c], (call)), filters (| f(args)) and tests (is [not] t(args)).
 * Calls take `*args` / `**kwargs` unpacking. Statements: if / elif / else, for
 * (with `if` filter and `else`), set (to a name, several names, `ns.attr`, or a
 * block), macro, call, filter, break, continue, generation (transformers'
 * marker, rendered as its body). Jinja2 statements the reference engine lacks
 * too (with, include, import, extends, block, recursive loops) are refused by
 * name; `raw` is refused by the lexer.
 */
#include "jinja/jinja_internal.h"

#include <stdio.h>
#include <string.h>

typedef struct parser {
    jj_ctx *c;
    const jj_tok *t;
    int n, pos;
} parser;

static const jj_tok *peek(parser *P)
{
    return &P->t[P->pos];
}
static const jj_tok *next(parser *P)
{
    return &P->t[P->pos < P->n - 1 ? P->pos++ : P->pos];
}

static const char *describe(const jj_tok *t)
{
    switch (t->k) {
    case TK_EOF: return "end of template";
    case TK_TEXT: return "text";
    case TK_VAR_BEGIN: return "'{{'";
    case TK_VAR_END: return "'}}'";
    case TK_BLOCK_BEGIN: return "'{%'";
    case TK_BLOCK_END: return "'%}'";
    case TK_STRING: return "a string";
    case TK_INT:
    case TK_FLOAT: return "a number";
    default: return t->s;
    }
}

_Noreturn static void fail_at(parser *P, const jj_tok *t, const char *what)
{
    jj_fail(P->c, t->line, t->col, "expected %s, got %s", what, describe(t));
}

static bool is_op(const jj_tok *t, const char *op)
{
    return t->k == TK_OP && strcmp(t->s, op) == 0;
}
static bool is_name(const jj_tok *t, const char *nm)
{
    return t->k == TK_NAME && strcmp(t->s, nm) == 0;
}

static bool accept_op(parser *P, const char *op)
{
    if (!is_op(peek(P), op))
        return false;
    next(P);
    return true;
}

static bool accept_name(parser *P, const char *nm)
{
    if (!is_name(peek(P), nm))
        return false;
    next(P);
    return true;
}

static void expect_op(parser *P, const char *op)
{
    if (!accept_op(P, op)) {
        char what[16];
        snprintf(what, sizeof what, "'%s'", op);
        fail_at(P, peek(P), what);
    }
}

static const char *expect_name(parser *P)
{
    if (peek(P)->k != TK_NAME)
        fail_at(P, peek(P), "a name");
    return next(P)->s;
}

static jj_node *node(parser *P, jj_kind k, const jj_tok *at)
{
    jj_node *n = jj_alloc(P->c, sizeof *n);
    n->kind = k;
    n->line = at->line;
    n->col = at->col;
    return n;
}

static void add(parser *P, jj_nodes *v, jj_node *n)
{
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 4;
        jj_node **nv = jj_alloc(P->c, (size_t)cap * sizeof *nv);
        if (v->n)
            memcpy(nv, v->v, (size_t)v->n * sizeof *nv);
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = n;
}

static void add_kw(parser *P, jj_node *n, const char *name)
{
    const char **kw = jj_alloc(P->c, (size_t)(n->n_kw + 1) * sizeof *kw);
    if (n->n_kw)
        memcpy(kw, n->kw, (size_t)n->n_kw * sizeof *kw);
    kw[n->n_kw++] = name;
    n->kw = kw;
}

/* ---- expressions ----------------------------------------------------------- */

static jj_node *parse_expr(parser *P);
static jj_node *parse_or(parser *P);
static jj_node *parse_unary(parser *P, bool with_filter);

/*
 * `(a, b=c, *xs, **kw)` after the '(' was consumed: positional args in items, keywords in kw /
 * kwv, the `*` unpacking in n->b and the `**` one in n->c. Jinja2's order: positionals, then
 * keywords and at most one `*`, then at most one `**` last.
 */
static void parse_args(parser *P, jj_node *n)
{
    while (!accept_op(P, ")")) {
        if (n->items.n + n->n_kw > 0 || n->b || n->c)
            expect_op(P, ",");
        if (accept_op(P, ")"))
            break;
        const jj_tok *t = peek(P);
        if (n->c)
            jj_fail(P->c, t->line, t->col, "nothing may follow the '**' argument unpacking");
        if (accept_op(P, "**")) {
            n->c = parse_expr(P);
        } else if (accept_op(P, "*")) {
            if (n->b)
                jj_fail(P->c, t->line, t->col, "only one '*' argument unpacking per call");
            n->b = parse_expr(P);
        } else if (t->k == TK_NAME && is_op(&P->t[P->pos + 1], "=")) {
            add_kw(P, n, next(P)->s);
            next(P);
            add(P, &n->kwv, parse_expr(P));
        } else {
            if (n->n_kw || n->b)
                jj_fail(P->c, t->line, t->col, "positional argument after a %s",
                        n->b ? "'*' argument unpacking" : "keyword argument");
            add(P, &n->items, parse_expr(P));
        }
    }
}

static jj_node *parse_primary(parser *P)
{
    const jj_tok *t = next(P);
    jj_node *n;
    switch (t->k) {
    case TK_STRING: {
        n = node(P, E_CONST, t);
        jj_buf b = {.c = P->c};
        jj_put(&b, t->s, t->n);
        while (peek(P)->k == TK_STRING) { /* adjacent literals concatenate */
            const jj_tok *u = next(P);
            jj_put(&b, u->s, u->n);
        }
        n->val = jj_str_n(P->c, b.s, b.n);
        return n;
    }
    case TK_INT:
        n = node(P, E_CONST, t);
        n->val = jj_int(t->i);
        return n;
    case TK_FLOAT:
        n = node(P, E_CONST, t);
        n->val = jj_float(t->f);
        return n;
    case TK_NAME:
        n = node(P, E_CONST, t);
        if (!strcmp(t->s, "true") || !strcmp(t->s, "True"))
            n->val = jj_bool(true);
        else if (!strcmp(t->s, "false") || !strcmp(t->s, "False"))
            n->val = jj_bool(false);
        else if (!strcmp(t->s, "none") || !strcmp(t->s, "None"))
            n->val = jj_none;
        else {
            n->kind = E_NAME;
            n->name = t->s;
        }
        return n;
    case TK_OP:
        if (is_op(t, "(")) {
            if (accept_op(P, ")"))
                return node(P, E_LIST, t); /* () is an empty tuple */
            jj_node *e = parse_expr(P);
            if (!is_op(peek(P), ","))
                return expect_op(P, ")"), e;
            n = node(P, E_LIST, t); /* a tuple: evaluated as a list */
            add(P, &n->items, e);
            while (accept_op(P, ",") && !is_op(peek(P), ")"))
                add(P, &n->items, parse_expr(P));
            expect_op(P, ")");
            return n;
        }
        if (is_op(t, "[")) {
            n = node(P, E_LIST, t);
            while (!accept_op(P, "]")) {
                if (n->items.n)
                    expect_op(P, ",");
                if (accept_op(P, "]"))
                    break;
                add(P, &n->items, parse_expr(P));
            }
            return n;
        }
        if (is_op(t, "{")) {
            n = node(P, E_DICT, t);
            while (!accept_op(P, "}")) {
                if (n->items.n)
                    expect_op(P, ",");
                if (accept_op(P, "}"))
                    break;
                add(P, &n->items, parse_expr(P));
                expect_op(P, ":");
                add(P, &n->kwv, parse_expr(P));
            }
            return n;
        }
        break;
    default: break;
    }
    P->pos--;
    fail_at(P, t, "an expression");
}

static jj_node *parse_postfix(parser *P, jj_node *n)
{
    for (;;) {
        const jj_tok *t = peek(P);
        if (is_op(t, ".")) {
            next(P);
            jj_node *a = node(P, E_ATTR, t);
            a->a = n;
            if (peek(P)->k == TK_INT) { /* x.0 is x[0] */
                a->kind = E_INDEX;
                a->b = node(P, E_CONST, peek(P));
                a->b->val = jj_int(next(P)->i);
            } else {
                a->name = expect_name(P);
            }
            n = a;
        } else if (is_op(t, "[")) {
            next(P);
            jj_node *parts[3] = {NULL, NULL, NULL};
            int k = 0;
            bool slice = false;
            while (!is_op(peek(P), "]")) {
                if (accept_op(P, ":")) {
                    slice = true;
                    if (++k > 2)
                        fail_at(P, peek(P), "']'");
                    continue;
                }
                parts[k] = parse_expr(P);
                if (!is_op(peek(P), ":") && !is_op(peek(P), "]"))
                    fail_at(P, peek(P), "':' or ']'");
            }
            next(P);
            jj_node *a = node(P, slice ? E_SLICE : E_INDEX, t);
            a->a = n;
            if (slice)
                for (int i = 0; i < 3; i++)
                    add(P, &a->items, parts[i]);
            else if (!(a->b = parts[0]))
                fail_at(P, t, "an index");
            n = a;
        } else if (is_op(t, "(")) {
            next(P);
            jj_node *a = node(P, E_CALL, t);
            a->a = n;
            parse_args(P, a);
            n = a;
        } else {
            return n;
        }
    }
}

/* `| name(args)` and `is [not] name(args)` chains after an operand */
static jj_node *parse_filters(parser *P, jj_node *n)
{
    for (;;) {
        const jj_tok *t = peek(P);
        if (accept_op(P, "|")) {
            jj_node *f = node(P, E_FILTER, t);
            f->a = n;
            f->name = expect_name(P);
            if (accept_op(P, "("))
                parse_args(P, f);
            n = f;
        } else if (accept_name(P, "is")) {
            jj_node *f = node(P, E_TEST, t);
            f->a = n;
            f->negate = accept_name(P, "not");
            f->name = expect_name(P);
            if (accept_op(P, "(")) {
                parse_args(P, f);
            } else { /* `is divisibleby 3`, `is sameas none`: one argument without parentheses */
                const jj_tok *u = peek(P);
                if (u->k == TK_STRING || u->k == TK_INT || u->k == TK_FLOAT ||
                    (u->k == TK_NAME && !is_name(u, "and") && !is_name(u, "or") && !is_name(u, "else") &&
                     !is_name(u, "if") && !is_name(u, "in") && !is_name(u, "is") && !is_name(u, "not")))
                    add(P, &f->items, parse_unary(P, false));
            }
            n = f;
        } else {
            return n;
        }
    }
}

static jj_node *parse_unary(parser *P, bool with_filter)
{
    const jj_tok *t = peek(P);
    jj_node *n;
    if (accept_op(P, "-") || accept_op(P, "+")) {
        n = node(P, is_op(t, "-") ? E_NEG : E_POS, t);
        n->a = parse_unary(P, false);
    } else {
        n = parse_postfix(P, parse_primary(P));
    }
    return with_filter ? parse_filters(P, n) : n;
}

static jj_node *binary(parser *P, const jj_tok *t, const char *op, jj_node *l, jj_node *r)
{
    jj_node *n = node(P, E_BIN, t);
    n->name = op;
    n->a = l;
    n->b = r;
    return n;
}

static jj_node *parse_pow(parser *P)
{
    jj_node *l = parse_unary(P, true);
    while (is_op(peek(P), "**")) {
        const jj_tok *t = next(P);
        l = binary(P, t, "**", l, parse_unary(P, true));
    }
    return l;
}

static jj_node *parse_mul(parser *P)
{
    jj_node *l = parse_pow(P);
    for (;;) {
        const jj_tok *t = peek(P);
        if (!(is_op(t, "*") || is_op(t, "/") || is_op(t, "//") || is_op(t, "%")))
            return l;
        next(P);
        l = binary(P, t, t->s, l, parse_pow(P));
    }
}

static jj_node *parse_concat(parser *P)
{
    jj_node *l = parse_mul(P);
    while (is_op(peek(P), "~")) {
        const jj_tok *t = next(P);
        l = binary(P, t, "~", l, parse_mul(P));
    }
    return l;
}

static jj_node *parse_add(parser *P)
{
    jj_node *l = parse_concat(P);
    for (;;) {
        const jj_tok *t = peek(P);
        if (!(is_op(t, "+") || is_op(t, "-")))
            return l;
        next(P);
        l = binary(P, t, t->s, l, parse_concat(P));
    }
}

static jj_node *parse_compare(parser *P)
{
    jj_node *l = parse_add(P);
    for (;;) {
        const jj_tok *t = peek(P);
        const char *op = NULL;
        static const char *ops[] = {"==", "!=", "<", "<=", ">", ">=", NULL};
        for (int i = 0; ops[i]; i++)
            if (is_op(t, ops[i]))
                op = ops[i];
        if (op) {
            next(P);
        } else if (is_name(t, "in")) {
            next(P);
            op = "in";
        } else if (is_name(t, "not") && is_name(&P->t[P->pos + 1], "in")) {
            P->pos += 2;
            op = "not in";
        } else {
            return l;
        }
        jj_node *n = node(P, E_CMP, t);
        n->name = op;
        n->a = l;
        n->b = parse_add(P);
        l = n;
    }
}

static jj_node *parse_not(parser *P)
{
    const jj_tok *t = peek(P);
    if (accept_name(P, "not")) {
        jj_node *n = node(P, E_NOT, t);
        n->a = parse_not(P);
        return n;
    }
    return parse_compare(P);
}

static jj_node *parse_and(parser *P)
{
    jj_node *l = parse_not(P);
    while (is_name(peek(P), "and")) {
        jj_node *n = node(P, E_AND, next(P));
        n->a = l;
        n->b = parse_not(P);
        l = n;
    }
    return l;
}

static jj_node *parse_or(parser *P)
{
    jj_node *l = parse_and(P);
    while (is_name(peek(P), "or")) {
        jj_node *n = node(P, E_OR, next(P));
        n->a = l;
        n->b = parse_and(P);
        l = n;
    }
    return l;
}

/* `a if cond else b`; without `else` the value is undefined when cond is false */
static jj_node *parse_expr(parser *P)
{
    jj_node *l = parse_or(P);
    while (is_name(peek(P), "if")) {
        jj_node *n = node(P, E_COND, next(P));
        n->a = l;
        n->b = parse_or(P);
        if (accept_name(P, "else"))
            n->c = parse_expr(P);
        l = n;
    }
    return l;
}

/* ---- statements ------------------------------------------------------------ */

static void parse_body(parser *P, jj_nodes *body, const char *const *stops, const jj_tok *opener,
                       const char *opener_name);

static void end_block(parser *P)
{
    if (peek(P)->k != TK_BLOCK_END)
        fail_at(P, peek(P), "'%}'");
    next(P);
}

/* Names separated by commas (for / set targets) into n->kw. */
static void parse_targets(parser *P, jj_node *n)
{
    do
        add_kw(P, n, expect_name(P));
    while (accept_op(P, ","));
}

static jj_node *parse_if(parser *P, const jj_tok *t)
{
    jj_node *n = node(P, N_IF, t);
    n->a = parse_expr(P);
    end_block(P);
    static const char *const stops[] = {"elif", "else", "endif", NULL};
    parse_body(P, &n->body, stops, t, "if");
    const jj_tok *kw = next(P);
    if (is_name(kw, "elif")) {
        add(P, &n->orelse, parse_if(P, kw));
        return n;
    }
    if (is_name(kw, "else")) {
        end_block(P);
        static const char *const end[] = {"endif", NULL};
        parse_body(P, &n->orelse, end, t, "if");
        next(P);
    }
    end_block(P);
    return n;
}

static jj_node *parse_for(parser *P, const jj_tok *t)
{
    jj_node *n = node(P, N_FOR, t);
    parse_targets(P, n);
    if (!accept_name(P, "in"))
        fail_at(P, peek(P), "'in'");
    n->a = parse_or(P); /* not parse_expr: a trailing `if` filters the loop */
    if (accept_name(P, "if"))
        n->b = parse_or(P);
    if (is_name(peek(P), "recursive"))
        jj_fail(P->c, peek(P)->line, peek(P)->col,
                "recursive loops are not supported (nor by @huggingface/jinja, the reference engine); "
                "use a macro that calls itself");
    end_block(P);
    static const char *const stops[] = {"else", "endfor", NULL};
    parse_body(P, &n->body, stops, t, "for");
    if (is_name(next(P), "else")) {
        end_block(P);
        static const char *const end[] = {"endfor", NULL};
        parse_body(P, &n->orelse, end, t, "for");
        next(P);
    }
    end_block(P);
    return n;
}

static jj_node *parse_set(parser *P, const jj_tok *t)
{
    jj_node *n = node(P, N_SET, t);
    const char *first = expect_name(P);
    if (accept_op(P, ".")) { /* set ns.attr = value */
        jj_node *target = node(P, E_ATTR, t);
        target->a = node(P, E_NAME, t);
        target->a->name = first;
        target->name = expect_name(P);
        n->a = target;
    } else {
        add_kw(P, n, first);
        while (accept_op(P, ","))
            add_kw(P, n, expect_name(P));
    }
    if (peek(P)->k == TK_BLOCK_END && !n->a && n->n_kw == 1) { /* {% set x %}...{% endset %} */
        n->kind = N_SETBLOCK;
        end_block(P);
        static const char *const end[] = {"endset", NULL};
        parse_body(P, &n->body, end, t, "set");
        next(P);
        end_block(P);
        return n;
    }
    expect_op(P, "=");
    jj_node *v = parse_expr(P);
    if (is_op(peek(P), ",")) { /* set a, b = x, y */
        jj_node *tuple = node(P, E_LIST, t);
        add(P, &tuple->items, v);
        while (accept_op(P, ","))
            add(P, &tuple->items, parse_expr(P));
        v = tuple;
    }
    n->b = v;
    end_block(P);
    return n;
}

/* macro name(a, b=default): parameter names in kw, defaults (NULL: none) in items */
static void parse_params(parser *P, jj_node *n)
{
    if (!accept_op(P, "("))
        return;
    while (!accept_op(P, ")")) {
        if (n->n_kw)
            expect_op(P, ",");
        if (accept_op(P, ")"))
            break;
        add_kw(P, n, expect_name(P));
        add(P, &n->items, accept_op(P, "=") ? parse_expr(P) : NULL);
    }
}

static bool reads_name(const jj_node *n, const char *name);

static bool reads_any(const jj_nodes *v, const char *name)
{
    for (int i = 0; i < v->n; i++)
        if (reads_name(v->v[i], name))
            return true;
    return false;
}

/* Whether `name` is read anywhere under n (nested macros included, as Jinja2 counts them). */
static bool reads_name(const jj_node *n, const char *name)
{
    if (!n)
        return false;
    if (n->kind == E_NAME && !strcmp(n->name, name))
        return true;
    return reads_name(n->a, name) || reads_name(n->b, name) || reads_name(n->c, name) ||
           reads_any(&n->items, name) || reads_any(&n->kwv, name) || reads_any(&n->body, name) ||
           reads_any(&n->orelse, name);
}

/* Jinja2 gives a macro extra positionals / unknown keywords only when its body reads
   `varargs` / `kwargs`; otherwise they are an error. */
static void scan_varargs(jj_node *n)
{
    n->varargs = reads_any(&n->body, "varargs");
    n->kwargs = reads_any(&n->body, "kwargs");
}

static jj_node *parse_macro(parser *P, const jj_tok *t)
{
    jj_node *n = node(P, N_MACRO, t);
    n->name = expect_name(P);
    if (!is_op(peek(P), "("))
        fail_at(P, peek(P), "'('");
    parse_params(P, n);
    end_block(P);
    static const char *const end[] = {"endmacro", NULL};
    parse_body(P, &n->body, end, t, "macro");
    next(P);
    end_block(P);
    scan_varargs(n);
    return n;
}

/* {% call(params) macro(args) %}body{% endcall %}: the body is `caller(params)` inside the macro */
static jj_node *parse_call_block(parser *P, const jj_tok *t)
{
    jj_node *n = node(P, N_CALLBLOCK, t);
    parse_params(P, n);
    n->a = parse_expr(P);
    if (n->a->kind != E_CALL)
        jj_fail(P->c, t->line, t->col, "a call block needs a macro call");
    end_block(P);
    static const char *const end[] = {"endcall", NULL};
    parse_body(P, &n->body, end, t, "call");
    next(P);
    end_block(P);
    scan_varargs(n);
    return n;
}

/* {% filter f(args) | g %}body{% endfilter %}: the rendered body through the filters, in order */
static jj_node *parse_filter_block(parser *P, const jj_tok *t)
{
    jj_node *n = node(P, N_FILTERBLOCK, t);
    do {
        jj_node *f = node(P, E_FILTER, peek(P));
        f->name = expect_name(P);
        if (accept_op(P, "("))
            parse_args(P, f);
        add(P, &n->items, f);
    } while (accept_op(P, "|"));
    end_block(P);
    static const char *const end[] = {"endfilter", NULL};
    parse_body(P, &n->body, end, t, "filter");
    next(P);
    end_block(P);
    return n;
}

/*
 * Statements of Jinja2 that the reference engine (@huggingface/jinja) does not have either:
 * refused by name with the reason, never read as something else.
 */
static const struct {
    const char *name, *why;
} REFUSED[] = {
    {"with", "'with' blocks are not supported (nor by @huggingface/jinja, the reference engine); "
             "use 'set' inside a macro or loop"},
    {"include", "'include' is not supported: a chat template is one string, with no other templates to load"},
    {"import", "'import' is not supported: a chat template is one string, with no other templates to load"},
    {"from",
     "'from ... import' is not supported: a chat template is one string, with no other templates to load"},
    {"extends", "'extends' is not supported: a chat template is one string, with no other templates to load"},
    {"block",
     "'block' (template inheritance) is not supported (nor by @huggingface/jinja, the reference engine)"},
    {"autoescape", "'autoescape' is not supported: chat templates render without HTML escaping"},
};

static jj_node *parse_statement(parser *P)
{
    const jj_tok *t = next(P);
    if (t->k != TK_NAME)
        fail_at(P, t, "a statement name");
    if (!strcmp(t->s, "if"))
        return parse_if(P, t);
    if (!strcmp(t->s, "for"))
        return parse_for(P, t);
    if (!strcmp(t->s, "set"))
        return parse_set(P, t);
    if (!strcmp(t->s, "macro"))
        return parse_macro(P, t);
    if (!strcmp(t->s, "call"))
        return parse_call_block(P, t);
    if (!strcmp(t->s, "filter"))
        return parse_filter_block(P, t);
    for (size_t i = 0; i < sizeof REFUSED / sizeof REFUSED[0]; i++)
        if (!strcmp(t->s, REFUSED[i].name))
            jj_fail(P->c, t->line, t->col, "%s", REFUSED[i].why);
    if (!strcmp(t->s, "break") || !strcmp(t->s, "continue")) {
        jj_node *n = node(P, t->s[0] == 'b' ? N_BREAK : N_CONTINUE, t);
        end_block(P);
        return n;
    }
    if (!strcmp(t->s, "generation")) {
        jj_node *n = node(P, N_BLOCK, t);
        end_block(P);
        static const char *const end[] = {"endgeneration", NULL};
        parse_body(P, &n->body, end, t, "generation");
        next(P);
        end_block(P);
        return n;
    }
    jj_fail(P->c, t->line, t->col, "unknown statement '%s'", t->s);
}

/*
 * Statements until one of `stops` opens a block tag (left as the next token,
 * after its '{%'), or the end of the template (an error when stops is set).
 */
static void parse_body(parser *P, jj_nodes *body, const char *const *stops, const jj_tok *opener,
                       const char *opener_name)
{
    for (;;) {
        const jj_tok *t = peek(P);
        switch (t->k) {
        case TK_EOF:
            if (stops)
                jj_fail(P->c, t->line, t->col, "expected 'end%s' to close the '%s' of line %d", opener_name,
                        opener_name, opener->line);
            return;
        case TK_TEXT: {
            jj_node *n = node(P, N_TEXT, next(P));
            n->val = jj_str_n(P->c, t->s, t->n);
            add(P, body, n);
            break;
        }
        case TK_VAR_BEGIN: {
            next(P);
            jj_node *n = node(P, N_OUTPUT, t);
            n->a = parse_expr(P);
            if (peek(P)->k != TK_VAR_END)
                fail_at(P, peek(P), "'}}'");
            next(P);
            add(P, body, n);
            break;
        }
        case TK_BLOCK_BEGIN: {
            const jj_tok *kw = &P->t[P->pos + 1];
            for (int i = 0; stops && stops[i]; i++)
                if (is_name(kw, stops[i])) {
                    next(P);
                    return;
                }
            if (kw->k == TK_NAME &&
                (!strncmp(kw->s, "end", 3) || !strcmp(kw->s, "elif") || !strcmp(kw->s, "else")))
                jj_fail(P->c, kw->line, kw->col, "unexpected '%s'%s", kw->s,
                        stops ? "" : " outside of any block");
            next(P);
            add(P, body, parse_statement(P));
            break;
        }
        default: fail_at(P, t, "text, '{{' or '{%'");
        }
    }
}

jj_node *jj_parse(jj_ctx *c, const jj_tok *toks, int n_tok)
{
    parser P = {.c = c, .t = toks, .n = n_tok};
    jj_node *root = node(&P, N_BLOCK, &toks[0]);
    parse_body(&P, &root->body, NULL, NULL, NULL);
    return root;
}
