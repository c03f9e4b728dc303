/*
 * jinja_internal.h (internal) — the types shared by the Jinja lexer, parser
 * and evaluator: an arena, the value type, the AST and the error context.
 *
 * Memory: every value and node lives in an arena freed at once (the
 * template's arena for the AST, one arena per render for values), so values
 * are plain structs shared by pointer without reference counts. Errors:
 * deep inside an expression the code reports with jj_fail(), which records
 * the message (df_error) and longjmps back to the public entry point; this
 * is safe because nothing owned lives outside the arena.
 */
#ifndef DF_JINJA_INTERNAL_H
#define DF_JINJA_INTERNAL_H

#include "distflow/common.h"
#include "distflow/jinja.h"

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- error context and arena --------------------------------------------- */

typedef struct jj_chunk jj_chunk;

typedef struct jj_ctx {
    jmp_buf jb;
    const char *name; /* template name for messages */
    jj_chunk *chunks; /* the arena */
    int64_t used, limit;
    int code; /* status carried across the longjmp */
} jj_ctx;

/** Record "<name>:<line>:<col>: <fmt...>" (line <= 0: no position) and longjmp out. */
_Noreturn void jj_fail(jj_ctx *c, int line, int col, const char *fmt, ...) DF_PRINTF(4, 5);
/** Fail with `code` and an already formatted df_error message. */
_Noreturn void jj_fail_code(jj_ctx *c, int code);
/** Zeroed arena memory; fails the context past its limit or when malloc fails. */
void *jj_alloc(jj_ctx *c, size_t n);
/** Arena copy of n bytes plus a NUL. */
char *jj_strndup(jj_ctx *c, const char *s, size_t n);
/** Free every chunk of the context's arena. */
void jj_arena_free(jj_ctx *c);

/* A growable string: in the arena, or on the heap (heap = true: the render's
   output, freed by the caller of the render). */
typedef struct jj_buf {
    jj_ctx *c;
    char *s;
    size_t n, cap;
    bool heap;
    int64_t limit; /* heap only: fail past this many bytes */
} jj_buf;

void jj_put(jj_buf *b, const char *p, size_t n);
void jj_puts(jj_buf *b, const char *p);
void jj_printf(jj_buf *b, const char *fmt, ...) DF_PRINTF(2, 3);

/* ---- values -------------------------------------------------------------- */

typedef enum jj_type {
    JT_UNDEF,
    JT_NONE,
    JT_BOOL,
    JT_INT,
    JT_FLOAT,
    JT_STR,
    JT_LIST,
    JT_DICT,
    JT_FUNC
} jj_type;

typedef struct jj_str jj_str;
typedef struct jj_list jj_list;
typedef struct jj_dict jj_dict;
typedef struct jj_func jj_func;

typedef struct jj_val {
    jj_type t;
    union {
        bool b;
        int64_t i;
        double f;
        jj_str *s;
        jj_list *l;
        jj_dict *d;
        jj_func *fn;
        const char *uname; /* JT_UNDEF: the name that was missing (may be NULL) */
    };
} jj_val;

struct jj_str {
    size_t n;
    char s[]; /* NUL-terminated */
};

struct jj_list {
    size_t n, cap;
    jj_val *v;
};

/* Insertion-ordered; chat-template dicts are small, so lookup is linear. */
struct jj_dict {
    size_t n, cap;
    jj_val *k, *v;
    bool ns; /* a namespace(): its attributes may be assigned with `set ns.x = ...` */
};

typedef struct jj_eval jj_eval;
typedef struct jj_node jj_node;

/* Arguments of a call: positional then keyword. */
typedef struct jj_args {
    int n, n_kw;
    jj_val *v;
    const char **kw;
    jj_val *kwv;
    const jj_node *at; /* for error positions */
} jj_args;

typedef jj_val (*jj_builtin)(jj_eval *e, jj_val self, const jj_args *a);

struct jj_func {
    const char *name;
    jj_builtin fn; /* a builtin (bound to self), or NULL for a macro */
    jj_val self;
    const jj_node *macro; /* N_MACRO */
    struct jj_scope *closure;
    const jj_node *caller_body; /* `caller()` of a call block: its body */
    const jj_node *caller_def;
};

extern const jj_val jj_undef, jj_none;

jj_val jj_bool(bool b);
jj_val jj_int(int64_t i);
jj_val jj_float(double f);
jj_val jj_str_n(jj_ctx *c, const char *s, size_t n);
jj_val jj_cstr(jj_ctx *c, const char *s);
jj_val jj_list_new(jj_ctx *c, size_t cap);
void jj_list_push(jj_ctx *c, jj_list *l, jj_val v);
jj_val jj_dict_new(jj_ctx *c);
/** Set (or replace) key k. */
void jj_dict_set(jj_ctx *c, jj_dict *d, jj_val k, jj_val v);
/** The value of key k, or NULL. */
jj_val *jj_dict_get(const jj_dict *d, jj_val k);
jj_val *jj_dict_getc(const jj_dict *d, const char *k);

bool jj_truthy(jj_val v);
/** Python ==. */
bool jj_equal(jj_val a, jj_val b);
/** Python <: -1, 0, 1 for comparable values; fails otherwise. */
int jj_compare(jj_eval *e, const jj_node *at, jj_val a, jj_val b);
const char *jj_type_name(jj_val v);
/** str(v) as the engine prints it (see docs/chat_templates.md). */
void jj_print(jj_buf *b, jj_val v);
jj_val jj_to_str(jj_ctx *c, jj_val v);
/** json.dumps(v, ensure_ascii, indent, sort_keys) with Python's separators. */
void jj_json_dump(jj_eval *e, jj_buf *b, jj_val v, int indent, bool ensure_ascii, bool sort_keys, int depth);
/** A value from a JSON text (an object for the context); DF_EINVAL message on bad JSON. */
int jj_from_json_text(jj_ctx *c, const char *text, jj_val *out);
/** Python repr of a float (shortest round trip, ".0" on integers). */
void jj_print_float(jj_buf *b, double f);
/** Iterate: a list of the items of lists, dict keys, string characters; fails on others. */
jj_list *jj_iter(jj_eval *e, const jj_node *at, jj_val v);

