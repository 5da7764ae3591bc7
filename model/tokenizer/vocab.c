/* Building a tokenizer from vocabulary metadata: token texts and kinds, merges, special ids. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log_internal.h"
#include "common/status_internal.h"
#include "model/tokenizer/tokenizer_internal.h"
#include "model/tokenizer/unicode.h"

int specd_tok_grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 1;
    size_t n = *cap ? *cap : 16, bytes;
    while (n < need) {
        if (!specd_mul_ok(n, 2, &n)) return 0;
    }
    if (!specd_mul_ok(n, elem, &bytes)) return 0;
    void *q = specd_alloc(bytes);
    if (!q) return 0;
    if (*p && *cap) memcpy(q, *p, *cap * elem);
    specd_free(*p);
    *p = q;
    *cap = n;
    return 1;
}

uint32_t specd_tok_hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a, folded */
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return (uint32_t)(h ^ (h >> 32));
}

int32_t specd_tok_lookup_key(const specd_tokenizer *t, const uint8_t *p, size_t n) {
    uint32_t h = specd_tok_hash_bytes(p, n);
    for (size_t i = h & t->text_mask;; i = (i + 1) & t->text_mask) {
        const specd_tok_text_slot *s = &t->text_slots[i];
        if (s->id < 0) return -1;
        if (s->hash != h) continue;
        uint32_t a = t->key_off[s->id], b = t->key_off[s->id + 1];
        if (b - a == n && memcmp(t->keys + a, p, n) == 0) return s->id;
    }
}

/* GPT-2's byte <-> character map: bytes that are printable Latin-1 stand for themselves, the 68
 * others for U+0100.. in byte order. Returns the byte of code point cp, or -1. */
static int gpt2_byte_of(uint32_t cp) {
    if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF))
        return (int)cp;
    if (cp < 0x100 || cp >= 0x100 + 68) return -1;
    int k = (int)(cp - 0x100);
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        if (!printable && k-- == 0) return b;
    }
    return -1;
}

static const char *const eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
    "<EOT>", "<|end_of_text|>", "<end_of_utterance>",
    /* fill-in-the-middle pad / repo / file separators end generation too in llama.cpp */
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
    "<REPO>", "<reponame>", "<|file_sep|>"};

typedef struct builder {
    specd_tokenizer *t;
    char *piece;
    size_t piece_len, piece_cap;
    uint8_t *key;
    size_t key_len, key_cap;
} builder;

static int put(char **buf, size_t *len, size_t *cap, const void *p, size_t n) {
    if (!specd_tok_grow((void **)buf, cap, *len + n, 1)) return 0;
    memcpy(*buf + *len, p, n);
    *len += n;
    return 1;
}

/* Appends token i's piece and key. Normal/byte tokens decode GPT-2 characters to bytes (a
 * character outside the map renders as llama.cpp renders it, "[UNK_BYTE_0x..<text>]", and makes
 * the text unreachable by BPE); other kinds keep their text. */
