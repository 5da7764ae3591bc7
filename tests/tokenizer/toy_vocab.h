/* A small byte-level BPE vocabulary written as GGUF metadata in memory, with switches that break
 * it in the ways the tokenizer must refuse. Test-side code. */
#ifndef SPECD_TESTS_TOKENIZER_TOY_VOCAB_H
#define SPECD_TESTS_TOKENIZER_TOY_VOCAB_H

#include <stdio.h>
#include <string.h>

#include "gguf/gguf_builder.h"

typedef struct toy_opts {
    const char *model;        /* tokenizer.ggml.model; default "gpt2" */
    const char *pre;          /* default "smollm"; "" omits the key */
    const char *chat_template; /* NULL omits the key */
    int omit_tokens, tokens_not_strings, omit_merges, bad_merge;
    int bad_type_value, short_types, types_u32;
    int bos; /* tokenizer.ggml.bos_token_id; -1 omits the key */
} toy_opts;

/* GPT-2 byte-to-character map, UTF-8 encoded into out (room for 3); returns out. */
static inline char *toy_gpt2_char(int byte, char *out) {
    int cp = byte;
    int printable = (byte >= 0x21 && byte <= 0x7E) || (byte >= 0xA1 && byte <= 0xAC) || byte >= 0xAE;
    if (!printable) {
        int k = 0;
        for (int b = 0; b < byte; b++)
            if (!((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)) k++;
        cp = 0x100 + k;
    }
    if (cp < 0x80) {
        out[0] = (char)cp, out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | (cp >> 6)), out[1] = (char)(0x80 | (cp & 0x3F)), out[2] = 0;
    }
    return out;
}

#define TOY_N_SPECIAL 4
static const char *const toy_special[TOY_N_SPECIAL] = {"<|endoftext|>", "<|im_start|>",
                                                       "<|im_end|>", "<tool>"};
static const int toy_special_type[TOY_N_SPECIAL] = {3, 3, 3, 4};
/* Merges (rank order) and the tokens they make; "G" stands for the GPT-2 space character. */
#define TOY_N_MERGES 8
static const char *const toy_merges[TOY_N_MERGES][3] = {
    {"a", "b", "ab"},   {"ab", "c", "abc"},   {"\xc4\xa0", "t", "\xc4\xa0t"},
    {"\xc4\xa0t", "h", "\xc4\xa0th"},        {"\xc4\xa0th", "e", "\xc4\xa0the"},
    {"a", "a", "aa"},   {"aa", "aa", "aaaa"}, {"\xc4\xa0", "\xc4\xa0", "\xc4\xa0\xc4\xa0"}};

static inline void toy_build(gguf_builder *b, const toy_opts *o) {
    enum { N = TOY_N_SPECIAL + 256 + TOY_N_MERGES };
    static char texts[N][16];
    const char *tok[N];
    for (int i = 0; i < TOY_N_SPECIAL; i++) tok[i] = toy_special[i];
    for (int c = 0; c < 256; c++) tok[TOY_N_SPECIAL + c] = toy_gpt2_char(c, texts[c]);
    for (int m = 0; m < TOY_N_MERGES; m++) tok[TOY_N_SPECIAL + 256 + m] = toy_merges[m][2];
    const char *pre = o->pre ? o->pre : "smollm";
    uint64_t n_kv = 5 + (pre[0] != 0) + (o->chat_template != NULL) + (o->bos >= 0) -
                    (o->omit_tokens != 0) - (o->omit_merges != 0);
    gb_header(b, 3, 0, n_kv);
    gb_kv_str(b, "tokenizer.ggml.model", o->model ? o->model : "gpt2");
    if (pre[0]) gb_kv_str(b, "tokenizer.ggml.pre", pre);
    if (!o->omit_tokens) {
        if (o->tokens_not_strings) {
            gb_key(b, "tokenizer.ggml.tokens", 9);
            gb_u32(b, 4);
            gb_u64(b, N);
            for (int i = 0; i < N; i++) gb_u32(b, (uint32_t)i);
        } else {
            gb_kv_strs(b, "tokenizer.ggml.tokens", tok, N);
        }
    }
    gb_key(b, "tokenizer.ggml.token_type", 9);
    gb_u32(b, o->types_u32 ? 4 : 5);
    int nt = o->short_types ? N - 1 : N;
    gb_u64(b, (uint64_t)nt);
    for (int i = 0; i < nt; i++) {
        int t = i < TOY_N_SPECIAL ? toy_special_type[i] : 1;
        if (o->bad_type_value && i == 7) t = 9;
        gb_u32(b, (uint32_t)t);
    }
    if (!o->omit_merges) {
        static char merge_text[TOY_N_MERGES][32];
        const char *mt[TOY_N_MERGES];
        for (int m = 0; m < TOY_N_MERGES; m++) {
            snprintf(merge_text[m], sizeof merge_text[m], "%s%s%s", toy_merges[m][0],
                     o->bad_merge && m == 3 ? "" : " ", toy_merges[m][1]);
            mt[m] = merge_text[m];
        }
        gb_kv_strs(b, "tokenizer.ggml.merges", mt, TOY_N_MERGES);
    }
    gb_kv_u32(b, "tokenizer.ggml.eos_token_id", 2);
    if (o->bos >= 0) gb_kv_u32(b, "tokenizer.ggml.bos_token_id", (uint32_t)o->bos);
    if (o->chat_template) gb_kv_str(b, "tokenizer.chat_template", o->chat_template);
}

#endif
