/* Which backend runs a device (backend.h): the one place that knows them all. */
#include "model/runtime/backend.h"

const rt_backend *rt_backend_for(int32_t device) {
    return device == SPECD_DEVICE_CUDA ? &rt_backend_cuda : &rt_backend_cpu;
}
