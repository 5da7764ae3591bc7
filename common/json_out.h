/* Writing JSON values to a FILE: strings escaped per RFC 8259 with each byte that is not valid
 * UTF-8 written as U+FFFD (so the output is always valid JSON), non-finite numbers as null. */
#ifndef SPECD_COMMON_JSON_OUT_H
#define SPECD_COMMON_JSON_OUT_H

#include <stddef.h>
#include <stdio.h>

void json_string(FILE *f, const char *s, size_t len);
void json_number(FILE *f, double v);

#endif
