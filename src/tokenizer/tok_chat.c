/*
 * Chat templates without a Jinja engine: the family (ChatML / Llama-3) and the
 * default system message are read from the template text, and the known
 * rendering of each family is produced natively.
 */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct sbuf {
    char *p;
    int64_t n, cap;
    bool oom;
} sbuf;

static void put(sbuf *b, const char *s, int64_t n)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        int64_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, (size_t)cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, (size_t)n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void puts_(sbuf *b, const char *s) { put(b, s, (int64_t)strlen(s)); }

/*
 * The default system message is the Jinja string literal that follows
 * `<|im_start|>system\n` and ends at `<|im_end|>` (Qwen 2 / 2.5 templates:
 * `'<|im_start|>system\nYou are Qwen, ...<|im_end|>\n'`). Occurrences whose text
 * leaves the literal (an unescaped quote, as in `' + messages[0]['content'] + '`)
 * are skipped. Returns a malloc'd, unescaped copy, or NULL.
 */
static char *extract_default_system(const char *tmpl)
{
    static const char head[] = "<|im_start|>system";
    for (const char *p = strstr(tmpl, head); p; p = strstr(p + 1, head)) {
        const char *q = p + sizeof head - 1;
        if (q[0] == '\\' && q[1] == 'n')
            q += 2;
        else if (q[0] == '\n')
            q++;
        else
            continue;
        const char *end = strstr(q, "<|im_end|>");
        if (!end)
            continue;
        bool literal = true;
        for (const char *r = q; r < end && literal; r++) {
            if (*r == '\\' && r + 1 < end)
                r++;
            else if (*r == '\'' || *r == '"')
                literal = false;
        }
        if (!literal || end == q)
            continue;
        char *out = malloc((size_t)(end - q) + 1), *w = out;
        if (!out)
            return NULL;
        for (const char *r = q; r < end; r++) {
            if (*r == '\\' && r + 1 < end) {
                r++;
                *w++ = *r == 'n' ? '\n' : *r == 't' ? '\t' : *r == 'r' ? '\r' : *r;
            } else {
                *w++ = *r;
            }
        }
        *w = '\0';
        return out;
    }
    return NULL;
}

int tok_detect_chat(df_tokenizer *t)
{
    free(t->default_system);
    t->default_system = NULL;
    const char *s = t->chat_template;
    if (!s || strstr(s, "<|im_start|>")) {
        t->chat_family = DF_CHAT_CHATML;
        if (s) /* NULL when the template only renders a given system message */
            t->default_system = extract_default_system(s);
    } else if (strstr(s, "<|start_header_id|>")) {
        t->chat_family = DF_CHAT_LLAMA3;
    } else {
        t->chat_family = DF_CHAT_UNKNOWN;
    }
    return 0;
}

int df_tokenizer_set_chat_template(df_tokenizer *t, const char *tmpl)
{
    char *copy = NULL;
    if (tmpl && !(copy = strdup(tmpl)))
        return df_error(DF_ENOMEM, "tokenizer: out of memory");
    free(t->chat_template);
    t->chat_template = copy;
    return tok_detect_chat(t);
}

df_chat_family df_tokenizer_chat_family(const df_tokenizer *t) { return t->chat_family; }

const char *df_tokenizer_default_system(const df_tokenizer *t) { return t->default_system; }

/* Jinja's `| trim` (Python str.strip() on ASCII whitespace), used by Llama-3 templates. */
static void put_trimmed(sbuf *b, const char *s)
{
    const char *e = s + strlen(s);
    while (s < e && strchr(" \t\n\r\v\f", *s))
        s++;
    while (e > s && strchr(" \t\n\r\v\f", e[-1]))
        e--;
    put(b, s, e - s);
}

int df_tokenizer_apply_chat_template(const df_tokenizer *t, const df_chat_message *msgs, int n,
                                     bool add_generation_prompt, char **text)
{
    *text = NULL;
    if (n < 0 || (n > 0 && !msgs))
        return df_error(DF_EINVAL, "chat template: bad message list (n = %d)", n);
    for (int i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content)
            return df_error(DF_EINVAL, "chat template: message %d has a NULL %s", i,
                            msgs[i].role ? "content" : "role");
    if (t->chat_family == DF_CHAT_UNKNOWN)
        return df_error(DF_EUNSUPPORTED, "chat template: the tokenizer's template is neither ChatML "
                        "(<|im_start|>) nor Llama-3 (<|start_header_id|>)");
    sbuf b = {0};
    puts_(&b, "");
    if (t->chat_family == DF_CHAT_LLAMA3) {
        puts_(&b, "<|begin_of_text|>");
        for (int i = 0; i < n; i++) {
            puts_(&b, "<|start_header_id|>");
            puts_(&b, msgs[i].role);
            puts_(&b, "<|end_header_id|>\n\n");
            put_trimmed(&b, msgs[i].content);
            puts_(&b, "<|eot_id|>");
        }
        if (add_generation_prompt)
            puts_(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    } else {
        if (t->default_system && (n == 0 || strcmp(msgs[0].role, "system") != 0)) {
            puts_(&b, "<|im_start|>system\n");
            puts_(&b, t->default_system);
            puts_(&b, "<|im_end|>\n");
        }
        for (int i = 0; i < n; i++) {
            puts_(&b, "<|im_start|>");
            puts_(&b, msgs[i].role);
            puts_(&b, "\n");
            puts_(&b, msgs[i].content);
            puts_(&b, "<|im_end|>\n");
        }
        if (add_generation_prompt)
            puts_(&b, "<|im_start|>assistant\n");
    }
    if (b.oom) {
        free(b.p);
        return df_error(DF_ENOMEM, "chat template: out of memory");
    }
    *text = b.p;
    return 0;
}
