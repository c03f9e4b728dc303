/* distflow tokenize --tokenizer DIR [--chat] [--messages FILE] [--tools FILE] [--extra JSON] [--render]
 * [TEXT] */
#include "cli/cli.h"

#include "distflow/tokenizer.h"
#include "util/fsutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *USAGE =
    "--tokenizer DIR [--chat] [--special] TEXT\n"
    "       distflow tokenize --tokenizer DIR --messages FILE [--tools FILE] [--extra JSON]\n"
    "                         [--no-generation-prompt] [--render]\n\n"
    "Print the token ids of TEXT as a JSON array. With --chat, TEXT is a user message rendered\n"
    "through the tokenizer's chat template (with the assistant generation prompt), as verl\n"
    "prepares RL prompts. With --messages, a whole conversation (a JSON array of messages:\n"
    "role, content, tool_calls, ...; '-' reads stdin) is rendered, with the OpenAI function\n"
    "schemas of --tools (a JSON array) and the template variables of --extra (a JSON object,\n"
    "e.g. '{\"enable_thinking\": false}'). --render prints the rendered text instead of ids:\n"
    "exactly what the model is fed (docs/chat_templates.md).";

/* The text to encode: TEXT, TEXT as a user message, or the --messages conversation. */
static int render(const df_tokenizer *tok, bool chat, const char *text, const char *messages,
                  const char *tools, const char *extra, bool gen_prompt, char **out)
{
    if (!messages && !chat) {
        *out = strdup(text);
        return *out ? 0 : df_error(DF_ENOMEM, "out of memory");
    }
    if (!messages) {
        df_chat_message msg = {.role = "user", .content = text};
        return df_tokenizer_apply_chat_template(tok, &msg, 1, gen_prompt, out);
    }
    char *msgs = NULL, *tl = NULL;
    int rc = df_cli_read_arg(messages, "messages", &msgs);
    if (!rc && tools)
        rc = df_cli_read_arg(tools, "tools", &tl);
    if (!rc)
        rc = df_tokenizer_apply_chat_template_json(tok, msgs, tl, gen_prompt, extra, out);
    free(msgs);
    free(tl);
    return rc;
}

int df_cmd_tokenize(int argc, char **argv)
{
    const char *dir = NULL, *messages = NULL, *tools = NULL, *extra = NULL;
    bool chat = false, special = false, no_gen = false, show = false;
    df_opt opts[] = {
        {"tokenizer", DF_OPT_PATH, &dir, "tokenizer directory or tokenizer.json (required)", false},
        {"chat", DF_OPT_FLAG, &chat, "apply the chat template to TEXT as a user message", false},
        {"messages", DF_OPT_PATH, &messages, "a JSON array of messages to render instead of TEXT ('-': stdin)",
         false},
        {"tools", DF_OPT_PATH, &tools, "with --messages: a JSON array of tool (function) schemas", false},
        {"extra", DF_OPT_STR, &extra, "with --messages: a JSON object of extra template variables", false},
        {"no-generation-prompt", DF_OPT_FLAG, &no_gen, "with --chat or --messages: do not append the assistant "
         "generation prompt", false},
        {"render", DF_OPT_FLAG, &show, "print the rendered text instead of token ids", false},
        {"special", DF_OPT_FLAG, &special, "add the tokenizer's special tokens (e.g. Llama-3 BOS)", false},
        {0}};
    char *pos[1];
    int n_pos, code;
    if (df_cli_parse("tokenize", USAGE, opts, argc, argv, pos, 1, &n_pos, &code))
        return code;
    if ((code = df_cli_require("tokenize", opts)))
        return code;
    if (n_pos != (messages ? 0 : 1)) {
        fprintf(stderr, "distflow tokenize: error: expected %s (see --help)\n",
                messages ? "no TEXT with --messages" : "one TEXT argument");
        return 2;
    }
    if ((tools || extra) && !messages) {
        fprintf(stderr, "distflow tokenize: error: --tools and --extra need --messages\n");
        return 2;
    }
    if (chat && messages) { /* --chat renders TEXT, which --messages replaces */
        fprintf(stderr, "distflow tokenize: error: --chat renders TEXT as a user message and --messages a "
                        "conversation: give one of them\n");
        return 2;
    }
    if (no_gen && !chat && !messages) {
        fprintf(stderr, "distflow tokenize: error: --no-generation-prompt needs a chat rendering (--chat or "
                        "--messages): plain TEXT has no generation prompt\n");
        return 2;
    }
    df_tokenizer *tok;
    if (df_tokenizer_load(dir, &tok))
        return df_cli_fail("tokenize");
    char *text = NULL;
    int rc = render(tok, chat, n_pos ? pos[0] : NULL, messages, tools, extra, !no_gen, &text);
    int32_t *ids = NULL;
    int64_t n = 0;
    if (!rc && show)
        fputs(text, stdout);
    else if (!rc)
        rc = df_tokenizer_encode(tok, text, special, &ids, &n);
    if (!rc && !show) {
        putchar('[');
        for (int64_t i = 0; i < n; i++)
            printf(i ? ", %d" : "%d", ids[i]);
        printf("]\n");
    }
    free(ids);
    free(text);
    df_tokenizer_free(tok);
    return rc ? df_cli_fail("tokenize") : 0;
}
