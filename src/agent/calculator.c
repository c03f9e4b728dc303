/* The built-in calculator tool (include/distflow/agent.h, df_tool_calculator): exact arithmetic on
 * numbers of any length — what a small model gets wrong when it multiplies 8-digit numbers in its
 * head. Expressions are + - * / ( ), unary signs and decimal literals, evaluated as exact fractions
 * by recursive descent; nothing else is interpreted. */
#include "distflow/agent.h"

#include "agent/agent_internal.h"
#include "agent/bigint.h"
#include "util/sbuf.h"
#include "util/utf8.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_EXPR_BYTES 4096 /* bounds every number's length, hence the work */
#define MAX_DEPTH 64
#define MAX_DIGITS 2000 /* of a value's numerator or denominator: bounds the gcd's work */
#define EXACT_DECIMALS 24   /* a fraction whose decimal ends within this many digits is shown exactly */
#define APPROX_DECIMALS 12
#define NOT_ALLOWED "unexpected '%s' (only numbers, + - * / and parentheses are allowed)"
#define QUOTE_BYTES 20 /* of the expression quoted in a message */

/* An exact fraction: (neg ? -1 : 1) * num / den, den > 0, gcd(num, den) = 1, zero not negative. */
typedef struct frac {
    bool neg;
    big num, den;
} frac;

typedef struct calc {
    const char *s;
    size_t pos;
    int depth;
    int rc;        /* first failure: DF_EINVAL (bad expression) or DF_ENOMEM */
    char err[160]; /* the DF_EINVAL reason */
} calc;

static void frac_free(frac *f)
{
    big_free(&f->num);
    big_free(&f->den);
}

static int fail(calc *c, const char *fmt, const char *arg)
{
    if (!c->rc) {
        c->rc = DF_EINVAL;
        snprintf(c->err, sizeof c->err, fmt, arg);
    }
    return -1;
}

/* fail() quoting the expression from s: at most QUOTE_BYTES, cut between UTF-8 characters (the
   message goes back to the model as text) and before any byte that is not UTF-8. */
static int fail_at(calc *c, const char *fmt, const char *s)
{
    char q[QUOTE_BYTES + 1];
    size_t n = df_utf8_prefix(s, QUOTE_BYTES);
    memcpy(q, s, n);
    q[n] = '\0';
    return fail(c, fmt, q);
}

/* NOT_ALLOWED for the character at s: all of its bytes, or \xNN for a byte that is not UTF-8. */
static int not_allowed(calc *c, const char *s)
{
    char q[8];
    int k = df_utf8_len((const unsigned char *)s);
    if (k > 0)
        memcpy(q, s, (size_t)k), q[k] = '\0';
    else
        snprintf(q, sizeof q, "\\x%02X", (unsigned char)s[0]);
    return fail(c, NOT_ALLOWED, q);
}

static int oom(calc *c)
{
    if (!c->rc)
        c->rc = DF_ENOMEM;
    return -1;
}

/* Reduce f by the gcd of its parts. */
static int normalise(calc *c, frac *f)
{
    big g = {0};
    int rc = big_gcd(&g, &f->num, &f->den);
    if (!rc && !(g.n == 1 && g.d[0] == 1))
        rc = big_divmod(&f->num, NULL, &f->num, &g) || big_divmod(&f->den, NULL, &f->den, &g) ? -1 : 0;
    big_free(&g);
    if (big_is_zero(&f->num))
        f->neg = false;
    if (rc)
        return oom(c);
    if (big_dec_len(&f->num) > MAX_DIGITS || big_dec_len(&f->den) > MAX_DIGITS)
        return fail(c, "a value has more than %s digits", "2000");
    return 0;
}

static void skip_space(calc *c)
{
    while (c->s[c->pos] == ' ' || c->s[c->pos] == '\t' || c->s[c->pos] == '\n' || c->s[c->pos] == '\r')
        c->pos++;
}

/* digits[.digits] */
static int number(calc *c, frac *out)
{
    const char *s = c->s + c->pos;
    size_t n = 0, point = 0;
    char buf[MAX_EXPR_BYTES];
    size_t nd = 0;
    for (; (s[n] >= '0' && s[n] <= '9') || (s[n] == '.' && !point); n++) {
        if (s[n] == '.')
            point = n + 1;
        else
            buf[nd++] = s[n];
    }
    if (!nd || (point && point == n))
        return fail_at(c, "a number ends in '.' or is only '.' near '%s'", s);
    c->pos += n;
    size_t decimals = point ? n - point : 0;
    out->neg = false;
    if (big_from_dec(&out->num, buf, nd) || big_set_u32(&out->den, 1))
        return oom(c);
    for (size_t i = 0; i < decimals; i++) {
        big ten = {0};
        int rc = big_set_u32(&ten, 10) || big_mul(&out->den, &out->den, &ten);
        big_free(&ten);
        if (rc)
            return oom(c);
    }
    return normalise(c, out);
}

