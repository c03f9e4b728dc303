/*
 * routes.h (internal) — the batch field routed_experts of router replay (docs/models.md, Router
 * replay) between a batch and its packed micro-batches (packing.h): per sample, one row of
 * df_model_route_width(cfg) expert indices for each of its prompt ++ response tokens, in the
 * order df_pack_responses packs them, so rows [s, e) of the batch are one contiguous run of the
 * packed micro-batch's [n_tokens, width] routes.
 */
#ifndef DF_ENGINE_ROUTES_H
#define DF_ENGINE_ROUTES_H

#include "distflow/batch.h"
#include "distflow/model.h"

/**
 * Point sb->routes_in at the routes of rows [s, e) of b (sb: their df_pack_responses batch).
 * Errors (DF_EINVAL, naming the field): no routed_experts column, or one of another kind, or a
 * row whose length is not its tokens times the route width.
 */
int df_routes_replay(const df_model_config *c, const df_batch *b, int64_t s, int64_t e, df_seq_batch *sb);

/** A record of a batch's routes being filled micro-batch by micro-batch. */
typedef struct df_routes_rec {
    int64_t *off;  /**< [n + 1] each row's first entry */
    int32_t *data; /**< [off[n]] */
} df_routes_rec;

/** A record sized for b's rows (their tokens times the route width), every entry -1. DF_ENOMEM. */
int df_routes_record_begin(const df_model_config *c, const df_batch *b, df_routes_rec *r);
/** Let the forward of rows [s, e) (packed into sb) write their routes into r. */
void df_routes_record_into(df_routes_rec *r, int64_t s, df_seq_batch *sb);
/** rc == DF_OK: store r as b's routed_experts column (replacing one); then free r. Returns rc, or
 *  the store's error. */
int df_routes_record_end(df_routes_rec *r, df_batch *b, int rc);

#endif /* DF_ENGINE_ROUTES_H */