static int add_token_text(builder *b, int32_t i, const char *text, size_t len, int kind) {
    specd_tokenizer *t = b->t;
    char empty[32];
    if (len == 0) { /* llama.cpp renames empty tokens */
        len = (size_t)snprintf(empty, sizeof empty, "[EMPTY_%d]", (int)i);
        text = empty;
    }
    t->piece_off[i] = (uint32_t)b->piece_len;
    t->key_off[i] = (uint32_t)b->key_len;
    uint32_t stack[64];
    uint32_t *units = len <= 64 ? stack : specd_alloc_array(len, sizeof *units);
    if (!units) return 0;
    size_t n = specd_utf8_decode((const uint8_t *)text, len, 0, units);
    int ok = 1, decodable = 1;
    for (size_t k = 0; k < n && ok; k++) {
        int byte = units[k] & SPECD_UNIT_BAD ? -1 : gpt2_byte_of(units[k]);
        if (byte < 0) {
            decodable = 0;
            break;
        }
        uint8_t c = (uint8_t)byte;
        ok = put((char **)&b->key, &b->key_len, &b->key_cap, &c, 1);
    }
    if (!decodable) b->key_len = t->key_off[i];
    t->key_ok[i] = (uint8_t)decodable;
    if (ok && (kind == SPECD_TOKEN_NORMAL || kind == SPECD_TOKEN_BYTE)) {
        if (decodable) {
            ok = put(&b->piece, &b->piece_len, &b->piece_cap, b->key + t->key_off[i],
                     b->key_len - t->key_off[i]);
        } else {
            for (size_t k = 0; k < n && ok; k++) {
                int byte = units[k] & SPECD_UNIT_BAD ? -1 : gpt2_byte_of(units[k]);
                if (byte >= 0) {
                    char c = (char)byte;
                    ok = put(&b->piece, &b->piece_len, &b->piece_cap, &c, 1);
                    continue;
                }
                uint8_t u8[4];
                size_t m = specd_unit_bytes(units[k], 0, u8);
                char hex[16 + 8];
                int h = snprintf(hex, sizeof hex, "[UNK_BYTE_0x");
                ok = put(&b->piece, &b->piece_len, &b->piece_cap, hex, (size_t)h);
                for (size_t j = 0; j < m && ok; j++) {
                    h = snprintf(hex, sizeof hex, "%02x", u8[j]);
                    ok = put(&b->piece, &b->piece_len, &b->piece_cap, hex, (size_t)h);
                }
                ok = ok && put(&b->piece, &b->piece_len, &b->piece_cap, text, len) &&
                     put(&b->piece, &b->piece_len, &b->piece_cap, "]", 1);
            }
        }
    } else if (ok && kind != SPECD_TOKEN_UNUSED && kind != 0) {
        ok = put(&b->piece, &b->piece_len, &b->piece_cap, text, len);
    }
    if (units != stack) specd_free(units);
    return ok;
}

