/*
 * Chat templates as transformers applies them: the tokenizer's Jinja
 * `chat_template` rendered by the engine of src/jinja with the variables
 * apply_chat_template passes (messages, tools, add_generation_prompt, the
 * special tokens, extra keyword arguments: the tokenizer's own, as verl passes
 * data.apply_chat_template_kwargs to every call, then the call's). The template is parsed once, when
 * it is set; a template that does not parse is reported when it is used, as
 * transformers loads such a tokenizer and fails at apply time.
 */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>

void tok_chat_free(df_tokenizer *t)
{
    df_jinja_free(t->chat_jinja);
    t->chat_jinja = NULL;
    free(t->chat_error);
    t->chat_error = NULL;
}

int df_tokenizer_set_chat_template(df_tokenizer *t, const char *tmpl)
{
    char *copy = NULL;
    if (tmpl && !(copy = strdup(tmpl)))
        return df_error(DF_ENOMEM, "tokenizer: out of memory");
    df_jinja_template *parsed = NULL;
    char *err = NULL;
    if (copy && df_jinja_parse(copy, "chat_template", &parsed) != 0) {
        if (!(err = strdup(df_last_error()))) {
            free(copy);
            return df_error(DF_ENOMEM, "tokenizer: out of memory");
        }
        df_clear_error();
    }
    tok_chat_free(t);
    free(t->chat_template);
    t->chat_template = copy;
    t->chat_jinja = parsed;
    t->chat_error = err;
    return 0;
}

const char *df_tokenizer_chat_template(const df_tokenizer *t)
{
    return t->chat_template;
}

int df_tokenizer_set_chat_template_kwargs(df_tokenizer *t, const char *kwargs_json)
{
    json_t *kw = NULL;
    if (kwargs_json) {
        json_error_t e;
        kw = json_loads(kwargs_json, JSON_DECODE_ANY, &e);
        if (!kw)
            return df_error(DF_EINVAL, "chat template kwargs: JSON, line %d column %d: %s", e.line, e.column,
                            e.text);
        if (!json_is_object(kw)) {
            json_decref(kw);
            return df_error(DF_EINVAL, "chat template kwargs: must be a JSON object of template variables");
        }
        /* transformers' apply_chat_template takes these as its own arguments, not as template
           variables: passed through verl's **kwargs they clash or change the call, never the text */
        static const char *const own[] = {"messages",
                                          "conversation",
                                          "tools",
                                          "chat_template",
                                          "add_generation_prompt",
                                          "continue_final_message",
                                          "tokenize",
                                          "padding",
                                          "truncation",
                                          "max_length",
                                          "return_tensors",
                                          "return_dict",
                                          "return_assistant_tokens_mask",
                                          "tokenizer_kwargs"};
        for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
            if (json_object_get(kw, own[i])) {
                json_decref(kw);
                return df_error(DF_EINVAL,
                                "chat template kwargs: '%s' is an argument of "
                                "apply_chat_template, not a template variable",
                                own[i]);
            }
    }
    json_decref(t->chat_kwargs);
    t->chat_kwargs = kw && json_object_size(kw) ? kw : NULL;
    if (kw && !t->chat_kwargs)
        json_decref(kw);
    return DF_OK;
}

/* A special token's text into the context (transformers passes special_tokens_map). */
static int put_token(json_t *ctx, const df_tokenizer *t, const char *key, int32_t id)
{
    const char *s = id >= 0 ? df_tokenizer_id_to_token(t, id) : NULL;
    if (s && json_object_set_new(ctx, key, json_string(s)) != 0)
        return df_error(DF_ENOMEM, "chat template: out of memory");
    return 0;
}

/* Parse one optional JSON argument of the given type ("messages", "tools", "extra"). */
static int load_arg(const char *text, const char *what, json_type want, json_t **out)
{
    *out = NULL;
    if (!text)
        return 0;
    json_error_t e;
    json_t *j = json_loads(text, JSON_DECODE_ANY, &e);
    if (!j)
        return df_error(DF_EINVAL, "chat template: %s JSON, line %d column %d: %s", what, e.line, e.column,
                        e.text);
    if (json_typeof(j) != want) {
        json_decref(j);
        return df_error(DF_EINVAL, "chat template: %s must be a JSON %s", what,
                        want == JSON_ARRAY ? "array" : "object");
    }
    *out = j;
    return 0;
}

