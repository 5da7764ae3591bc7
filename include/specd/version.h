/* Library version, for the build-time check (macros) and the run-time one (function). */
#ifndef SPECD_VERSION_H
#define SPECD_VERSION_H

#include "specd/api.h"

#define SPECD_VERSION_MAJOR 0
#define SPECD_VERSION_MINOR 1
#define SPECD_VERSION_PATCH 0
#define SPECD_VERSION_STRING "0.1.0"

#ifdef __cplusplus
extern "C" {
#endif

/* "MAJOR.MINOR.PATCH" of the library actually linked; static storage. */
SPECD_API const char *specd_version(void);

#ifdef __cplusplus
}
#endif
#endif