static int cmp_special(const void *a, const void *b, void *ctx) {
    const specd_tokenizer *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = t->piece_off[x + 1] - t->piece_off[x], ly = t->piece_off[y + 1] - t->piece_off[y];
    if (lx != ly) return lx > ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

static specd_status build_tables(specd_tokenizer *t, const specd_tok_vocab *v, specd_error *err) {
    size_t n = (size_t)t->n_vocab, slots = 16;
    while (slots < 2 * n) slots *= 2;
    t->text_slots = specd_alloc_array(slots, sizeof *t->text_slots);
    if (!t->text_slots) return specd_fail(err, SPECD_E_NOMEM, "tokenizer text table");
    t->text_mask = slots - 1;
    for (size_t i = 0; i < slots; i++) t->text_slots[i].id = -1;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        if (!t->key_ok[i]) continue;
        const uint8_t *k = t->keys + t->key_off[i];
        size_t len = t->key_off[i + 1] - t->key_off[i];
        uint32_t h = specd_tok_hash_bytes(k, len);
        for (size_t j = h & t->text_mask;; j = (j + 1) & t->text_mask) {
            specd_tok_text_slot *s = &t->text_slots[j];
            if (s->id < 0 || (s->hash == h && t->key_off[s->id + 1] - t->key_off[s->id] == len &&
                              memcmp(t->keys + t->key_off[s->id], k, len) == 0)) {
                s->hash = h;
                s->id = i; /* a repeated text maps to its last id, as in llama.cpp */
                break;
            }
        }
    }
    for (int c = 0; c < 256; c++) {
        uint8_t byte = (uint8_t)c;
        t->byte_token[c] = specd_tok_lookup_key(t, &byte, 1);
    }

    slots = 16;
    while (slots < 2 * v->n_merges + 2) slots *= 2;
    t->merges = specd_alloc_array(slots, sizeof *t->merges);
    if (!t->merges) return specd_fail(err, SPECD_E_NOMEM, "tokenizer merge table");
    t->merge_mask = slots - 1;
    for (size_t i = 0; i < slots; i++) t->merges[i].key = UINT64_MAX;
    size_t skipped = 0, cap = 0, ucap = 0;
    uint8_t *buf = NULL;
    uint32_t *units = NULL;
    for (size_t r = 0; r < v->n_merges; r++) {
        const char *m = v->merge_text[r];
        size_t len = v->merge_len[r];
        const char *sp = len > 1 ? memchr(m + 1, ' ', len - 1) : NULL;
        if (!sp) {
            specd_free(buf);
            specd_free(units);
            return specd_fail(err, SPECD_E_FORMAT, "tokenizer.ggml.merges[%zu]: no space", r);
        }
        /* Decode both halves to bytes through a throw-away token-sized decode. */
        if (!specd_tok_grow((void **)&buf, &cap, len + 1, 1) ||
            !specd_tok_grow((void **)&units, &ucap, len + 1, sizeof *units)) {
            specd_free(buf);
            specd_free(units);
            return specd_fail(err, SPECD_E_NOMEM, "merge buffer");
        }
        int32_t ids[3] = {-1, -1, -1};
        size_t lens[2] = {(size_t)(sp - m), len - (size_t)(sp - m) - 1};
        const char *parts[2] = {m, sp + 1};
        size_t total = 0;
        int ok = 1;
        for (int p = 0; p < 2 && ok; p++) {
            size_t start = total;
            size_t nu = specd_utf8_decode((const uint8_t *)parts[p], lens[p], 0, units);
            ok = nu > 0;
            for (size_t k = 0; k < nu && ok; k++) {
                int byte = units[k] & SPECD_UNIT_BAD ? -1 : gpt2_byte_of(units[k]);
                if (byte < 0) ok = 0;
                else buf[total++] = (uint8_t)byte;
            }
            if (ok) ids[p] = specd_tok_lookup_key(t, buf + start, total - start);
        }
        if (ok) ids[2] = specd_tok_lookup_key(t, buf, total);
        if (!ok || ids[0] < 0 || ids[1] < 0 || ids[2] < 0) {
            skipped++; /* cannot apply: a part or the result is not a token */
            continue;
        }
        uint64_t key = ((uint64_t)(uint32_t)ids[0] << 32) | (uint32_t)ids[1];
        size_t j = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & t->merge_mask;
        while (t->merges[j].key != UINT64_MAX && t->merges[j].key != key)
            j = (j + 1) & t->merge_mask;
        if (t->merges[j].key == key) continue; /* first rank wins, as in llama.cpp */
        t->merges[j].key = key;
        t->merges[j].rank = (int32_t)r;
        t->merges[j].result = ids[2];
    }
    specd_free(buf);
    specd_free(units);
    if (skipped) specd_log(SPECD_LOG_WARN, "tokenizer: %zu merges reference non-tokens; ignored", skipped);
    return SPECD_OK;
}

/* Finds the default system prompt a ChatML template inserts when the first message is not a
 * system message: the literal '<|im_start|>system\n....<|im_end|>' in the template source. */
static specd_status parse_chat_template(specd_tokenizer *t, const char *tpl, size_t len,
                                        specd_error *err) {
    static const char start[] = "<|im_start|>";
    if (!tpl || len == 0) return SPECD_OK;
    const char *end = tpl + len;
    for (const char *p = tpl; p + sizeof start - 1 <= end; p++)
        if (memcmp(p, start, sizeof start - 1) == 0) {
            t->chatml = 1;
            break;
        }
    if (!t->chatml) return SPECD_OK;
    static const char sys[] = "<|im_start|>system";
    for (const char *p = tpl; p + sizeof sys - 1 < end; p++) {
        if (memcmp(p, sys, sizeof sys - 1) != 0) continue;
        const char *q = p + sizeof sys - 1;
        if (q < end && *q == '\n')
            q++;
        else if (q + 1 < end && q[0] == '\\' && q[1] == 'n')
            q += 2;
        else
            continue;
        const char *e = q;
        while (e < end && *e != '\'' && *e != '"' && *e != '<' && *e != '{') e++;
        if (e == q || e + 10 > end || memcmp(e, "<|im_end|>", 10) != 0) continue;
        t->default_system = specd_alloc((size_t)(e - q) + 1);
        if (!t->default_system) return specd_fail(err, SPECD_E_NOMEM, "chat template");
        memcpy(t->default_system, q, (size_t)(e - q));
        t->default_system[e - q] = '\0';
        break;
    }
    return SPECD_OK;
}

