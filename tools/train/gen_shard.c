/* Shard writer for specd-gen-data (see gen_shard.h). */
#include "tools/train/gen_shard.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

static int path_in(const gen_shard *s, const char *name, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "%s/%s", s->dir, name);
    if (n < 0 || (size_t)n >= cap) {
        fprintf(stderr, "gen-data: path too long: %s/%s\n", s->dir, name);
        return 1;
    }
    return 0;
}

int gen_shard_open(gen_shard *s, const char *dir, int32_t n_embd, const char *model_sha256) {
    memset(s, 0, sizeof *s);
    if (strlen(dir) >= sizeof s->dir) {
        fprintf(stderr, "gen-data: output folder name too long\n");
        return 1;
    }
    strcpy(s->dir, dir);
    s->n_embd = n_embd;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "gen-data: cannot create %s: %s\n", dir, strerror(errno));
        return 1;
    }
    char p[4200];
    struct stat st;
    if (path_in(s, "DONE", p, sizeof p)) return 1;
    if (stat(p, &st) == 0) { /* never overwrite data a trainer may already be reading */
        fprintf(stderr, "gen-data: %s is a finished shard (DONE exists); pick another folder\n", dir);
        return 1;
    }
    if (path_in(s, "tokens.i32", p, sizeof p) || !(s->tokens = fopen(p, "wb")) ||
        path_in(s, "hidden.f16", p, sizeof p) || !(s->hidden = fopen(p, "wb"))) {
        fprintf(stderr, "gen-data: cannot write %s: %s\n", p, strerror(errno));
        gen_shard_close(s);
        return 1;
    }
    s->root = cJSON_CreateObject();
    cJSON_AddNumberToObject(s->root, "n_embd", n_embd);
    cJSON_AddNumberToObject(s->root, "n_tokens", 0);
    cJSON_AddStringToObject(s->root, "model_sha256", model_sha256 ? model_sha256 : "");
    s->seqs = cJSON_AddArrayToObject(s->root, "sequences");
    return 0;
}

int gen_shard_append(gen_shard *s, const gen_seq_record *r) {
    size_t n = (size_t)r->n_tokens, row = (size_t)s->n_embd;
    /* int32 little-endian on disk: every target specd builds for is little-endian */
    if (fwrite(r->tokens, sizeof(int32_t), n, s->tokens) != n ||
        fwrite(r->hidden, sizeof(uint16_t), n * row, s->hidden) != n * row) {
        fprintf(stderr, "gen-data: write failed in %s: %s\n", s->dir, strerror(errno));
        return 1;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "offset", (double)s->n_tokens);
    cJSON_AddNumberToObject(o, "n_prompt", r->n_prompt);
    cJSON_AddNumberToObject(o, "n_tokens", r->n_tokens);
    cJSON_AddNumberToObject(o, "prompt_id", (double)r->prompt_id);
    cJSON_AddNumberToObject(o, "job", (double)r->job);
    cJSON_AddNumberToObject(o, "seed", (double)r->seed); /* seeds stay below 2^53 */
    /* 0.8f printed as 0.8, not 0.800000011920929 */
    cJSON_AddNumberToObject(o, "temp", (double)lroundf(r->temp * 1e6f) / 1e6);
    cJSON_AddStringToObject(o, "stop", r->stop);
    if (r->text) cJSON_AddStringToObject(o, "text", r->text);
    cJSON_AddItemToArray(s->seqs, o);
    s->n_tokens += r->n_tokens;
    s->n_seqs++;
    return 0;
}

int gen_shard_finish(gen_shard *s, cJSON *recipe) {
    cJSON_ReplaceItemInObject(s->root, "n_tokens", cJSON_CreateNumber((double)s->n_tokens));
    cJSON_AddItemToObject(s->root, "recipe", recipe);
    int bad = fclose(s->tokens) != 0;
    bad |= fclose(s->hidden) != 0;
    s->tokens = s->hidden = NULL;
    char p[4200];
    char *text = cJSON_Print(s->root);
    FILE *f = NULL;
    if (!bad && text && !path_in(s, "seqs.json", p, sizeof p) && (f = fopen(p, "w"))) {
        bad |= fputs(text, f) < 0;
        bad |= fclose(f) != 0;
    } else {
        bad = 1;
    }
    cJSON_free(text);
    if (!bad && !path_in(s, "DONE", p, sizeof p) && (f = fopen(p, "w"))) {
        fprintf(f, "%lld tokens, %lld sequences\n", (long long)s->n_tokens, (long long)s->n_seqs);
        bad |= fclose(f) != 0;
    } else {
        bad = 1;
    }
    if (bad) fprintf(stderr, "gen-data: cannot finish the shard in %s: %s\n", s->dir, strerror(errno));
    return bad;
}

void gen_shard_close(gen_shard *s) {
    if (s->tokens) fclose(s->tokens);
    if (s->hidden) fclose(s->hidden);
    cJSON_Delete(s->root);
    s->tokens = s->hidden = NULL;
    s->root = s->seqs = NULL;
}
