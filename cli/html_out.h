/* Writing HTML text to a FILE: markup characters escaped, and everything an HTML parser reports
 * as an input-stream error (bytes that are not valid UTF-8, control characters other than
 * whitespace, noncharacters) written as U+FFFD, so any token text gives a valid page. */
#ifndef SPECD_CLI_HTML_OUT_H
#define SPECD_CLI_HTML_OUT_H

#include <stddef.h>
#include <stdio.h>

void html_text(FILE *f, const char *s, size_t len);
/* A two-cell table row: a header cell with name, a data cell with value (NULL shows "-"). */
void html_row_text(FILE *f, const char *name, const char *value);
/* The same with a number shown with decimals digits after the point (< 0: printf's %g). */
void html_row_number(FILE *f, const char *name, double value, int decimals);

/* The pages' shared CSS, for a <style> element. */
extern const char html_page_style[];

#endif