static void check_id(int32_t *id, int32_t n, const char *what) {
    if (*id >= n || *id < -1) {
        specd_log(SPECD_LOG_WARN, "tokenizer: %s id %d out of range; ignored", what, (int)*id);
        *id = -1;
    }
}

specd_status specd_tokenizer_create_from_vocab(const specd_tok_vocab *v, specd_tokenizer **out,
                                               specd_error *err) {
    if (!v || !out) return specd_fail(err, SPECD_E_INVALID_ARG, "tokenizer: NULL vocab or out");
    if (v->n_tokens == 0 || v->n_tokens > INT32_MAX / 2)
        return specd_fail(err, SPECD_E_FORMAT, "tokenizer.ggml.tokens: %zu tokens", v->n_tokens);
    specd_pretok pre;
    const char *p = v->pre ? v->pre : "";
    if (strcmp(p, "smollm") == 0)
        pre = SPECD_PRETOK_SMOLLM;
    else if (strcmp(p, "qwen2") == 0 || strcmp(p, "deepseek-r1-qwen") == 0 ||
             strcmp(p, "megrez") == 0)
        pre = SPECD_PRETOK_QWEN2;
    else if (strcmp(p, "qwen35") == 0)
        pre = SPECD_PRETOK_QWEN35;
    else
        return specd_fail(err, SPECD_E_UNSUPPORTED, "tokenizer.ggml.pre '%s' is not supported", p);

    specd_tokenizer *t = specd_alloc_array(1, sizeof *t);
    if (!t) return specd_fail(err, SPECD_E_NOMEM, "tokenizer");
    size_t n = v->n_tokens;
    t->n_vocab = (int32_t)n;
    t->pretok = pre;
    t->kind = specd_alloc_array(n, 1);
    t->eog = specd_alloc_array(n, 1);
    t->key_ok = specd_alloc_array(n, 1);
    t->piece_off = specd_alloc_array(n + 1, sizeof(uint32_t));
    t->key_off = specd_alloc_array(n + 1, sizeof(uint32_t));
    t->bmp_class = specd_alloc(0x10000);
    specd_status st = SPECD_OK;
    if (!t->kind || !t->eog || !t->key_ok || !t->piece_off || !t->key_off || !t->bmp_class) {
        st = specd_fail(err, SPECD_E_NOMEM, "tokenizer tables for %zu tokens", n);
        goto fail;
    }
    specd_unicode_fill_bmp(t->bmp_class);
    for (size_t i = 0; i < n; i++) {
        int32_t k = v->token_type ? v->token_type[i] : SPECD_TOKEN_NORMAL;
        if (k < 0 || k > SPECD_TOKEN_BYTE) {
            st = specd_fail(err, SPECD_E_FORMAT, "tokenizer.ggml.token_type[%zu] = %d", i, (int)k);
            goto fail;
        }
        t->kind[i] = (uint8_t)k;
        for (size_t e = 0; e < sizeof eog_texts / sizeof *eog_texts; e++) {
            size_t el = strlen(eog_texts[e]);
            if (v->token_len[i] == el && memcmp(v->token_text[i], eog_texts[e], el) == 0) {
                t->eog[i] = 1;
                t->kind[i] = SPECD_TOKEN_CONTROL;
            }
        }
    }
    builder b = {t, NULL, 0, 0, NULL, 0, 0};
    for (size_t i = 0; i < n; i++) {
        if (!add_token_text(&b, (int32_t)i, v->token_text[i], v->token_len[i], t->kind[i]) ||
            b.piece_len > UINT32_MAX / 2 || b.key_len > UINT32_MAX / 2) {
            specd_free(b.piece);
            specd_free(b.key);
            st = specd_fail(err, SPECD_E_NOMEM, "tokenizer token texts");
            goto fail;
        }
    }
    t->piece_off[n] = (uint32_t)b.piece_len;
    t->key_off[n] = (uint32_t)b.key_len;
    t->pieces = b.piece ? b.piece : specd_alloc(1);
    t->keys = b.key ? b.key : specd_alloc(1);
    if (!t->pieces || !t->keys) {
        st = specd_fail(err, SPECD_E_NOMEM, "tokenizer token texts");
        goto fail;
    }
    st = build_tables(t, v, err);
    if (st != SPECD_OK) goto fail;

    t->bos = v->bos, t->eos = v->eos, t->eot = v->eot, t->eom = v->eom;
    check_id(&t->bos, t->n_vocab, "bos");
    check_id(&t->eos, t->n_vocab, "eos");
    check_id(&t->eot, t->n_vocab, "eot");
    check_id(&t->eom, t->n_vocab, "eom");
    if (t->eos >= 0) t->eog[t->eos] = 1;
    if (t->eot >= 0) t->eog[t->eot] = 1;
    if (t->eom >= 0) t->eog[t->eom] = 1;
    t->add_bos = v->add_bos && t->bos >= 0;
    t->add_eos = v->add_eos && t->eos >= 0;

    size_t ns = 0;
    for (size_t i = 0; i < n; i++)
        ns += t->kind[i] == SPECD_TOKEN_CONTROL || t->kind[i] == SPECD_TOKEN_USER_DEFINED ||
              t->kind[i] == SPECD_TOKEN_UNKNOWN;
    t->special = specd_alloc_array(ns ? ns : 1, sizeof(int32_t));
    if (!t->special) {
        st = specd_fail(err, SPECD_E_NOMEM, "special token list");
        goto fail;
    }
    for (size_t i = 0; i < n; i++)
        if (t->kind[i] == SPECD_TOKEN_CONTROL || t->kind[i] == SPECD_TOKEN_USER_DEFINED ||
            t->kind[i] == SPECD_TOKEN_UNKNOWN)
            t->special[t->n_special++] = (int32_t)i;
    qsort_r(t->special, t->n_special, sizeof(int32_t), cmp_special, t);

    st = parse_chat_template(t, v->chat_template, v->chat_template_len, err);
    if (st != SPECD_OK) goto fail;
    *out = t;
    return SPECD_OK;
fail:
    specd_tokenizer_destroy(t);
    return st;
}