static int expr(calc *c, frac *out);

static int primary(calc *c, frac *out)
{
    skip_space(c);
    char ch = c->s[c->pos];
    if (ch == '(') {
        if (++c->depth > MAX_DEPTH)
            return fail(c, "parentheses nest deeper than %s levels", "64");
        c->pos++;
        if (expr(c, out))
            return -1;
        skip_space(c);
        if (c->s[c->pos] != ')')
            return fail_at(c, "expected ')' at '%s'", c->s[c->pos] ? c->s + c->pos : "the end");
        c->pos++;
        c->depth--;
        return 0;
    }
    if ((ch >= '0' && ch <= '9') || ch == '.')
        return number(c, out);
    if (!ch)
        return fail(c, "the expression ends where a number or '(' is expected%s", "");
    return not_allowed(c, c->s + c->pos);
}

static int unary(calc *c, frac *out)
{
    skip_space(c);
    char ch = c->s[c->pos];
    if (ch == '-' || ch == '+') {
        if (++c->depth > MAX_DEPTH)
            return fail(c, "signs nest deeper than %s levels", "64");
        c->pos++;
        if (unary(c, out))
            return -1;
        c->depth--;
        if (ch == '-' && !big_is_zero(&out->num))
            out->neg = !out->neg;
        return 0;
    }
    return primary(c, out);
}

/* a = a op b for op in + - * / */
static int apply(calc *c, frac *a, frac *b, char op)
{
    big x = {0}, y = {0};
    int rc = 0;
    if (op == '*' || op == '/') {
        if (op == '/' && big_is_zero(&b->num)) {
            return fail(c, "division by zero%s", "");
        }
        const big *bn = op == '*' ? &b->num : &b->den, *bd = op == '*' ? &b->den : &b->num;
        rc = big_mul(&a->num, &a->num, bn) || big_mul(&a->den, &a->den, bd);
        a->neg = a->neg != b->neg;
    } else {
        bool bneg = op == '-' ? !b->neg : b->neg;
        /* a/d1 +- b/d2 = (a*d2 +- b*d1) / (d1*d2) */
        rc = big_mul(&x, &a->num, &b->den) || big_mul(&y, &b->num, &a->den) || big_mul(&a->den, &a->den, &b->den);
        if (!rc && a->neg == bneg) {
            rc = big_add(&a->num, &x, &y);
        } else if (!rc) {
            int cmp = big_cmp(&x, &y);
            rc = cmp >= 0 ? big_sub(&a->num, &x, &y) : big_sub(&a->num, &y, &x);
            a->neg = cmp >= 0 ? a->neg : bneg;
        }
    }
    big_free(&x);
    big_free(&y);
    return rc ? oom(c) : normalise(c, a);
}

/* left-associative chains: term of unary with * /, expr of term with + - */
static int chain(calc *c, frac *out, const char *ops, int (*operand)(calc *, frac *))
{
    if (operand(c, out))
        return -1;
    for (;;) {
        skip_space(c);
        char op = c->s[c->pos];
        if (!op || !strchr(ops, op))
            return 0;
        c->pos++;
        frac rhs = {0};
        int rc = operand(c, &rhs) || apply(c, out, &rhs, op);
        frac_free(&rhs);
        if (rc)
            return -1;
    }
}

static int term(calc *c, frac *out) { return chain(c, out, "*/", unary); }

static int expr(calc *c, frac *out) { return chain(c, out, "+-", term); }

