/*
 * The Jinja lexer: template text into text runs and the tokens inside `{{ }}`
 * and `{% %}` (comments `{# #}` are dropped), applying whitespace control as
 * transformers configures Jinja: `{%-` / `-%}` (and the same on `{{ }}` and
 * `{# #}`) strip all whitespace on that side, trim_blocks drops the first
 * newline after a block or comment tag, lstrip_blocks drops the spaces and
 * tabs between the start of a line and a block or comment tag (`{%+` keeps
 * them), and the template's single trailing newline is dropped
 * (keep_trailing_newline = False).
 */
#include "jinja/jinja_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct lexer {
    jj_ctx *c;
    const char *src;
    size_t n, pos;
    int line, col; /* of pos */
    jj_tok *v;
    int nt, cap;
} lexer;

static bool is_ws(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v';
}

static void advance(lexer *L, size_t k)
{
    for (size_t i = 0; i < k && L->pos < L->n; i++, L->pos++) {
        if (L->src[L->pos] == '\n') {
            L->line++;
            L->col = 1;
        } else if (((unsigned char)L->src[L->pos] & 0xc0) != 0x80) {
            L->col++;
        }
    }
}

static jj_tok *push(lexer *L, jj_tok_kind k, int line, int col)
{
    if (L->nt == L->cap) {
        int cap = L->cap ? L->cap * 2 : 256;
        jj_tok *v = jj_alloc(L->c, (size_t)cap * sizeof *v);
        if (L->nt)
            memcpy(v, L->v, (size_t)L->nt * sizeof *v);
        L->v = v;
        L->cap = cap;
    }
    jj_tok *t = &L->v[L->nt++];
    memset(t, 0, sizeof *t);
    t->k = k;
    t->line = line;
    t->col = col;
    return t;
}

/* A text run [a, b) of the source, with the trims decided by the tags around it. */
static void push_text(lexer *L, size_t a, size_t b, int line, int col, bool strip_left, bool trim_nl,
                      bool strip_right, bool lstrip)
{
    size_t a0 = a;
    if (strip_left)
        while (a < b && is_ws(L->src[a]))
            a++;
    else if (trim_nl && a < b && L->src[a] == '\n')
        a++;
    else if (trim_nl && a + 1 < b && L->src[a] == '\r' && L->src[a + 1] == '\n')
        a += 2;
    if (strip_right) {
        while (b > a && is_ws(L->src[b - 1]))
            b--;
    } else if (lstrip) { /* only blanks between the line start and the tag */
        size_t k = b;
        while (k > a0 && (L->src[k - 1] == ' ' || L->src[k - 1] == '\t'))
            k--;
        bool line_start = k == 0 || L->src[k - 1] == '\n';
        if (line_start && k >= a)
            b = k;
    }
    if (b > a) {
        jj_tok *t = push(L, TK_TEXT, line, col);
        t->s = jj_strndup(L->c, L->src + a, b - a);
        t->n = b - a;
    }
}

static int hexval(char ch)
{
    return ch >= '0' && ch <= '9'   ? ch - '0'
           : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
           : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                    : -1;
}

static void put_utf8(jj_buf *b, uint32_t cp)
{
    char u[4];
    int k;
    if (cp < 0x80) {
        u[0] = (char)cp;
        k = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xc0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3f));
        k = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xe0 | cp >> 12), u[1] = (char)(0x80 | ((cp >> 6) & 0x3f)),
        u[2] = (char)(0x80 | (cp & 0x3f));
        k = 3;
    } else {
        u[0] = (char)(0xf0 | cp >> 18), u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3f)), u[3] = (char)(0x80 | (cp & 0x3f));
        k = 4;
    }
    jj_put(b, u, (size_t)k);
}

