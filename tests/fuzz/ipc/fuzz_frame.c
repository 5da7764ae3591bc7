/* Fuzz target for the frame decoder: random bytes and mutations of valid frames (seed corpus
 * tests/fuzz/corpus/fuzz_frame, written by `test_frame --write-seeds`). Whatever the input, the
 * decoder either refuses it with a status or returns an envelope that passes validation and
 * re-packs within the frame limit. */
#include <stdint.h>
#include <stdlib.h>

#include "common/alloc.h"
#include "ipc/frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* One decoder for the whole run, as a daemon keeps one: this also checks that a refused
     * frame leaves it usable. */
    static specd_ipc_decoder *dec;
    if (!dec && specd_ipc_decoder_create(1 << 16, &dec, NULL) != SPECD_OK) abort();
    const SpecdWire__Envelope *env = NULL;
    if (specd_ipc_frame_decode(dec, data, size, &env, NULL) == SPECD_OK) {
        uint8_t *again = NULL;
        size_t len = 0;
        /* Decoding the re-packed frame must succeed too (validation is stable). */
        if (specd_ipc_frame_encode(env, 1 << 20, &again, &len, NULL) != SPECD_OK) abort();
        specd_ipc_decoder *dec2 = NULL;
        if (specd_ipc_decoder_create(1 << 20, &dec2, NULL) != SPECD_OK) abort();
        const SpecdWire__Envelope *env2 = NULL;
        if (specd_ipc_frame_decode(dec2, again, len, &env2, NULL) != SPECD_OK) abort();
        if (env2->request_id != env->request_id || env2->body_case != env->body_case) abort();
        specd_ipc_decoder_destroy(dec2);
        specd_free(again);
    }
    return 0;
}