/* "-123", "7/3 (about 2.333333333333)", "2.5" */
static int format(const frac *f, df_sbuf *b)
{
    char *n = big_to_dec(&f->num);
    if (!n)
        return DF_ENOMEM;
    df_sbuf_puts(b, f->neg ? "-" : "");
    bool integer = f->den.n == 1 && f->den.d[0] == 1;
    if (integer) {
        df_sbuf_puts(b, n);
        free(n);
        return DF_OK;
    }
    big ip = {0}, rem = {0}, ten = {0};
    int rc = big_divmod(&ip, &rem, &f->num, &f->den) || big_set_u32(&ten, 10) ? DF_ENOMEM : DF_OK;
    char digits[EXACT_DECIMALS + 1];
    int nd = 0;
    for (; !rc && nd < EXACT_DECIMALS && !big_is_zero(&rem); nd++) {
        big d = {0};
        rc = big_mul(&rem, &rem, &ten) || big_divmod(&d, &rem, &rem, &f->den) ? DF_ENOMEM : DF_OK;
        digits[nd] = (char)('0' + (d.n ? d.d[0] : 0));
        big_free(&d);
    }
    char *ips = rc ? NULL : big_to_dec(&ip);
    if (!rc && !ips)
        rc = DF_ENOMEM;
    if (!rc && big_is_zero(&rem)) { /* a terminating decimal: exact */
        df_sbuf_printf(b, "%s.%.*s", ips, nd, digits);
    } else if (!rc) {
        df_sbuf_printf(b, "%s/", n);
        char *d = big_to_dec(&f->den);
        df_sbuf_puts(b, d ? d : "");
        df_sbuf_printf(b, " (about %s%s.%.*s)", f->neg ? "-" : "", ips, APPROX_DECIMALS, digits);
        rc = d ? DF_OK : DF_ENOMEM;
        free(d);
    }
    free(ips);
    free(n);
    big_free(&ip);
    big_free(&rem);
    big_free(&ten);
    return rc;
}

int agent_calculate(const char *expression, char **result)
{
    *result = NULL;
    size_t len = strlen(expression);
    if (len > MAX_EXPR_BYTES)
        return df_error(DF_EINVAL, "calculator: the expression is %zu bytes long, the limit is %d", len,
                        MAX_EXPR_BYTES);
    calc c = {.s = expression};
    frac v = {0};
    skip_space(&c);
    if (!c.s[c.pos])
        fail(&c, "the expression is empty%s", "");
    else if (!expr(&c, &v) && c.s[c.pos] == ')')
        fail_at(&c, "unbalanced ')' at '%s'", c.s + c.pos);
    else if (!c.rc && c.s[c.pos] && strchr("0123456789.(", c.s[c.pos]))
        fail_at(&c, "unexpected text at '%s' (an operator is missing)", c.s + c.pos);
    else if (!c.rc && c.s[c.pos])
        not_allowed(&c, c.s + c.pos);
    df_sbuf b = {0};
    int rc = c.rc;
    if (!rc)
        rc = format(&v, &b);
    frac_free(&v);
    if (!rc && df_sbuf_finish(&b, result))
        rc = DF_ENOMEM;
    df_sbuf_free(&b);
    if (rc == DF_ENOMEM)
        return df_error(DF_ENOMEM, "out of memory");
    return rc ? df_error(rc, "calculator: %s", c.err) : DF_OK;
}

/* ---- the tool -------------------------------------------------------------------------------------- */

static int calc_create(const void *tool, const char *instance_id, const char *create_kwargs, void **inst)
{
    (void)tool, (void)instance_id, (void)create_kwargs;
    *inst = NULL; /* stateless */
    return DF_OK;
}

static int calc_execute(const void *tool, void *inst, const char *arguments, df_tool_result *out)
{
    (void)tool, (void)inst;
    json_t *args = json_loads(arguments, 0, NULL);
    json_t *e = args ? json_object_get(args, "expression") : NULL;
    int rc;
    if (!json_is_string(e)) {
        rc = df_error(DF_EINVAL, "calculator: the argument \"expression\" must be a string such as \"12 * (3 + 4)\"");
    } else {
        char *value = NULL;
        rc = agent_calculate(json_string_value(e), &value);
        if (!rc) {
            df_sbuf b = {0};
            df_sbuf_printf(&b, "%s = %s", json_string_value(e), value);
            rc = df_sbuf_finish(&b, &out->text);
        }
        free(value);
    }
    json_decref(args);
    return rc;
}

const df_tool df_tool_calculator = {
    .name = "calculator",
    .schema = "{\"type\": \"function\", \"function\": {\"name\": \"calculator\", \"description\": "
              "\"Exact arithmetic on integers and decimals of any length: + - * / and parentheses. "
              "Returns the exact result (a fraction when a division is not exact).\", \"parameters\": "
              "{\"type\": \"object\", \"properties\": {\"expression\": {\"type\": \"string\", \"description\": "
              "\"The expression, e.g. 12345678 * 87654321 - (7 + 5) / 4\"}}, \"required\": [\"expression\"]}}}",
    .create = calc_create,
    .execute = calc_execute,
};
