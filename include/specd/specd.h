/* specd: speculative-decoding coprocessor. Umbrella header for the public C API.
 *
 * Conventions (CONTRIBUTING.md):
 *  - names are specd_<class>_<action>; objects are opaque handles made by specd_<class>_create()
 *    and released by specd_<class>_destroy(), which accepts NULL;
 *  - fallible calls return specd_status and fill an optional specd_error (status.h);
 *  - headers say who owns what: "caller owns" results must be released by the caller with the
 *    named destroy/free call; "borrowed" pointers stay valid as long as the stated owner lives.
 */
#ifndef SPECD_SPECD_H
#define SPECD_SPECD_H

#include "specd/status.h"
#include "specd/log.h"
#include "specd/version.h"
#include "specd/sampling.h"
#include "specd/accept.h"

#endif
