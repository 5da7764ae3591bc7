/* Which CUDA device, if any, this process can use. Callable from C; compiled by nvcc. */
#ifndef SPECD_KERNELS_CUDA_DEVICE_H
#define SPECD_KERNELS_CUDA_DEVICE_H

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices; 0 when there is no driver or no device (never an error). */
int specd_cuda_device_count(void);

/* Copies n floats host -> device -> host through a kernel that scales by 2 (a smoke test that
 * the toolkit, driver and our arch flags agree). Returns 0 on success, else a cudaError_t. */
int specd_cuda_scale_roundtrip(const float *in, float *out, int n);

#ifdef __cplusplus
}
#endif
#endif