/* ---- lexer and AST ------------------------------------------------------- */

typedef enum jj_tok_kind {
    TK_EOF,
    TK_TEXT,
    TK_VAR_BEGIN,
    TK_VAR_END,
    TK_BLOCK_BEGIN,
    TK_BLOCK_END,
    TK_NAME,
    TK_STRING,
    TK_INT,
    TK_FLOAT,
    TK_OP
} jj_tok_kind;

typedef struct jj_tok {
    jj_tok_kind k;
    int line, col;
    const char *s; /* TEXT / NAME / STRING (unescaped) / OP text, arena, NUL-terminated */
    size_t n;
    int64_t i;
    double f;
} jj_tok;

/** Tokenise with trim_blocks / lstrip_blocks; fails the context on a lexical error. */
jj_tok *jj_lex(jj_ctx *c, const char *src, int *n_tok);

typedef enum jj_kind {
    /* statements */
    N_TEXT,
    N_OUTPUT,
    N_IF,
    N_FOR,
    N_SET,
    N_SETBLOCK,
    N_MACRO,
    N_CALLBLOCK,
    N_FILTERBLOCK, /* {% filter f(args) | g %}: items are the E_FILTER nodes, applied in order */
    N_BREAK,
    N_CONTINUE,
    N_BLOCK, /* a plain list of statements (template body, generation blocks) */
    /* expressions */
    E_CONST,
    E_NAME,
    E_ATTR,
    E_INDEX,
    E_SLICE,
    E_CALL,
    E_FILTER,
    E_TEST,
    E_NEG,
    E_POS,
    E_NOT,
    E_BIN,
    E_AND,
    E_OR,
    E_CMP,
    E_COND,
    E_LIST,
    E_DICT
} jj_kind;

typedef struct jj_nodes {
    jj_node **v;
    int n, cap;
} jj_nodes;

struct jj_node {
    jj_kind kind;
    int line, col;
    jj_val val;         /* E_CONST, N_TEXT */
    const char *name;   /* E_NAME, E_ATTR, E_FILTER, E_TEST, N_MACRO, E_BIN / E_CMP operator */
    bool negate;        /* E_TEST `is not` */
    bool varargs;       /* N_MACRO / N_CALLBLOCK: the body reads `varargs` (extra positionals allowed) */
    bool kwargs;        /* N_MACRO / N_CALLBLOCK: the body reads `kwargs` (unknown keywords allowed) */
    jj_node *a, *b, *c; /* operands; N_FOR: a iterable, b filter; N_IF: a condition;
                           E_CALL / E_FILTER / E_TEST: b the `*args`, c the `**kwargs` unpacking */
    jj_nodes items;     /* args, list items, dict keys, slice parts, macro defaults */
    jj_nodes kwv;       /* keyword values, dict values */
    const char **kw;    /* keyword names, macro parameter names, for / set targets */
    int n_kw;
    jj_nodes body, orelse;
};

/** Parse tokens into an N_BLOCK; fails the context on a syntax error. */
jj_node *jj_parse(jj_ctx *c, const jj_tok *toks, int n_tok);

/* ---- evaluator ----------------------------------------------------------- */

typedef struct jj_scope {
    struct jj_scope *up;
    jj_dict *vars;
} jj_scope;

struct jj_eval {
    jj_ctx *c;
    jj_buf *out;
    int64_t max_output;
    int depth, max_depth;
    time_t now;
    jj_scope *globals;
    int loop_ctl; /* 1 break, 2 continue pending */
};

/** Evaluate an expression. */
jj_val jj_expr(jj_eval *e, jj_scope *s, const jj_node *n);
/** Render statements to e->out. */
void jj_exec(jj_eval *e, jj_scope *s, const jj_nodes *body);
/** Call a callable with arguments. */
jj_val jj_call(jj_eval *e, jj_scope *s, jj_val f, const jj_args *a);
/** Fail with a runtime error at node n. */
_Noreturn void jj_rt_fail(jj_eval *e, const jj_node *n, const char *fmt, ...) DF_PRINTF(3, 4);

/** Apply filter `name`; fails on an unknown filter. */
jj_val jj_filter(jj_eval *e, jj_scope *s, const jj_node *at, const char *name, jj_val v, const jj_args *a);
/** Apply test `name`. */
bool jj_test(jj_eval *e, const jj_node *at, const char *name, jj_val v, const jj_args *a);
/** A bound method `v.name` (str / dict / list methods), or undefined. */
jj_val jj_method(jj_eval *e, jj_val v, const char *name);
/** The global functions (range, namespace, raise_exception, strftime_now, dict). */
void jj_add_globals(jj_eval *e, jj_dict *g);
/** Python str.strip (left / right) of whitespace, or of the characters of `chars` (a str). */
jj_val jj_strip(jj_eval *e, jj_val v, jj_val chars, bool left, bool right);
/** Python str.replace; count < 0 replaces all. */
jj_val jj_replace(jj_eval *e, jj_val v, jj_val old, jj_val new_, int64_t count);
/** ASCII case mapping: 0 lower, 1 upper, 2 title, 3 capitalize. */
jj_val jj_case_map(jj_eval *e, jj_val v, int mode);
/** Positional or keyword argument i / kw, or `def`. */
jj_val jj_arg(const jj_args *a, int i, const char *kw, jj_val def);

#endif