/* A quoted string literal at L->pos, with Python's escapes. */
static void lex_string(lexer *L, int line, int col)
{
    char q = L->src[L->pos];
    advance(L, 1);
    jj_buf b = {.c = L->c};
    jj_put(&b, "", 0);
    while (L->pos < L->n && L->src[L->pos] != q) {
        char ch = L->src[L->pos];
        if (ch != '\\') {
            jj_put(&b, &ch, 1);
            advance(L, 1);
            continue;
        }
        if (L->pos + 1 >= L->n)
            break;
        char e = L->src[L->pos + 1];
        const char *map = strchr("ntrbfv0\\'\"", e);
        if (map && e) {
            static const char out[] = "\n\t\r\b\f\v\0\\'\"";
            jj_put(&b, &out[map - "ntrbfv0\\'\""], 1);
            advance(L, 2);
        } else if (e == 'x' || e == 'u' || e == 'U') {
            int k = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t cp = 0;
            for (int i = 0; i < k; i++) {
                int h = L->pos + 2 + (size_t)i < L->n ? hexval(L->src[L->pos + 2 + (size_t)i]) : -1;
                if (h < 0)
                    jj_fail(L->c, L->line, L->col, "invalid \\%c escape in a string literal", e);
                cp = cp << 4 | (uint32_t)h;
            }
            put_utf8(&b, cp);
            advance(L, 2 + (size_t)k);
        } else { /* Python keeps an unknown escape as written */
            jj_put(&b, L->src + L->pos, 2);
            advance(L, 2);
        }
    }
    if (L->pos >= L->n)
        jj_fail(L->c, line, col, "unterminated string literal");
    advance(L, 1);
    jj_tok *t = push(L, TK_STRING, line, col);
    t->s = b.s;
    t->n = b.n;
}

static void lex_number(lexer *L, int line, int col)
{
    size_t a = L->pos, p = a;
    bool is_float = false;
    while (p < L->n && (L->src[p] >= '0' && L->src[p] <= '9'))
        p++;
    if (p + 1 < L->n && L->src[p] == '.' && L->src[p + 1] >= '0' && L->src[p + 1] <= '9') {
        is_float = true;
        p++;
        while (p < L->n && L->src[p] >= '0' && L->src[p] <= '9')
            p++;
    }
    if (p < L->n && (L->src[p] == 'e' || L->src[p] == 'E')) {
        size_t q = p + 1;
        if (q < L->n && (L->src[q] == '+' || L->src[q] == '-'))
            q++;
        if (q < L->n && L->src[q] >= '0' && L->src[q] <= '9') {
            is_float = true;
            p = q;
            while (p < L->n && L->src[p] >= '0' && L->src[p] <= '9')
                p++;
        }
    }
    char *txt = jj_strndup(L->c, L->src + a, p - a);
    jj_tok *t = push(L, is_float ? TK_FLOAT : TK_INT, line, col);
    if (is_float)
        t->f = strtod(txt, NULL);
    else {
        errno = 0;
        t->i = strtoll(txt, NULL, 10);
        if (errno == ERANGE)
            jj_fail(L->c, line, col, "integer literal %s does not fit in 64 bits", txt);
    }
    t->s = txt;
    advance(L, p - a);
}

