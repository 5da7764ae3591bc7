/* Where memory and work live: the host CPU or a CUDA device. Shared by the runtime (a context's
 * backend, specd_context_params.device) and the host API (where a logits block lives). */
#ifndef SPECD_DEVICE_H
#define SPECD_DEVICE_H

typedef enum specd_device {
    SPECD_DEVICE_HOST = 0, /* host memory; for a context, the CPU backend */
    SPECD_DEVICE_CPU = SPECD_DEVICE_HOST,
    SPECD_DEVICE_CUDA = 1 /* device memory of a CUDA device; for a context, the CUDA backend
                           * (a build without CUDA, or a machine without a device, answers
                           * SPECD_E_UNSUPPORTED with the reason) */
} specd_device;

#endif
