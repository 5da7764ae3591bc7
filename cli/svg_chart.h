/* A bar chart as an inline SVG figure, so a report page needs no script or external file. */
#ifndef SPECD_CLI_SVG_CHART_H
#define SPECD_CLI_SVG_CHART_H

#include <stdio.h>

/* Writes <figure> with one bar per value v[0..n), labelled label_prefix + (i + 1) below and with
 * its value (decimals digits, then suffix) above; a dashed line marks reference when it is >= 0.
 * Values that are not finite or are negative draw as empty bars labelled "-". */
void svg_bar_chart(FILE *f, const char *title, const char *label_prefix, const double *v, int n,
                   double reference, int decimals, const char *suffix);

/* The same with bar i labelled labels[i] (short: a bar is 44 units wide). */
void svg_bar_chart_named(FILE *f, const char *title, const char *const *labels, const double *v,
                         int n, double reference, int decimals, const char *suffix);

#endif
