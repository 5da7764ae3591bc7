/* SPECD_API marks the public API: libspecd is built with hidden visibility, so a shared libspecd
 * exports exactly the functions declared with it (every one prefixed specd_), and nothing a
 * program links against can be an internal helper or a test hook. */
#ifndef SPECD_API_H
#define SPECD_API_H

#if defined(_WIN32)
#define SPECD_API
#elif defined(__GNUC__) || defined(__clang__)
#define SPECD_API __attribute__((visibility("default")))
#else
#define SPECD_API
#endif

#endif
