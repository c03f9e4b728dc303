/* A role's model.override_config as JSON for the model loader (model_overrides.h). */
#include "workers/common/model_overrides.h"

#include "distflow/common.h"
#include "distflow/config.h"

#include <stdlib.h>
#include <string.h>

int df_train_model_overrides(const df_train_config *t, bool critic, df_config_overrides *ov)
{
    const char *key = critic ? "critic.model.override_config" : "actor_rollout_ref.model.override_config";
    const char *text = critic ? t->critic.model.override_config : t->actor_rollout_ref.model.override_config;
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

void df_train_model_overrides_free(df_config_overrides *ov)
{
    free((char *)ov->json);
    ov->json = NULL;
}
