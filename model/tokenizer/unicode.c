#include "model/tokenizer/unicode.h"

uint8_t specd_unicode_class_slow(uint32_t unit) {
    if (unit >= 0x110000u) return 0; /* bad bytes: classed like U+FFFD (So) */
    size_t lo = 0, hi = specd_unicode_n_ranges;
    while (hi - lo > 1) { /* last range whose start <= unit */
        size_t mid = lo + (hi - lo) / 2;
        if (specd_unicode_range_start[mid] <= unit)
            lo = mid;
        else
            hi = mid;
    }
    return specd_unicode_range_class[lo];
}

void specd_unicode_fill_bmp(uint8_t *table) {
    size_t r = 0;
    for (uint32_t cp = 0; cp < 0x10000u; cp++) {
        while (r + 1 < specd_unicode_n_ranges && specd_unicode_range_start[r + 1] <= cp) r++;
        table[cp] = specd_unicode_range_class[r];
    }
}

static int is_cont(uint8_t b) { return (b & 0xC0u) == 0x80u; }

size_t specd_utf8_decode(const uint8_t *text, size_t len, int exact, uint32_t *units) {
    size_t n = 0, i = 0;
    while (i < len) {
        uint8_t b0 = text[i];
        if (b0 < 0x80u) {
            units[n++] = b0;
            i++;
            continue;
        }
        /* Sequence length from the lead byte, the way llama.cpp reads it: 10xxxxxx and
         * 11111xxx start nothing; the continuation bytes must all be inside the text. */
        size_t k = 0;
        uint32_t cp = 0;
        if ((b0 & 0x40u) == 0)
            k = 0;
        else if ((b0 & 0x20u) == 0)
            k = 2, cp = b0 & 0x1Fu;
        else if ((b0 & 0x10u) == 0)
            k = 3, cp = b0 & 0x0Fu;
        else if ((b0 & 0x08u) == 0)
            k = 4, cp = b0 & 0x07u;
        int ok = k != 0 && k <= len - i;
        for (size_t j = 1; ok && j < k; j++) {
            if (!is_cont(text[i + j]))
                ok = 0;
            else
                cp = (cp << 6) | (text[i + j] & 0x3Fu);
        }
        if (ok && cp > 0x10FFFFu) ok = 0;
        if (ok && exact) {
            /* Overlong forms would re-encode to fewer bytes than they came in. */
            size_t want = cp < 0x80u ? 1 : cp < 0x800u ? 2 : cp < 0x10000u ? 3 : 4;
            if (want != k) ok = 0;
        }
        if (ok) {
            units[n++] = cp;
            i += k;
        } else {
            units[n++] = SPECD_UNIT_BAD | b0;
            i++;
        }
    }
    return n;
}
