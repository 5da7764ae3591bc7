/* Trained artifacts (draft heads, LoRA adapters) matched to the target they were trained over.
 *
 * Each shipped artifact carries a record of its target (`target.json` inside an adapter
 * directory, `<file>.target.json` beside a file) holding the target fingerprint: a hash of what
 * makes a model that model whatever its quantization (the tokenizer fingerprint, the
 * architecture and shape, and the bytes of every norm weight, which GGUF keeps in F32 at every
 * quantization). A policy option row that names an artifact (specd_policy_option.artifact) gets
 * it by default only when the record matches the loaded target, wherever the model's file lies;
 * a row flagged SPECD_OPTION_ARTIFACT_NEEDED without one refuses, naming the option.
 *
 * The public entry points (specd_policy_target_fingerprint, specd_policy_default_options) are
 * declared in specd/policy.h: the CLI, the batch loop (so specd serve) and hosts all call them. */
#ifndef SPECD_POLICY_ARTIFACTS_H
#define SPECD_POLICY_ARTIFACTS_H

#include <stddef.h>
#include <stdint.h>

#include "specd/gguf.h"
#include "specd/policy.h"
#include "specd/status.h"

/* The target fingerprint of an open GGUF (see above). */
specd_status specd_target_fingerprint_of_gguf(const specd_gguf *gguf, uint64_t *out,
                                              specd_error *err);

/* The fingerprint an artifact's record names (*out), from `target.json` in a directory or
 * `<path>.target.json` beside a file. SPECD_E_IO when there is no record, SPECD_E_FORMAT when
 * it is not one. */
specd_status specd_artifact_target(const char *artifact, uint64_t *out, specd_error *err);

/* Where the artifact `rel` ("adapters/NAME", "mrp/NAME") for target `fp` is: $env_var when set
 * (the operator's choice, taken as named; NULL when unusable), else the first usable copy whose
 * record matches fp among the installed one (<prefix>/share/specd/<rel>, beside the running
 * program) and the source tree's (artifacts/<rel>). Writes the path to buf; NULL when none. */
const char *specd_artifact_find(const char *rel, const char *env_var, uint64_t fp, char *buf,
                                size_t cap);

#endif
