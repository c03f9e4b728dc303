/* A role's model.override_config as JSON for the model loader (model_overrides.h). */
#include "workers/common/model_overrides.h"

#include "distflow/common.h"
#include "distflow/config.h"

#include <stdlib.h>
#include <string.h>

/* The map text of setting `key` as overrides. */
static int from_map(const char *text, const char *key, df_config_overrides *ov)
{
    char *json = NULL;
    *ov = (df_config_overrides){.json = NULL, .who = key};
    int rc = df_config_map_json(text, &json);
    if (rc)
        return df_error_wrap(rc, "%s", key);
    if (json && !strcmp(json, "{}"))
        free(json), json = NULL;
    ov->json = json;
    return DF_OK;
}

int df_train_model_overrides(const df_train_config *t, bool critic, df_config_overrides *ov)
{
    return critic ? from_map(t->critic.model.override_config, "critic.model.override_config", ov)
                  : from_map(t->actor_rollout_ref.model.override_config, "actor_rollout_ref.model.override_config",
                             ov);
}

int df_config_model_overrides(const df_config *c, const char *key, df_config_overrides *ov)
{
    return from_map(c ? df_config_map_text(c, key) : NULL, key, ov);
}

void df_train_model_overrides_free(df_config_overrides *ov)
{
    free((char *)ov->json);
    ov->json = NULL;
}
