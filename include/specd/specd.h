/* specd: speculative-decoding coprocessor. Umbrella header for the public C API: includes every
 * public header.
 *
 * Conventions (CONTRIBUTING.md):
 *  - names are specd_<class>_<action>; objects are opaque handles made by specd_<class>_create()
 *    and released by specd_<class>_destroy(), which accepts NULL;
 *  - fallible calls return specd_status and fill an optional specd_error (status.h);
 *  - headers say who owns what: "caller owns" results must be released by the caller with the
 *    named destroy/free call; "borrowed" pointers stay valid as long as the stated owner lives;
 *  - the public API is what these headers declare with SPECD_API (api.h); a shared libspecd
 *    exports nothing else.
 */
#ifndef SPECD_SPECD_H
#define SPECD_SPECD_H

#include "specd/api.h"
#include "specd/status.h"
#include "specd/log.h"
#include "specd/version.h"
#include "specd/sampling.h"
#include "specd/accept.h"
#include "specd/gguf.h"
#include "specd/tokenizer.h"
#include "specd/grammar.h"
#include "specd/processor.h"
#include "specd/grammar_processor.h"
#include "specd/device.h"
#include "specd/runtime.h"
#include "specd/policy.h"
#include "specd/isd.h"
#include "specd/spec.h"
#include "specd/spec_batch.h"
#include "specd/spec_runtime.h"
#include "specd/spec_loop.h"
#include "specd/metrics.h"
#include "specd/ipc.h"

#endif
