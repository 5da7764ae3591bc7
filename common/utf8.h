/* UTF-8 validation shared by the writers of JSON and HTML, which must never emit invalid text
 * (token pieces can split a multi-byte character). */
#ifndef SPECD_COMMON_UTF8_H
#define SPECD_COMMON_UTF8_H

#include <stddef.h>

/* Length of the valid UTF-8 sequence at p (n > 0 bytes left), or 0 when it is not valid
 * (truncated, overlong, surrogate or beyond U+10FFFF). */
size_t utf8_valid_len(const unsigned char *p, size_t n);

#endif
