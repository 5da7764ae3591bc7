/* Prompt lookup (lookup.h). */
#include "policy/ar/lookup.h"

/* Latest start j < n_history - n of an earlier copy of the last n tokens, or -1. */
static int64_t find_latest(const int32_t *h, int64_t n_history, int32_t n) {
    const int32_t *suffix = h + n_history - n;
    for (int64_t j = n_history - n - 1; j >= 0; j--) {
        int32_t m = 0;
        while (m < n && h[j + m] == suffix[m]) m++;
        if (m == n) return j;
    }
    return -1;
}

int32_t specd_lookup_continuation(const int32_t *h, int64_t n_history, int32_t n_max,
                                  int32_t n_min, int32_t k, int32_t *out) {
    for (int32_t n = n_max; n >= n_min && n >= 1; n--) {
        if (n_history <= n) continue;
        const int64_t j = find_latest(h, n_history, n);
        if (j < 0) continue;
        int32_t m = 0;
        for (int64_t from = j + n; m < k && from + m < n_history; m++) out[m] = h[from + m];
        return m;
    }
    return 0;
}
