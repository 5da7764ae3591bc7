#include "model/runtime/runtime_internal.h"

const specd_model *specd_context_model(const specd_context *ctx) {
    return ctx->model;
}

int32_t specd_context_n_batch(const specd_context *ctx) {
    return ctx->p.n_batch;
}
