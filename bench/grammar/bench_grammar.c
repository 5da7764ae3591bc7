/* bench/grammar: the cost of a grammar mask over the default model's vocabulary, beside a plain
 * decode step of the same model measured in the same run (the anchor).
 * For each grammar, a document that matches it is encoded; a matcher walks its tokens and, at
 * every state, fills the mask:
 *   cold: a freshly compiled grammar (empty mask cache) and a fresh matcher, so each distinct
 *         state is computed by the trie walk (states repeated within the document hit the cache,
 *         as they would in a real request);
 *   warm: a second request on the same grammar (fresh matcher, cache filled by the first): what
 *         requests sharing a schema pay;
 *   walk: the cold pass's time over the masks it computed (the cache misses): one trie walk.
 * Prints medians over RUNS of the per-mask cost, the forced-token call, accepting a token, the
 * mask costs as a share of the decode step, and the compile time (schema to GBNF, parse, token
 * trie).
 * usage: bench_grammar MODEL [THREADS] [RUNS] */
#include "specd/grammar.h"
#include "specd/runtime.h"
#include "specd/tokenizer.h"

#include "bench/bench_median.h"
#include "common/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        if ((call) != SPECD_OK) {                                                                  \
            fprintf(stderr, "bench_grammar: %s: %s\n", #call, err.message);                        \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

typedef struct workload {
    const char *name;
    int schema; /* 1: JSON Schema, 0: GBNF */
    const char *grammar, *doc;
} workload;

static const workload WORK[] = {
    {"json_object", 1, NULL,
     "{\"title\": \"Quarterly report\", \"year\": 2024, \"authors\": [\"Ada Lovelace\", \"Alan "
     "Turing\"], \"draft\": false, \"summary\": \"Revenue grew 12% on the back of new products, "
     "while costs stayed flat.\", \"tags\": {\"team\": \"finance\", \"priority\": 2}}"},
    {"person_schema", 1,
     "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\"}, \"age\": "
     "{\"type\": "
     "\"integer\"}, \"email\": {\"type\": \"string\", \"pattern\": "
     "\"^[a-z.]+@[a-z]+\\\\.[a-z]{2,3}$\"}, "
     "\"city\": {\"enum\": [\"Paris\", \"Oslo\", \"Lima\"]}, \"skills\": {\"type\": \"array\", "
     "\"items\": {\"type\": \"string\"}, \"maxItems\": 5}, \"manager\": {\"anyOf\": [{\"type\": "
     "\"null\"}, {\"$ref\": \"#/$defs/ref\"}]}}, \"required\": [\"name\", \"age\", \"email\", "
     "\"city\", \"skills\", \"manager\"], \"additionalProperties\": false, \"$defs\": {\"ref\": "
     "{\"type\": \"object\", \"properties\": {\"id\": {\"type\": \"integer\"}}, \"required\": "
     "[\"id\"], \"additionalProperties\": false}}}",
     "{\"name\": \"Grace Hopper\", \"age\": 85, \"email\": \"grace.hopper@navy.mil\", \"city\": "
     "\"Lima\", \"skills\": [\"COBOL\", \"compilers\", \"teaching\"], \"manager\": {\"id\": 7}}"},
    {"tool_call", 1,
     "{\"type\": \"object\", \"properties\": {\"name\": {\"const\": \"get_weather\"}, "
     "\"arguments\": {\"type\": \"object\", \"properties\": {\"location\": {\"type\": \"string\"}, "
     "\"unit\": {\"enum\": [\"celsius\", \"fahrenheit\"]}, \"days\": {\"type\": \"integer\"}}, "
     "\"required\": [\"location\", \"unit\", \"days\"], \"additionalProperties\": false}}, "
     "\"required\": [\"name\", \"arguments\"], \"additionalProperties\": false}",
     "{\"name\": \"get_weather\", \"arguments\": {\"location\": \"San Francisco, CA\", \"unit\": "
     "\"celsius\", \"days\": 3}}"},
    {"gbnf_list", 0, "root ::= item+\nitem ::= \"- \" [A-Z] [a-z ,]+ \"\\n\"\n",
     "- Buy milk, eggs and bread\n- Call the plumber\n- Water the plants\n"},
};

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_grammar MODEL [THREADS] [RUNS]\n");
        return 2;
    }
    const int threads = argc > 2 ? atoi(argv[2]) : 2, runs = argc > 3 ? atoi(argv[3]) : 5;
    if (threads < 1 || runs < 1 || runs > 50) {
        fprintf(stderr, "bench_grammar: THREADS >= 1, RUNS 1..50\n");
        return 2;
    }
    specd_error err;
    specd_model *model;
    CHECK(specd_model_create(argv[1], &model, &err));
    specd_tokenizer *tok;
    CHECK(specd_tokenizer_create_from_gguf(specd_model_gguf(model), &tok, &err));
    const int32_t V = specd_tokenizer_vocab_size(tok);

    /* anchor: one-token decode steps after a short prefix */
    specd_context_params cp = specd_context_default_params();
    cp.n_ctx = 512;
    cp.n_threads = threads;
    specd_context *ctx;
    CHECK(specd_context_create(model, &cp, &ctx, &err));
    float *logits = malloc(sizeof(float) * (size_t)V);
    double dec[50];
    for (int r = 0; r < runs; r++) {
        CHECK(specd_context_kv_truncate(ctx, 0, 0, &err));
        const int D = 32;
        uint64_t t0 = specd_now_ns();
        for (int i = 0; i < D; i++)
            CHECK(specd_context_decode(ctx, 0, (int32_t)((i * 7919 + 13) % V), logits, &err));
        dec[r] = (double)(specd_now_ns() - t0) * 1e-6 / D;
    }
    const double decode_ms = bench_median(dec, runs);
    printf("anchor: decode step %.3f ms (%d threads, vocab %d)\n", decode_ms, threads, V);
    printf("%-14s %6s %6s %10s %10s %10s %10s %10s %8s %8s %10s\n", "grammar", "states", "walks",
           "cold_us", "warm_us", "walk_us", "forced_us", "accept_us", "cold_%", "warm_%",
           "compile_ms");

    uint32_t *bits = malloc(sizeof(uint32_t) * (size_t)(V + 31) / 32);
    int32_t ids[1024], forced[64];
    for (size_t w = 0; w < sizeof WORK / sizeof *WORK; w++) {
        const workload *wl = &WORK[w];
        size_t n = 0;
        CHECK(specd_tokenizer_encode(tok, wl->doc, strlen(wl->doc), 0, ids, 1024, &n, &err));
        double cold[50], warm[50], walk[50], fz[50], comp[50], acc[50];
        uint64_t misses = 0;
        for (int r = 0; r < runs; r++) {
            specd_grammar *g;
            uint64_t tcomp = specd_now_ns();
            if (wl->schema)
                CHECK(specd_grammar_create_json_schema(
                    wl->grammar, wl->grammar ? strlen(wl->grammar) : 0, tok, &g, &err));
            else
                CHECK(specd_grammar_create_gbnf(wl->grammar, strlen(wl->grammar), tok, &g, &err));
            comp[r] = (double)(specd_now_ns() - tcomp) * 1e-6;
            uint64_t tc = 0, tw = 0, tf = 0, ta = 0;
            for (int pass = 0; pass < 2; pass++) {
                specd_grammar_matcher *m;
                CHECK(specd_grammar_matcher_create(g, &m, &err));
                for (size_t i = 0; i <= n; i++) {
                    uint64_t t0 = specd_now_ns();
                    CHECK(specd_grammar_matcher_fill_mask(m, bits, V));
                    uint64_t t1 = specd_now_ns();
                    if (pass == 0) {
                        tc += t1 - t0;
                        (void)specd_grammar_matcher_forced(m, forced, 64);
                        tf += specd_now_ns() - t1;
                    } else {
                        tw += t1 - t0;
                    }
                    uint64_t t2 = specd_now_ns();
                    if (i < n && specd_grammar_matcher_accept(m, ids[i]) != SPECD_OK) {
                        fprintf(stderr, "bench_grammar: %s: token %zu refused\n", wl->name, i);
                        return 1;
                    }
                    if (pass == 0) ta += specd_now_ns() - t2;
                }
                specd_grammar_matcher_destroy(m);
            }
            uint64_t hits;
            specd_grammar_cache_stats(g, &hits, &misses);
            specd_grammar_destroy(g);
            cold[r] = (double)tc * 1e-3 / (double)(n + 1);
            warm[r] = (double)tw * 1e-3 / (double)(n + 1);
            walk[r] = misses ? (double)tc * 1e-3 / (double)misses : 0.0;
            fz[r] = (double)tf * 1e-3 / (double)(n + 1);
            acc[r] = (double)ta * 1e-3 / (double)n;
        }
        double c = bench_median(cold, runs), wm = bench_median(warm, runs);
        printf("%-14s %6zu %6llu %10.1f %10.1f %10.1f %10.1f %10.1f %7.2f%% %7.3f%% %10.2f\n",
               wl->name, n + 1, (unsigned long long)misses, c, wm, bench_median(walk, runs),
               bench_median(fz, runs), bench_median(acc, runs), 100.0 * c * 1e-3 / decode_ms,
               100.0 * wm * 1e-3 / decode_ms, bench_median(comp, runs));
    }
    free(bits);
    free(logits);
    specd_context_destroy(ctx);
    specd_tokenizer_destroy(tok);
    specd_model_destroy(model);
    return 0;
}