/* The tokens of one `{{ ... }}` / `{% ... %}` up to its close; returns whether it ends with `-`. */
static bool lex_tag(lexer *L, bool block, int tline, int tcol)
{
    const char *close = block ? "%}" : "}}";
    int depth = 0; /* brackets open, so a `}}` inside a dict literal is not the close */
    for (;;) {
        while (L->pos < L->n && is_ws(L->src[L->pos]))
            advance(L, 1);
        if (L->pos >= L->n)
            jj_fail(L->c, tline, tcol, "missing '%s' to close the tag opened here", close);
        const char *p = L->src + L->pos;
        int line = L->line, col = L->col;
        if (depth == 0 && p[0] == '-' && strncmp(p + 1, close, 2) == 0) {
            advance(L, 3);
            push(L, block ? TK_BLOCK_END : TK_VAR_END, line, col);
            return true;
        }
        if (depth == 0 && strncmp(p, close, 2) == 0) {
            advance(L, 2);
            push(L, block ? TK_BLOCK_END : TK_VAR_END, line, col);
            return false;
        }
        char ch = p[0];
        if (ch == '\'' || ch == '"') {
            lex_string(L, line, col);
        } else if (ch >= '0' && ch <= '9') {
            lex_number(L, line, col);
        } else if (ch == '_' || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')) {
            size_t k = 1;
            while (L->pos + k < L->n && (p[k] == '_' || (p[k] >= 'a' && p[k] <= 'z') ||
                                         (p[k] >= 'A' && p[k] <= 'Z') || (p[k] >= '0' && p[k] <= '9')))
                k++;
            jj_tok *t = push(L, TK_NAME, line, col);
            t->s = jj_strndup(L->c, p, k);
            t->n = k;
            advance(L, k);
            /* here, not in the parser: a raw block's text need not lex as template code */
            if (block && L->v[L->nt - 2].k == TK_BLOCK_BEGIN && !strcmp(t->s, "raw"))
                jj_fail(L->c, line, col,
                        "'raw' blocks are not supported (nor by @huggingface/jinja, the "
                        "reference engine); write '{{ \"{{\" }}' for a literal brace pair");
        } else {
            static const char *ops2[] = {"//", "**", "==", "!=", "<=", ">=", NULL};
            size_t k = 0;
            for (int i = 0; ops2[i]; i++)
                if (strncmp(p, ops2[i], 2) == 0)
                    k = 2;
            if (!k && strchr("+-*/%~<>=()[]{},.:|", ch))
                k = 1;
            if (!k)
                jj_fail(L->c, line, col, "unexpected character '%c'", ch);
            if (k == 1 && (ch == '(' || ch == '[' || ch == '{'))
                depth++;
            if (k == 1 && (ch == ')' || ch == ']' || ch == '}') && depth > 0)
                depth--;
            jj_tok *t = push(L, TK_OP, line, col);
            t->s = jj_strndup(L->c, p, k);
            t->n = k;
            advance(L, k);
        }
    }
}

jj_tok *jj_lex(jj_ctx *c, const char *src, int *n_tok)
{
    lexer L = {.c = c, .src = src, .n = strlen(src), .line = 1, .col = 1};
    if (L.n && src[L.n - 1] == '\n') /* keep_trailing_newline = False */
        L.n--;
    bool strip_next = false, trim_nl = false;
    for (;;) {
        size_t a = L.pos;
        int line = L.line, col = L.col;
        const char *tag = NULL;
        for (size_t p = a; p + 1 < L.n; p++)
            if (src[p] == '{' && (src[p + 1] == '{' || src[p + 1] == '%' || src[p + 1] == '#')) {
                tag = src + p;
                break;
            }
        size_t b = tag ? (size_t)(tag - src) : L.n;
        char kind = tag ? tag[1] : 0, mod = tag && b + 2 < L.n ? tag[2] : 0;
        push_text(&L, a, b, line, col, strip_next, trim_nl, mod == '-',
                  kind == '%' || kind == '#' ? mod != '+' : false);
        advance(&L, b - a);
        if (!tag)
            break;
        int tline = L.line, tcol = L.col;
        advance(&L, (mod == '-' || mod == '+') ? 3 : 2);
        if (kind == '#') {
            const char *end = NULL;
            for (size_t p = L.pos; p + 1 < L.n; p++)
                if (src[p] == '#' && src[p + 1] == '}') {
                    end = src + p;
                    break;
                }
            if (!end)
                jj_fail(c, tline, tcol, "unterminated comment");
            strip_next = end > src + L.pos && end[-1] == '-';
            trim_nl = true;
            advance(&L, (size_t)(end - (src + L.pos)) + 2);
            continue;
        }
        push(&L, kind == '%' ? TK_BLOCK_BEGIN : TK_VAR_BEGIN, tline, tcol);
        strip_next = lex_tag(&L, kind == '%', tline, tcol);
        trim_nl = kind == '%';
    }
    push(&L, TK_EOF, L.line, L.col);
    *n_tok = L.nt;
    return L.v;
}
