#include "cli/svg_chart.h"
#include "cli/html_out.h"

#include <math.h>
#include <string.h>

/* Layout in SVG user units. */
enum { BAR_PITCH = 44, BAR_WIDTH = 30, LEFT = 16, TOP = 24, PLOT_HEIGHT = 160, BOTTOM = 28 };

static int drawable(double x) { return isfinite(x) && x >= 0; }

static void bar_chart(FILE *f, const char *title, const char *label_prefix,
                      const char *const *labels, const double *v, int n, double reference,
                      int decimals, const char *suffix) {
    double top = reference > 0 ? reference : 0;
    for (int i = 0; i < n; i++)
        if (drawable(v[i]) && v[i] > top) top = v[i];
    if (top <= 0) top = 1;
    top *= 1.15; /* room for the value labels above the tallest bar */
    int width = LEFT * 2 + (n > 6 ? n : 6) * BAR_PITCH;
    int height = TOP + PLOT_HEIGHT + BOTTOM;
    int base = TOP + PLOT_HEIGHT;
    fputs("<figure>\n<svg xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" aria-label=\"", f);
    html_text(f, title, strlen(title));
    fprintf(f, "\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-size=\"11\" "
               "font-family=\"sans-serif\">\n",
            width, height, width, height);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#57606a\"/>\n", LEFT, base,
            width - LEFT, base);
    for (int i = 0; i < n; i++) {
        int x = LEFT + i * BAR_PITCH + (BAR_PITCH - BAR_WIDTH) / 2;
        int cx = x + BAR_WIDTH / 2;
        if (drawable(v[i])) {
            double h = v[i] / top * PLOT_HEIGHT;
            fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" fill=\"#0969da\"/>"
                       "\n<text x=\"%d\" y=\"%.1f\" text-anchor=\"middle\">%.*f",
                    x, base - h, BAR_WIDTH, h, cx, base - h - 4, decimals, v[i]);
            html_text(f, suffix, strlen(suffix));
            fputs("</text>\n", f);
        } else {
            fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">-</text>\n", cx, base - 4);
        }
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">", cx, base + 16);
        if (labels) {
            html_text(f, labels[i], strlen(labels[i]));
            fputs("</text>\n", f);
        } else {
            html_text(f, label_prefix, strlen(label_prefix));
            fprintf(f, "%d</text>\n", i + 1);
        }
    }
    if (reference >= 0) {
        double y = base - reference / top * PLOT_HEIGHT;
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#a40e26\" "
                   "stroke-dasharray=\"4 3\"/>\n",
                LEFT, y, width - LEFT, y);
    }
    fputs("</svg>\n<figcaption>", f);
    html_text(f, title, strlen(title));
    fputs("</figcaption>\n</figure>\n", f);
}

void svg_bar_chart(FILE *f, const char *title, const char *label_prefix, const double *v, int n,
                   double reference, int decimals, const char *suffix) {
    bar_chart(f, title, label_prefix, NULL, v, n, reference, decimals, suffix);
}

void svg_bar_chart_named(FILE *f, const char *title, const char *const *labels, const double *v,
                         int n, double reference, int decimals, const char *suffix) {
    bar_chart(f, title, "", labels, v, n, reference, decimals, suffix);
}
