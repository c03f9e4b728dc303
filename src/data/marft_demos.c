/*
 * The planner / solver demonstrations of `make demo ALGO=marft` (distflow/marft_demos.h): a
 * worked synthetic solution split into the planner's operations and the solver's arithmetic,
 * each agent's prompt built by the MARFT chain as the rollout builds it.
 */
#include "distflow/marft_demos.h"

#include "util/sbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An integer at *p (optional '-', then digits; at most 18 of them); advances *p. */
static bool read_int(const char **p, int64_t *v)
{
    const char *s = *p;
    bool neg = *s == '-';
    s += neg;
    int64_t x = 0;
    int digits = 0;
    for (; *s >= '0' && *s <= '9' && digits < 18; s++, digits++)
        x = x * 10 + (*s - '0');
    if (!digits || (*s >= '0' && *s <= '9'))
        return false;
    *v = neg ? -x : x;
    *p = s;
    return true;
}

static bool read_lit(const char **p, const char *lit)
{
    size_t n = strlen(lit);
    if (strncmp(*p, lit, n))
        return false;
    *p += n;
    return true;
}

/* One line "a op b = c" of [s, end): true when it is one and c is what op gives. */
static bool parse_step(const char *s, const char *end, int64_t *a, char *op, int64_t *b, int64_t *c)
{
    const char *p = s;
    if (!read_int(&p, a) || !read_lit(&p, " ") || !*p || !strchr("+-*", *p))
        return false;
    *op = *p++;
    if (!read_lit(&p, " ") || !read_int(&p, b) || !read_lit(&p, " = ") || !read_int(&p, c) || p != end)
        return false;
    int64_t want = *op == '+' ? *a + *b : *op == '-' ? *a - *b : *a * *b;
    return want == *c;
}

/* The "#### N" line of [s, end), or false. */
static bool parse_final(const char *s, const char *end, int64_t *n)
{
    const char *p = s;
    return read_lit(&p, "#### ") && read_int(&p, n) && p == end;
}

int df_marft_demo_plan(const char *solution, char **plan, int64_t *answer)
{
    *plan = NULL;
    if (!solution)
        return df_error(DF_EINVAL, "planner demonstration: NULL solution");
    df_sbuf b = {0};
    int64_t last = 0, n = 0;
    int lines = 0;
    bool final = false;
    const char *s = solution;
    int rc = DF_OK;
    while (!rc && !final && *s) {
        const char *end = strchr(s, '\n');
        end = end ? end : s + strlen(s);
        int64_t a, bv, c;
        char op;
        if (lines > 0 && parse_final(s, end, &n))
            final = true;
        else if (!parse_step(s, end, &a, &op, &bv, &c))
            rc = df_error(DF_EINVAL, "line %d '%.*s' is not 'a op b = c' (op + - *, c its result)%s",
                          lines + 1, (int)(end - s), s, lines ? " nor '#### N'" : "");
        else if (lines > 0 && a != last)
            rc = df_error(DF_EINVAL, "line %d '%.*s' does not start from the value before, %lld", lines + 1,
                          (int)(end - s), s, (long long)last);
        else {
            if (lines)
                df_sbuf_printf(&b, ", then %c %lld", op, (long long)bv);
            else
                df_sbuf_printf(&b, "%lld %c %lld", (long long)a, op, (long long)bv);
            last = c;
            lines++;
        }
        s = *end ? end + 1 : end;
    }
    if (!rc && !final)
        rc = df_error(DF_EINVAL, "no final line '#### N' after %d operation line(s)", lines);
    else if (!rc && *s)
        rc = df_error(DF_EINVAL, "text after the final '#### %lld' line", (long long)n);
    else if (!rc && n != last)
        rc = df_error(DF_EINVAL, "'#### %lld' is not the last line's result %lld", (long long)n,
                      (long long)last);
    if (!rc)
        rc = df_sbuf_finish(&b, plan);
    if (rc) {
        df_sbuf_free(&b);
        return df_error_wrap(rc, "planner demonstration of a worked solution");
    }
    if (answer)
        *answer = n;
    return DF_OK;
}

int df_marft_first_episode(const df_dataset *ds, int64_t i, const df_tokenizer *tok, char **episode)
{
    *episode = NULL;
    int n = df_dataset_num_messages(ds, i);
    if (n < 0)
        return df_error(DF_EINVAL, "first episode: row %lld is not in the dataset", (long long)i);
    df_chat_message *msgs = calloc((size_t)(n > 0 ? n : 1), sizeof *msgs);
    if (!msgs)
        return df_error(DF_ENOMEM, "out of memory");
    int rc = DF_OK;
    for (int j = 0; j < n && !rc; j++)
        rc = df_dataset_message(ds, i, j, &msgs[j].role, &msgs[j].content);
    if (!rc)
        rc = df_tokenizer_apply_chat_template(tok, msgs, n, true, episode);
    free(msgs);
    return rc ? df_error_wrap(rc, "first episode of row %lld", (long long)i) : DF_OK;
}

void df_marft_demo_free(df_marft_demo *d)
{
    if (!d)
        return;
    for (int k = 0; k < 2; k++) {
        free(d->prompt[k]);
        free(d->response[k]);
    }
    memset(d, 0, sizeof *d);
}

/* fmt with every "{answer}" replaced by n (malloc'd), or NULL when out of memory. */
static char *bare_answer(const char *fmt, int64_t n)
{
    static const char KEY[] = "{answer}";
    df_sbuf b = {0};
    for (const char *p = fmt, *q; *p; p = q + sizeof KEY - 1) {
        if (!(q = strstr(p, KEY))) {
            df_sbuf_puts(&b, p);
            break;
        }
        df_sbuf_put(&b, p, (size_t)(q - p));
        df_sbuf_printf(&b, "%lld", (long long)n);
    }
    char *s = NULL;
    return df_sbuf_finish(&b, &s) ? NULL : s;
}

int df_marft_demo_make(const df_marft_chain *c, const char *episode, const char *solution,
                       const char *bare_fmt, df_marft_demo *out)
{
    memset(out, 0, sizeof *out);
    char *next = NULL;
    int rc = df_marft_demo_plan(solution, &out->response[0], &out->answer);
    if (!rc)
        rc = df_marft_chain_prompt(c, 0, episode, NULL, &out->prompt[0]);
    if (!rc)
        rc = df_marft_chain_pass(c, 0, episode, out->response[0], &next);
    if (!rc)
        rc = df_marft_chain_prompt(c, 1, next, NULL, &out->prompt[1]);
    free(next);
    if (!rc && !(out->response[1] = bare_fmt ? bare_answer(bare_fmt, out->answer) : strdup(solution)))
        rc = df_error(DF_ENOMEM, "out of memory");
    if (rc)
        df_marft_demo_free(out);
    return rc;
}
