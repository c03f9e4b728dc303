/*
 * Multi-agent (MARFT) helpers of include/distflow/marft.h: per-agent column
 * names, train_cycle, and siiRL MultiAgentLoop's chained prompts over the
 * Jinja engine (the pre template in siiRL's string.Template syntax becomes a
 * Jinja template; the agent's chat template wraps it).
 */
#include "distflow/marft.h"

#include "distflow/jinja.h"
#include "util/sbuf.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PREFIX "agent_group_"

/* ---- columns ----------------------------------------------------------------------------------- */

bool df_marft_column_split(const char *name, int *g, const char **column)
{
    size_t np = strlen(PREFIX);
    if (!name || strncmp(name, PREFIX, np))
        return false;
    const char *p = name + np;
    long v = 0;
    int digits = 0;
    for (; *p >= '0' && *p <= '9' && digits < 9; p++, digits++)
        v = v * 10 + (*p - '0');
    if (!digits || (digits > 1 && name[np] == '0') || *p != '_' || !p[1])
        return false;
    if (g)
        *g = (int)v;
    if (column)
        *column = p + 1;
    return true;
}

int df_marft_column(int g, const char *column, char *out, size_t cap)
{
    if (g < 0 || !column || !column[0] || !out)
        return df_error(DF_EINVAL, "agent column: agent group %d, column '%s' (need g >= 0, a column name)", g,
                        column ? column : "(null)");
    if (df_marft_column_split(column, NULL, NULL))
        return df_error(DF_EINVAL, "agent column: '%s' already has an agent group prefix", column);
    int n = snprintf(out, cap, PREFIX "%d_%s", g, column);
    if (n < 0 || (size_t)n >= cap)
        return df_error(DF_EINVAL, "agent column: '" PREFIX "%d_%s' is longer than %zu bytes", g, column,
                        cap ? cap - 1 : 0);
    return DF_OK;
}

bool df_marft_node_runs(int64_t step, int64_t train_cycle, int n_groups, int g)
{
    if (n_groups < 1 || g < 0 || g >= n_groups || step < 0 || train_cycle < 0)
        return false;
    return train_cycle == 0 || (step / train_cycle) % n_groups == g;
}

/* ---- siiRL's string.Template syntax as Jinja ----------------------------------------------------- */

static bool ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool ident_char(char c) { return ident_start(c) || (c >= '0' && c <= '9'); }

/* Append "{{ name }}" for the placeholder at s[0 .. len), or fail when it is not one of names. */
static int placeholder(df_sbuf *b, const char *s, size_t len, const char *const *names, int n_names, size_t col)
{
    for (int i = 0; i < n_names; i++)
        if (strlen(names[i]) == len && !strncmp(names[i], s, len)) {
            df_sbuf_printf(b, "{{ %s }}", names[i]);
            return DF_OK;
        }
    df_sbuf sb = {0};
    for (int i = 0; i < n_names; i++)
        df_sbuf_printf(&sb, "%s${%s}", i ? ", " : "", names[i]);
    int rc = df_error(DF_EINVAL, "template column %zu: unknown placeholder '${%.*s}' (known: %s)", col, (int)len, s,
                      sb.s ? sb.s : "none");
    df_sbuf_free(&sb);
    return rc;
}

int df_marft_template_to_jinja(const char *tmpl, const char *const *names, int n_names, char **jinja)
{
    *jinja = NULL;
    if (!tmpl || (n_names > 0 && !names))
        return df_error(DF_EINVAL, "template: NULL text or names");
    df_sbuf b = {0};
    int rc = DF_OK;
    const size_t n = strlen(tmpl);
    for (size_t i = 0; !rc && i < n; i++) {
        const char c = tmpl[i], d = tmpl[i + 1];
        if (c == '$' && d == '$') {
            df_sbuf_puts(&b, "$");
            i++;
        } else if (c == '$' && d == '{') {
            size_t k = i + 2;
            while (ident_char(tmpl[k]))
                k++;
            if (tmpl[k] != '}' || k == i + 2 || !ident_start(tmpl[i + 2]))
                rc = df_error(DF_EINVAL, "template column %zu: '${' must hold a name and be closed by '}'", i + 1);
            else
                rc = placeholder(&b, tmpl + i + 2, k - i - 2, names, n_names, i + 1);
            i = k;
        } else if (c == '$' && ident_start(d)) {
            size_t k = i + 1;
            while (ident_char(tmpl[k]))
                k++;
            rc = placeholder(&b, tmpl + i + 1, k - i - 1, names, n_names, i + 1);
            i = k - 1;
        } else if (c == '$') {
            rc = df_error(DF_EINVAL, "template column %zu: invalid placeholder: '$' must be followed by a name, "
                          "'{name}' or '$'", i + 1);
        } else if (c == '{' && (d == '{' || d == '%' || d == '#')) {
            df_sbuf_puts(&b, "{{ '{' }}"); /* the literal text never opens a Jinja tag */
        } else if (c == '\n' && i == n - 1) {
            df_sbuf_puts(&b, "{{ '\\n' }}"); /* the renderer drops a template's single trailing newline */
        } else {
            df_sbuf_put(&b, &c, 1);
        }
    }
    if (rc) {
        df_sbuf_free(&b);
        return rc;
    }
    return df_sbuf_finish(&b, jinja);
}

