/* The public entry points of distflow/jinja.h: parse, render, free. */
#include "jinja/jinja_internal.h"

#include <stdlib.h>
#include <string.h>

struct df_jinja_template {
    jj_ctx ctx; /* owns the AST's arena */
    jj_node *root;
    char *name;
};

int df_jinja_parse(const char *source, const char *name, df_jinja_template **out)
{
    *out = NULL;
    if (!source)
        return df_error(DF_EINVAL, "%s: no template text", name ? name : "template");
    df_jinja_template *t = calloc(1, sizeof *t);
    char *nm = strdup(name ? name : "template");
    if (!t || !nm) {
        free(t);
        free(nm);
        return df_error(DF_ENOMEM, "jinja: out of memory");
    }
    t->name = nm;
    t->ctx.name = nm;
    t->ctx.limit = 0;
    df_jinja_template *volatile tv = t;
    if (setjmp(t->ctx.jb)) {
        int rc = tv->ctx.code;
        df_jinja_free(tv);
        return rc;
    }
    int n_tok;
    jj_tok *toks = jj_lex(&t->ctx, source, &n_tok);
    t->root = jj_parse(&t->ctx, toks, n_tok);
    *out = t;
    return 0;
}

void df_jinja_free(df_jinja_template *t)
{
    if (!t)
        return;
    jj_arena_free(&t->ctx);
    free(t->name);
    free(t);
}

int df_jinja_render(const df_jinja_template *t, const char *context_json, const df_jinja_options *opts,
                    char **out)
{
    *out = NULL;
    df_jinja_options o = opts ? *opts : (df_jinja_options){0};
    jj_ctx c = {.name = t->name, .limit = o.max_memory > 0 ? o.max_memory : (int64_t)1 << 30};
    jj_val ctxv = jj_undef;
    int rc = 0;
    if (context_json && *context_json)
        rc = jj_from_json_text(&c, context_json, &ctxv);
    if (!rc && ctxv.t != JT_UNDEF && ctxv.t != JT_DICT)
        rc = df_error(DF_EINVAL, "%s: the render context must be a JSON object", t->name);
    if (rc) {
        jj_arena_free(&c);
        return rc;
    }
    jj_buf buf = {.c = &c, .heap = true, .limit = o.max_output > 0 ? o.max_output : (int64_t)64 << 20};
    jj_buf *volatile bufp = &buf;
    jj_eval e = {.c = &c, .out = &buf, .max_depth = o.max_depth > 0 ? o.max_depth : 200, .now = o.now};
    if (setjmp(c.jb)) {
        free(bufp->s);
        jj_arena_free(&c);
        return c.code;
    }
    jj_scope *g = jj_alloc(&c, sizeof *g);
    g->vars = jj_dict_new(&c).d;
    jj_add_globals(&e, g->vars);
    /* the context's names shadow the globals, as transformers' extra kwargs do */
    for (size_t i = 0; ctxv.t == JT_DICT && i < ctxv.d->n; i++)
        jj_dict_set(&c, g->vars, ctxv.d->k[i], ctxv.d->v[i]);
    jj_scope *top = jj_alloc(&c, sizeof *top);
    top->up = g;
    top->vars = jj_dict_new(&c).d;
    e.globals = g;
    jj_put(&buf, "", 0);
    jj_exec(&e, top, &t->root->body);
    *out = buf.s;
    jj_arena_free(&c);
    return 0;
}

int df_jinja_render_string(const char *source, const char *name, const char *context_json,
                           const df_jinja_options *opts, char **out)
{
    df_jinja_template *t;
    *out = NULL;
    int rc = df_jinja_parse(source, name, &t);
    if (!rc)
        rc = df_jinja_render(t, context_json, opts, out);
    df_jinja_free(t);
    return rc;
}
