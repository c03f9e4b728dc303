/*
 * Fuzz target: a Jinja template (a chat_template) through df_jinja_parse and
 * df_jinja_render with a chat-like context and tight limits. Properties: a
 * refusal always carries a message (a syntax error with its "name:line:col:"),
 * an accepted template renders or is refused with a message — never a crash,
 * a hang past the limits or an output over max_output — and rendering twice
 * gives the same text (no state survives a render). df_fuzz_status is the
 * parse status, so ok-* seeds must parse and bad-* seeds must not.
 */
#include "fuzz.h"

#include "distflow/common.h"
#include "distflow/jinja.h"

int df_fuzz_status;

static const char k_context[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
    " {\"role\": \"user\", \"content\": \"What is 6 * 7?\"},"
    " {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"type\": \"function\","
    " \"function\": {\"name\": \"calc\", \"arguments\": {\"expression\": \"6 * 7\"}}}]},"
    " {\"role\": \"tool\", \"content\": \"42\"}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"calc\"}}],"
    " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    df_clear_error();
    char *src = df_fuzz_cstr(data, size);
    df_jinja_template *t = NULL;
    df_fuzz_status = df_jinja_parse(src, "fuzz", &t);
    if (df_fuzz_status) {
        DF_FUZZ_CHECK(t == NULL && strncmp(df_last_error(), "fuzz", 4) == 0);
        free(src);
        return 0;
    }
    df_jinja_options o = {.max_output = 1 << 16, .max_depth = 40, .max_memory = 64 << 20, .now = 1721995200};
    char *a = NULL, *b = NULL;
    int ra = df_jinja_render(t, k_context, &o, &a);
    int rb = df_jinja_render(t, k_context, &o, &b);
    DF_FUZZ_CHECK(ra == rb);
    if (ra == DF_OK) {
        DF_FUZZ_CHECK(a && b && strcmp(a, b) == 0 && strlen(a) <= (size_t)o.max_output);
    } else {
        DF_FUZZ_CHECK(!a && !b && *df_last_error());
    }
    free(a);
    free(b);
    df_jinja_free(t);
    free(src);
    return 0;
}