/* ---- the chain ----------------------------------------------------------------------------------- */

typedef struct chain_agent {
    const df_tokenizer *tok;
    df_jinja_template *pre;
    char *post;
} chain_agent;

struct df_marft_chain {
    chain_agent *agents;
    int n;
};

void df_marft_chain_free(df_marft_chain *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n; i++) {
        df_jinja_free(c->agents[i].pre);
        free(c->agents[i].post);
    }
    free(c->agents);
    free(c);
}

static int chain_agent_init(chain_agent *ca, const df_marft_agent *a, int i)
{
    static const char *const names[] = {"prompt", "obs"};
    const char *pre = a->pre_chat_template && a->pre_chat_template[0] ? a->pre_chat_template : "${prompt}";
    char *jinja = NULL, name[48];
    if (!a->tokenizer)
        return df_error(DF_EINVAL, "agent %d: no tokenizer", i);
    ca->tok = a->tokenizer;
    snprintf(name, sizeof name, "agent %d pre_chat_template", i);
    int rc = df_marft_template_to_jinja(pre, names, 2, &jinja);
    if (!rc)
        rc = df_jinja_parse(jinja, name, &ca->pre);
    free(jinja);
    if (!rc && !(ca->post = strdup(a->post_chat_template ? a->post_chat_template : "")))
        rc = df_error(DF_ENOMEM, "out of memory");
    return rc ? df_error_wrap(rc, "%s", name) : DF_OK;
}

int df_marft_chain_create(const df_marft_agent *agents, int n_agents, df_marft_chain **out)
{
    *out = NULL;
    if (!agents || n_agents < 1)
        return df_error(DF_EINVAL, "multi-agent chain: %d agents (need at least one)", n_agents);
    df_marft_chain *c = calloc(1, sizeof *c);
    if (c && !(c->agents = calloc((size_t)n_agents, sizeof *c->agents))) {
        free(c);
        c = NULL;
    }
    if (!c)
        return df_error(DF_ENOMEM, "out of memory");
    c->n = n_agents;
    int rc = DF_OK;
    for (int i = 0; !rc && i < n_agents; i++)
        rc = chain_agent_init(&c->agents[i], &agents[i], i);
    if (rc) {
        df_marft_chain_free(c);
        return df_error_wrap(rc, "multi-agent chain");
    }
    *out = c;
    return DF_OK;
}

static int check_agent(const df_marft_chain *c, int agent)
{
    if (!c || agent < 0 || agent >= c->n)
        return df_error(DF_EINVAL, "multi-agent chain: agent %d is not one of its %d", agent, c ? c->n : 0);
    return DF_OK;
}

int df_marft_chain_prompt(const df_marft_chain *c, int agent, const char *episode, const char *obs, char **prompt)
{
    *prompt = NULL;
    int rc = check_agent(c, agent);
    if (rc)
        return rc;
    if (!episode)
        return df_error(DF_EINVAL, "multi-agent chain: agent %d: NULL episode", agent);
    json_t *ctx = json_pack("{s:s, s:s}", "prompt", episode, "obs", obs ? obs : "");
    char *ctx_text = ctx ? json_dumps(ctx, JSON_COMPACT) : NULL;
    json_decref(ctx);
    if (!ctx_text) /* jansson refuses invalid UTF-8 */
        return df_error(DF_EINVAL, "multi-agent chain: agent %d: the episode or observation is not valid UTF-8",
                        agent);
    char *user = NULL;
    rc = df_jinja_render(c->agents[agent].pre, ctx_text, NULL, &user);
    free(ctx_text);
    /* siiRL process.py: an empty system message, then the templated episode as the user's */
    df_chat_message msgs[] = {{"system", ""}, {"user", user}};
    if (!rc)
        rc = df_tokenizer_apply_chat_template(c->agents[agent].tok, msgs, 2, true, prompt);
    free(user);
    return rc ? df_error_wrap(rc, "multi-agent chain: agent %d's prompt", agent) : DF_OK;
}

int df_marft_chain_pass(const df_marft_chain *c, int agent, const char *episode, const char *response, char **next)
{
    *next = NULL;
    int rc = check_agent(c, agent);
    if (rc)
        return rc;
    if (!episode || !response)
        return df_error(DF_EINVAL, "multi-agent chain: agent %d: NULL episode or response", agent);
    size_t a = strlen(episode), p = strlen(c->agents[agent].post), r = strlen(response);
    char *s = malloc(a + p + r + 1);
    if (!s)
        return df_error(DF_ENOMEM, "out of memory");
    memcpy(s, episode, a);
    memcpy(s + a, c->agents[agent].post, p);
    memcpy(s + a + p, response, r + 1);
    *next = s;
    return DF_OK;
}
