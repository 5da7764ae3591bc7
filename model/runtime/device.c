/* Naming the backend of a context (specd_device) and its numerics mode (specd_numerics), and
 * reading them from SPECD_DEVICE and SPECD_NUMERICS. */
#include "specd/runtime.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/status_internal.h"

specd_status specd_device_parse(const char *name, int32_t *out, int32_t *index, specd_error *err) {
    if (!name || !out) return specd_fail(err, SPECD_E_INVALID_ARG, "device: name or out is NULL");
    int32_t idx = 0;
    if (strcmp(name, "cpu") == 0) {
        *out = SPECD_DEVICE_CPU;
    } else if (strncmp(name, "cuda", 4) == 0 && (name[4] == '\0' || name[4] == ':')) {
        if (name[4] == ':') {
            char *end = NULL;
            errno = 0;
            long v = strtol(name + 5, &end, 10);
            if (name[5] == '\0' || *end != '\0' || errno || v < 0 || v > 1023)
                return specd_fail(err, SPECD_E_INVALID_ARG,
                                  "device '%s': the ordinal after cuda: must be 0..1023", name);
            idx = (int32_t)v;
        }
        *out = SPECD_DEVICE_CUDA;
    } else {
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "device '%s' is not one of cpu, cuda, cuda:N", name);
    }
    if (index) *index = idx;
    return SPECD_OK;
}

const char *specd_device_name(int32_t device) {
    return device == SPECD_DEVICE_CPU ? "cpu" : device == SPECD_DEVICE_CUDA ? "cuda" : "?";
}

specd_status specd_numerics_parse(const char *name, int32_t *out, specd_error *err) {
    if (!name || !out) return specd_fail(err, SPECD_E_INVALID_ARG, "numerics: name or out is NULL");
    if (strcmp(name, "fast") == 0)
        *out = SPECD_NUMERICS_FAST;
    else if (strcmp(name, "llama") == 0)
        *out = SPECD_NUMERICS_LLAMA;
    else
        return specd_fail(err, SPECD_E_INVALID_ARG, "numerics '%s' is not one of fast, llama",
                          name);
    return SPECD_OK;
}

const char *specd_numerics_name(int32_t numerics) {
    return numerics == SPECD_NUMERICS_FAST    ? "fast"
           : numerics == SPECD_NUMERICS_LLAMA ? "llama"
                                              : "?";
}

specd_context_params specd_context_default_params(void) {
    specd_context_params p = {.n_seq = 1,
                              .n_ctx = 2048,
                              .n_batch = 512,
                              .n_threads = 0,
                              .n_layers = 0,
                              .device = SPECD_DEVICE_CPU,
                              .device_index = 0,
                              .numerics = SPECD_NUMERICS_FAST};
    const char *env = getenv("SPECD_DEVICE");
    if (env && *env && specd_device_parse(env, &p.device, &p.device_index, NULL) != SPECD_OK)
        p.device = -1;
    env = getenv("SPECD_NUMERICS");
    if (env && *env && specd_numerics_parse(env, &p.numerics, NULL) != SPECD_OK) p.numerics = -1;
    return p;
}