void specd_tokenizer_destroy(specd_tokenizer *t) {
    if (!t) return;
    specd_free(t->kind);
    specd_free(t->eog);
    specd_free(t->key_ok);
    specd_free(t->piece_off);
    specd_free(t->key_off);
    specd_free(t->pieces);
    specd_free(t->keys);
    specd_free(t->text_slots);
    specd_free(t->merges);
    specd_free(t->special);
    specd_free(t->bmp_class);
    specd_free(t->default_system);
    specd_free(t);
}

int32_t specd_tokenizer_vocab_size(const specd_tokenizer *t) { return t ? t->n_vocab : 0; }
int32_t specd_tokenizer_bos(const specd_tokenizer *t) { return t ? t->bos : -1; }
int32_t specd_tokenizer_eos(const specd_tokenizer *t) { return t ? t->eos : -1; }

int specd_tokenizer_is_eog(const specd_tokenizer *t, int32_t id) {
    return t && id >= 0 && id < t->n_vocab && t->eog[id];
}

int specd_tokenizer_token_kind(const specd_tokenizer *t, int32_t id) {
    return t && id >= 0 && id < t->n_vocab ? t->kind[id] : 0;
}

int32_t specd_tokenizer_find(const specd_tokenizer *t, const char *text, size_t len) {
    if (!t || !text || len == 0) return -1;
    int32_t id = specd_tok_lookup_key(t, (const uint8_t *)text, len);
    if (id >= 0) return id;
    for (size_t i = 0; i < t->n_special; i++) {
        int32_t s = t->special[i];
        uint32_t a = t->piece_off[s], b = t->piece_off[s + 1];
        if (b - a == len && memcmp(t->pieces + a, text, len) == 0) return s;
    }
    return -1;
}
