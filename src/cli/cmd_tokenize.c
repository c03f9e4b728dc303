/* distflow tokenize --tokenizer DIR [--chat] TEXT */
#include "cli/cli.h"

#include "distflow/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>

static const char *USAGE =
    "--tokenizer DIR [--chat] [--special] TEXT\n\n"
    "Print the token ids of TEXT as a JSON array. With --chat, TEXT is a user message rendered\n"
    "through the tokenizer's chat template (with the assistant generation prompt), as verl\n"
    "prepares RL prompts.";

int df_cmd_tokenize(int argc, char **argv)
{
    const char *dir = NULL;
    bool chat = false, special = false;
    df_opt opts[] = {
        {"tokenizer", DF_OPT_STR, &dir, "tokenizer directory or tokenizer.json (required)", false},
        {"chat", DF_OPT_FLAG, &chat, "apply the chat template to TEXT as a user message", false},
        {"special", DF_OPT_FLAG, &special, "add the tokenizer's special tokens (e.g. Llama-3 BOS)", false},
        {0}};
    char *pos[1];
    int n_pos, code;
    if (df_cli_parse("tokenize", USAGE, opts, argc, argv, pos, 1, &n_pos, &code))
        return code;
    if ((code = df_cli_require("tokenize", opts)))
        return code;
    if (n_pos != 1) {
        fprintf(stderr, "distflow tokenize: error: expected one TEXT argument (see --help)\n");
        return 2;
    }
    df_tokenizer *tok;
    if (df_tokenizer_load(dir, &tok))
        return df_cli_fail("tokenize");
    char *text = pos[0], *rendered = NULL;
    int rc = 0;
    if (chat) {
        df_chat_message msg = {.role = "user", .content = pos[0]};
        rc = df_tokenizer_apply_chat_template(tok, &msg, 1, true, &rendered);
        text = rendered;
    }
    int32_t *ids = NULL;
    int64_t n = 0;
    if (!rc)
        rc = df_tokenizer_encode(tok, text, special, &ids, &n);
    if (!rc) {
        putchar('[');
        for (int64_t i = 0; i < n; i++)
            printf(i ? ", %d" : "%d", ids[i]);
        printf("]\n");
    }
    free(ids);
    free(rendered);
    df_tokenizer_free(tok);
    return rc ? df_cli_fail("tokenize") : 0;
}
