/*
 * Fuzz target: a model turn through df_tool_calls_parse (src/agent/tool_parser.c), the hermes
 * `<tool_call>{json}</tool_call>` parser, with two known tool names and at most 3 calls.
 * Properties: the parser accepts every text (a malformed block is a call with an error, never a
 * failure), keeps at most 3 calls, each with either a known name and arguments that are a JSON
 * object, or an error for the model starting with verl's "Error when executing tool: "; the
 * content is no longer than the text. So every seed is ok-*.
 */
#include "fuzz.h"

#include "distflow/agent.h"
#include "distflow/common.h"

#include <jansson.h>

int df_fuzz_status;

static const char *const k_names[] = {"calculator", "calc_gsm8k_reward"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    df_clear_error();
    char *text = df_fuzz_cstr(data, size);
    df_tool_calls c;
    df_fuzz_status = df_tool_calls_parse(text, k_names, 2, 3, &c);
    if (!df_fuzz_status) {
        DF_FUZZ_CHECK(c.n_calls <= 3 && c.n_dropped >= 0 && c.content && strlen(c.content) <= strlen(text));
        for (int i = 0; i < c.n_calls; i++) {
            const df_tool_call *k = &c.calls[i];
            if (k->error) {
                DF_FUZZ_CHECK(!k->name && !k->arguments &&
                              !strncmp(k->error, "Error when executing tool: ", 27));
                continue;
            }
            DF_FUZZ_CHECK(k->name && k->arguments);
            DF_FUZZ_CHECK(!strcmp(k->name, k_names[0]) || !strcmp(k->name, k_names[1]));
            json_t *a = json_loads(k->arguments, 0, NULL);
            DF_FUZZ_CHECK(json_is_object(a));
            json_decref(a);
        }
        df_tool_calls_clear(&c);
    }
    free(text);
    return 0;
}
