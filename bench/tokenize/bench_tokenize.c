/* Tokenizer throughput: MB/s encoding a text file (plain text: no special parsing, no BOS), best
 * of several runs, single thread. bench/tokenize/run measures llama.cpp's tokenizer on the same
 * file in the same run and prints the ratio; it also passes llama.cpp's ids for the whole text so
 * this program checks they are identical.
 *
 *   bench_tokenize --make-text FILE MB        writes the mixed benchmark text (deterministic)
 *   bench_tokenize MODEL TEXT [IDS] [RUNS]    encodes TEXT; IDS = int32 ids to compare against */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "specd/gguf.h"
#include "specd/tokenizer.h"
#include "tests/tokenizer/golden.h" /* golden_read_file */

static const char *const parts[] = {
    "The quick brown fox jumps over the lazy dog. ",
    "Speculative decoding drafts several tokens and verifies them in one forward pass.\n",
    "It's a well-known result, isn't it? They'll say we've done it; I'd agree.\n",
    "In 2024, the model processed 1,234,567 tokens at 98.6% accuracy for $0.0042 each.\n",
    "def tokenize(text):\n    ids = []\n    for word in text.split():\n        ids.append(vocab[word])\n    return ids\n\n",
    "int main(int argc, char **argv) {\n\tfor (int i = 0; i < argc; i++) printf(\"%s\\n\", argv[i]);\n\treturn 0;\n}\n",
    "    \n\n        ",
    "\t\t\t",
    "{\"id\": 42, \"name\": \"specd\", \"tags\": [\"bpe\", \"llm\"], \"ok\": true}\n",
    "\xe4\xbd\xa0\xe5\xa5\xbd\xef\xbc\x8c\xe4\xb8\x96\xe7\x95\x8c\xef\xbc\x81\xe4\xbb\x8a\xe5\xa4\xa9\xe5\xa4\xa9\xe6\xb0\x94\xe5\xbe\x88\xe5\xa5\xbd\xe3\x80\x82",
    "\xe3\x81\x93\xe3\x82\x93\xe3\x81\xab\xe3\x81\xa1\xe3\x81\xaf\xe3\x80\x81\xe4\xb8\x96\xe7\x95\x8c\xe3\x80\x82 ",
    "\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82, \xd0\xbc\xd0\xb8\xd1\x80! ",
    "Caf\xc3\xa9 na\xc3\xafve r\xc3\xa9sum\xc3\xa9 \xc3\xa0 la cr\xc3\xa8me. ",
    "\xf0\x9f\x98\x80\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd \xf0\x9f\x9a\x80 ",
    "https://example.com/path/to/page?query=value&other=123#section\n",
    "| col | value |\n|-----|-------|\n| a   | 1     |\n",
    "0123456789 3.14159265358979 -273.15 6.022e23\n",
};

static int make_text(const char *path, double mb) {
    FILE *f = fopen(path, "wb");
    if (!f) return 1;
    uint64_t s = 0x9E3779B97F4A7C15ull, total = 0, want = (uint64_t)(mb * 1e6);
    size_t n = sizeof parts / sizeof *parts;
    while (total < want) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        const char *p = parts[s % n];
        size_t len = strlen(p);
        fwrite(p, 1, len, f);
        total += len;
    }
    fclose(f);
    printf("wrote %s: %.2f MB\n", path, (double)total / 1e6);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "--make-text") == 0) return make_text(argv[2], atof(argv[3]));
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL TEXT [IDS] [RUNS] | --make-text FILE MB\n", argv[0]);
        return 2;
    }
    int runs = argc > 4 ? atoi(argv[4]) : 5;
    specd_error err;
    specd_gguf *g = NULL;
    specd_tokenizer *tok = NULL;
    if (specd_gguf_create(argv[1], &g, &err) != SPECD_OK ||
        specd_tokenizer_create_from_gguf(g, &tok, &err) != SPECD_OK) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    size_t len = 0;
    char *text = golden_read_file(argv[2], &len);
    if (!text) {
        fprintf(stderr, "cannot read %s\n", argv[2]);
        return 1;
    }
    size_t cap = len + 16, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    double best = 1e30;
    for (int r = 0; r < runs; r++) {
        uint64_t t0 = specd_now_ns();
        if (specd_tokenizer_encode(tok, text, len, 0, ids, cap, &n, &err) != SPECD_OK) {
            fprintf(stderr, "encode: %s\n", err.message);
            return 1;
        }
        double s = (double)(specd_now_ns() - t0) * 1e-9;
        if (s < best) best = s;
    }
    printf("specd: %.2f MB/s (%.2f MB, %zu tokens, best of %d: %.3f s)\n", (double)len / 1e6 / best,
           (double)len / 1e6, n, runs, best);
    int rc = 0;
    if (argc > 3 && strcmp(argv[3], "-") != 0) {
        size_t blen = 0;
        int32_t *want = (int32_t *)golden_read_file(argv[3], &blen);
        size_t nw = want ? blen / sizeof *want : 0;
        size_t i = 0;
        while (i < n && i < nw && ids[i] == want[i]) i++;
        if (want && nw == n && i == n) {
            printf("ids: identical to llama.cpp (%zu tokens)\n", n);
        } else {
            printf("ids: DIFFER from llama.cpp at token %zu (specd %zu tokens, llama.cpp %zu)\n", i,
                   n, nw);
            rc = 1;
        }
        free(want);
    }
    free(ids);
    free(text);
    specd_tokenizer_destroy(tok);
    specd_gguf_destroy(g);
    return rc;
}
