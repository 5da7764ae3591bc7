/* The device verify driver (verifier/device/device_verify.h). */
#include "verifier/device/device_verify.h"

#include <stddef.h>

#include "common/alloc.h"
#include "common/status_internal.h"
#include "kernels/cuda/cuda_kernels.h"

struct specd_verify_device {
    const specd_cuda_kernels *k;
    const specd_cudart *rt;
    int device;      /* < 0: the caller's current device */
    int32_t cap_seqs; /* sequences the buffers below hold */
    void *out;       /* device: cap_seqs specd_cuda_verify_out */
    void *scratch;   /* device: specd_cuda_verify_scratch_bytes(cap_seqs) */
};

static void free_buffers(specd_verify_device *d) {
    if (d->rt) {
        if (d->device >= 0) d->rt->set_device(d->device);
        if (d->out) d->rt->free(d->out);
        if (d->scratch) d->rt->free(d->scratch);
    }
    d->out = d->scratch = NULL;
    d->cap_seqs = 0;
}

void specd_verify_device_close(specd_verify_device *d) {
    if (!d) return;
    free_buffers(d);
    specd_free(d);
}

/* Buffers for n sequences: SPECD_CUDA_SUCCESS or the runtime's code (nothing held then). */
static int grow(specd_verify_device *d, int32_t n) {
    if (n <= d->cap_seqs) return SPECD_CUDA_SUCCESS;
    free_buffers(d);
    size_t sb = specd_cuda_verify_scratch_bytes(n);
    if (!sb) return SPECD_CUDA_E_ARGUMENT;
    int rc = d->device >= 0 ? d->rt->set_device(d->device) : SPECD_CUDA_SUCCESS;
    if (rc == SPECD_CUDA_SUCCESS)
        rc = d->rt->malloc(&d->out, (size_t)n * sizeof(specd_cuda_verify_out));
    if (rc == SPECD_CUDA_SUCCESS) rc = d->rt->malloc(&d->scratch, sb);
    if (rc != SPECD_CUDA_SUCCESS) {
        (void)d->rt->get_last_error();
        free_buffers(d);
        return rc;
    }
    d->cap_seqs = n;
    return SPECD_CUDA_SUCCESS;
}

int specd_verify_device_reserve(specd_verify_device *d, int32_t n) {
    return grow(d, n) == SPECD_CUDA_SUCCESS;
}

specd_status specd_verify_device_open(int device, int32_t cap_seqs, specd_verify_device **out,
                                      specd_error *err) {
    specd_verify_device *d = specd_alloc_array(1, sizeof *d);
    if (!d) return specd_fail(err, SPECD_E_NOMEM, "device verify: out of memory");
    d->device = device;
    specd_error e;
    specd_status st = SPECD_OK;
    int n = 0;
    if (!(d->k = specd_cuda_kernels_get(&e)))
        st = specd_fail(err, SPECD_E_UNSUPPORTED, "%s", e.message);
    else if (d->k->struct_size < offsetof(specd_cuda_kernels, verify) + sizeof d->k->verify ||
             !d->k->verify)
        st = specd_fail(err, SPECD_E_UNSUPPORTED, "the kernel library predates the verify kernel");
    else if (!(d->rt = specd_cudart_get(&e)))
        st = specd_fail(err, SPECD_E_UNSUPPORTED, "%s", e.message);
    else if (device >= 0 && (n = specd_cuda_device_count()) <= device)
        st = specd_fail(err, SPECD_E_UNSUPPORTED, "%d CUDA device(s) found", n);
    if (st == SPECD_OK) {
        int rc = grow(d, cap_seqs);
        if (rc != SPECD_CUDA_SUCCESS)
            st = specd_fail(err, SPECD_E_IO, "no device memory for its buffers: %s",
                            d->rt->get_error_string(rc));
    }
    if (st != SPECD_OK) {
        specd_verify_device_close(d);
        return st;
    }
    *out = d;
    return SPECD_OK;
}

const specd_cudart *specd_verify_device_runtime(const specd_verify_device *d) { return d->rt; }

int specd_verify_device_run(specd_verify_device *d, specd_cuda_verify_args *a,
                            specd_cuda_verify_out *host_out) {
    int rc = grow(d, a->n_seqs);
    if (rc != SPECD_CUDA_SUCCESS) return rc;
    a->out = d->out;
    a->scratch = d->scratch;
    a->scratch_bytes = specd_cuda_verify_scratch_bytes(d->cap_seqs);
    /* the legacy default stream: the one a CUDA IPC buffer was made to wait on its owner's
     * event, and the one the host's copies ran on */
    rc = d->k->verify(a, NULL);
    if (rc == SPECD_CUDA_OK)
        rc = d->rt->memcpy(host_out, d->out, (size_t)a->n_seqs * sizeof *host_out,
                           SPECD_CUDA_MEMCPY_DEVICE_TO_HOST);
    if (rc != SPECD_CUDA_OK && rc != SPECD_CUDA_E_ARGUMENT) (void)d->rt->get_last_error();
    return rc;
}

const char *specd_verify_device_refusal(const specd_verify_device *d) {
    return d->k->last_refusal ? d->k->last_refusal() : "refused by the kernel";
}

const char *specd_verify_device_error_string(const specd_verify_device *d, int rc) {
    return d->rt->get_error_string(rc);
}