static int check_messages(const json_t *msgs)
{
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m)
    {
        if (!json_is_object(m) || !json_is_string(json_object_get(m, "role")))
            return df_error(DF_EINVAL, "chat template: message %zu is not an object with a string \"role\"",
                            i);
    }
    return 0;
}

int df_tokenizer_apply_chat_template_json(const df_tokenizer *t, const char *messages_json,
                                          const char *tools_json, bool add_generation_prompt,
                                          const char *extra_json, char **text)
{
    *text = NULL;
    if (!t->chat_template)
        return df_error(DF_EINVAL,
                        "chat template: the tokenizer has no chat_template (tokenizer_config.json); "
                        "one is needed to render a conversation, as in transformers");
    if (!t->chat_jinja)
        return df_error(DF_EINVAL, "%s", t->chat_error ? t->chat_error : "chat template: does not parse");
    json_t *msgs = NULL, *tools = NULL, *extra = NULL, *ctx = NULL;
    int rc = load_arg(messages_json ? messages_json : "[]", "messages", JSON_ARRAY, &msgs);
    if (!rc)
        rc = check_messages(msgs);
    if (!rc)
        rc = load_arg(tools_json, "tools", JSON_ARRAY, &tools);
    if (!rc)
        rc = load_arg(extra_json, "extra arguments", JSON_OBJECT, &extra);
    if (!rc && !(ctx = json_object()))
        rc = df_error(DF_ENOMEM, "chat template: out of memory");
    if (!rc && (json_object_set(ctx, "messages", msgs) || (tools && json_object_set(ctx, "tools", tools)) ||
                json_object_set_new(ctx, "add_generation_prompt", json_boolean(add_generation_prompt))))
        rc = df_error(DF_ENOMEM, "chat template: out of memory");
    if (!rc)
        rc = put_token(ctx, t, "bos_token", t->bos_id);
    if (!rc)
        rc = put_token(ctx, t, "eos_token", df_tokenizer_eos_id(t));
    if (!rc)
        rc = put_token(ctx, t, "pad_token", t->pad_id);
    if (!rc && t->chat_kwargs && json_object_update(ctx, t->chat_kwargs) != 0)
        rc = df_error(DF_ENOMEM, "chat template: out of memory");
    if (!rc && extra && json_object_update(ctx, extra) != 0)
        rc = df_error(DF_ENOMEM, "chat template: out of memory");
    char *ctx_text = rc ? NULL : json_dumps(ctx, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!rc && !ctx_text)
        rc = df_error(DF_ENOMEM, "chat template: out of memory");
    if (!rc)
        rc = df_jinja_render(t->chat_jinja, ctx_text, NULL, text);
    free(ctx_text);
    json_decref(msgs);
    json_decref(tools);
    json_decref(extra);
    json_decref(ctx);
    return rc;
}

int df_tokenizer_apply_chat_template(const df_tokenizer *t, const df_chat_message *msgs, int n,
                                     bool add_generation_prompt, char **text)
{
    *text = NULL;
    if (n < 0 || (n > 0 && !msgs))
        return df_error(DF_EINVAL, "chat template: bad message list (n = %d)", n);
    json_t *arr = json_array();
    int rc = arr ? 0 : df_error(DF_ENOMEM, "chat template: out of memory");
    for (int i = 0; i < n && !rc; i++) {
        if (!msgs[i].role || !msgs[i].content)
            rc = df_error(DF_EINVAL, "chat template: message %d has a NULL %s", i,
                          msgs[i].role ? "content" : "role");
        else {
            json_t *m = json_pack("{s:s, s:s}", "role", msgs[i].role, "content", msgs[i].content);
            if (!m) /* jansson refuses invalid UTF-8 */
                rc = df_error(DF_EINVAL, "chat template: message %d is not valid UTF-8", i);
            else if (json_array_append_new(arr, m))
                rc = df_error(DF_ENOMEM, "chat template: out of memory");
        }
    }
    char *s = rc ? NULL : json_dumps(arr, JSON_COMPACT);
    if (!rc && !s)
        rc = df_error(DF_ENOMEM, "chat template: out of memory");
    if (!rc)
        rc = df_tokenizer_apply_chat_template_json(t, s, NULL, add_generation_prompt, NULL, text);
    free(s);
    json_decref(arr);
    return rc;
}
