/* The model fingerprint peers compare in Hello, computed from the tokenizer itself (never typed):
 * the vocabulary size and an FNV-1a hash over every token's rendered text, in id order, with a
 * separator, plus the BOS/EOS ids. Two tokenizers that map any id to different text differ. */
#ifndef SPECD_IPC_FINGERPRINT_H
#define SPECD_IPC_FINGERPRINT_H

#include "specd/ipc.h"
#include "specd/tokenizer.h"

specd_status specd_ipc_fingerprint_of_tokenizer(const specd_tokenizer *tok,
                                                specd_ipc_fingerprint *out, specd_error *err);
/* Reads only the GGUF's tokenizer (no weights are loaded). */
specd_status specd_ipc_fingerprint_of_model(const char *gguf_path, specd_ipc_fingerprint *out,
                                            specd_error *err);

#endif
