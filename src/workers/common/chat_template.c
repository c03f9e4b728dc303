/* A run's chat template from its config value (chat_template.h). */
#include "workers/common/chat_template.h"

#include "distflow/common.h"
#include "util/fsutil.h"

#include <stdlib.h>
#include <string.h>

int df_worker_chat_template(df_tokenizer *tok, const char *value, const char *key)
{
    if (!value)
        return DF_OK;
    if (strstr(value, "{{") || strstr(value, "{%"))
        return df_tokenizer_set_chat_template(tok, value);
    char *path = df_expand_user(value);
    int rc = path ? df_tokenizer_set_chat_template_file(tok, path) : df_error(DF_ENOMEM, "out of memory");
    free(path);
    return rc ? df_error_wrap(rc, "%s '%s' (neither template text nor a readable file)", key, value) : DF_OK;
}
