/*
 * bpe.c - the byte-level BPE engine both BPE tokenizers encode with, and the
 * learned BPE's description.
 *
 * A word (one pre-token, raw bytes) starts as one symbol per byte and is
 * merged the way the `tokenizers` library's Word::merge_all does, so a
 * tokenizer.json encodes exactly as there: a min-heap of candidate merges
 * ordered by (rank, position); a popped candidate whose pair no longer
 * makes its new id is stale and skipped (the library compares the new id
 * only, and so does this); merging tags the right symbol removed and
 * pushes the pairs it makes with its neighbours. Unknown bytes follow the
 * library too: byte fallback, else the unk token (fused when asked), else
 * dropped.
 *
 * Words already seen are answered from a cache (word bytes -> ids), the
 * reason encoding a large text is fast: most words repeat.
 */
#include <stdlib.h>
#include <string.h>

#include "models/data/tokenizer.h"
#include "models/data/tokenizer_int.h"

#define CACHE_MAX_WORD 256       /* bytes; longer words are not cached */
#define CACHE_MAX_IDS (1u << 22) /* ids the cache holds at most */
#define CACHE_MAX_WORDS (1u << 18)

/* ---- merge_all --------------------------------------------------------- */

typedef struct {
    uint32_t c;
    int64_t prev, next;
    size_t len; /* bytes; 0 once merged into its left neighbour */
} symbol;

typedef struct {
    uint32_t rank, new_id;
    size_t pos;
} cand;

static int cand_less(const cand *a, const cand *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

typedef struct {
    cand *v;
    size_t n, cap;
} heap;

static ty_status heap_push(heap *h, cand c)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        cand *p = realloc(h->v, cap * sizeof *p);
        if (!p)
            return TY_ENOMEM;
        h->v = p;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0 && cand_less(&c, &h->v[(i - 1) / 2])) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = c;
    return TY_OK;
}

static cand heap_pop(heap *h)
{
    cand top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        const cand *mv = &last;
        if (l < h->n && cand_less(&h->v[l], mv)) {
            m = l;
            mv = &h->v[l];
        }
        if (l + 1 < h->n && cand_less(&h->v[l + 1], mv))
            m = l + 1;
        if (m == i)
            break;
        h->v[i] = h->v[m];
        i = m;
    }
    if (h->n)
        h->v[i] = last;
    return top;
}

static int merge_of(const ty_tokenizer *t, uint32_t a, uint32_t b,
                    uint32_t *rank, uint32_t *new_id)
{
    uint64_t v;
    if (!tok_map_get(&t->merges, (uint64_t)a << 32 | b, &v))
        return 0;
    *rank = (uint32_t)(v >> 32);
    *new_id = (uint32_t)v;
    return 1;
}

static ty_status merge_all(const ty_tokenizer *t, symbol *s, size_t n)
{
    heap h = {0};
    uint32_t rank, id;
    ty_status st = TY_OK;
    for (size_t i = 0; i + 1 < n && st == TY_OK; i++)
        if (merge_of(t, s[i].c, s[i + 1].c, &rank, &id))
            st = heap_push(&h, (cand){rank, id, i});
    while (h.n && st == TY_OK) {
        cand top = heap_pop(&h);
        symbol *cur = &s[top.pos];
        if (cur->len == 0 || cur->next == -1)
            continue;
        symbol right = s[cur->next];
        if (!merge_of(t, cur->c, right.c, &rank, &id) || id != top.new_id)
            continue; /* stale */
        s[cur->next].len = 0;
        cur->c = top.new_id;
        cur->len += right.len;
        cur->next = right.next;
        if (right.next > -1 && (size_t)right.next < n)
            s[right.next].prev = (int64_t)top.pos;
        if (cur->prev >= 0 && merge_of(t, s[cur->prev].c, cur->c, &rank, &id))
            st = heap_push(&h, (cand){rank, id, (size_t)cur->prev});
        if (st == TY_OK && cur->next > -1 && (size_t)cur->next < n &&
            merge_of(t, cur->c, s[cur->next].c, &rank, &id))
            st = heap_push(&h, (cand){rank, id, top.pos});
    }
    free(h.v);
    return st;
}

/* ---- a word ------------------------------------------------------------ */

static ty_status add_symbol(symbol **s, size_t *n, size_t *cap, uint32_t c,
                            size_t len)
{
    if (*n == *cap) {
        size_t k = *cap ? *cap * 2 : 64;
        symbol *p = realloc(*s, k * sizeof *p);
        if (!p)
            return TY_ENOMEM;
        *s = p;
        *cap = k;
    }
    int64_t i = (int64_t)*n;
    if (*n)
        (*s)[*n - 1].next = i;
    (*s)[(*n)++] = (symbol){c, i - 1, -1, len};
    return TY_OK;
}

/* The word's ids, computed (no cache). */
static ty_status word_ids(const ty_tokenizer *t, const unsigned char *w,
                          size_t n, tok_ids *out)
{
    symbol *s = NULL;
    size_t ns = 0, cap = 0;
    int64_t unk = -1; /* a pending unk token's id */
    size_t unk_len = 0;
    ty_status st = TY_OK;
    for (size_t i = 0; i < n && st == TY_OK; i++) {
        int64_t id = t->byte_id[w[i]];
        if (id >= 0) {
            if (unk >= 0) {
                st = add_symbol(&s, &ns, &cap, (uint32_t)unk, unk_len);
                unk = -1;
            }
            if (st == TY_OK)
                st = add_symbol(&s, &ns, &cap, (uint32_t)id, 1);
            continue;
        }
        if (t->byte_fallback && t->fallback[w[i]][0] >= 0) {
            /* as the library: the pending unk stays pending */
            for (int k = 0; k < 2 && st == TY_OK; k++)
                if (t->fallback[w[i]][k] >= 0)
                    st = add_symbol(&s, &ns, &cap,
                                    (uint32_t)t->fallback[w[i]][k], 1);
            continue;
        }
        if (t->unk_id < 0)
            continue; /* no unk token: the library drops the character */
        if (unk >= 0 && t->fuse_unk) {
            unk_len++;
            continue;
        }
        if (unk >= 0)
            st = add_symbol(&s, &ns, &cap, (uint32_t)unk, unk_len);
        unk = t->unk_id;
        unk_len = 1;
    }
    if (st == TY_OK && unk >= 0)
        st = add_symbol(&s, &ns, &cap, (uint32_t)unk, unk_len);
    if (st == TY_OK)
        st = merge_all(t, s, ns);
    for (size_t i = 0; i < ns && st == TY_OK; i++)
        if (s[i].len)
            st = tok_ids_push(out, s[i].c);
    free(s);
    return st;
}

/* ignore_merges: the id of the token whose bytes are the whole word. */
static int whole_word(const ty_tokenizer *t, const unsigned char *w, size_t n,
                      uint32_t *id)
{
    uint64_t h = tok_hash_bytes(w, n), v;
    for (uint64_t k = h; tok_map_get(&t->vocab_by_hash, k, &v); k++) {
        uint64_t off = t->piece_off[v], len = t->piece_off[v + 1] - off;
        if (len == n && !memcmp(t->piece_bytes + off, w, n)) {
            *id = (uint32_t)v;
            return 1;
        }
    }
    return 0;
}

/* The cache: key hash(word) (+1 on a collision) -> entry index; an entry's
 * word and ids sit in one uint32 array: [len, bytes..., n, ids...]. */
static int cache_find(const ty_tokenizer *t, const unsigned char *w, size_t n,
                      uint64_t h, uint64_t *slot_key, tok_ids *out)
{
    uint64_t v, k = h;
    for (; tok_map_get(&t->cache, k, &v); k++) {
        const uint32_t *e = t->cache_ids + v;
        if (e[0] != n)
            continue;
        const unsigned char *b = (const unsigned char *)(e + 1);
        if (memcmp(b, w, n))
            continue;
        const uint32_t *ids = e + 1 + (n + 3) / 4;
        for (uint32_t i = 0; i < ids[0]; i++)
            if (tok_ids_push(out, ids[1 + i]) != TY_OK)
                return -1;
        return 1;
    }
    *slot_key = k;
    return 0;
}

static void cache_add(ty_tokenizer *t, const unsigned char *w, size_t n,
                      uint64_t key, const uint32_t *ids, size_t nid)
{
    size_t need = 2 + (n + 3) / 4 + nid;
    if (t->cache.n >= CACHE_MAX_WORDS || t->cache_used + need > CACHE_MAX_IDS)
        return; /* full: words past it are computed each time */
    if (t->cache_used + need > t->cache_cap) {
        size_t cap = t->cache_cap ? t->cache_cap * 2 : 1u << 16;
        while (cap < t->cache_used + need)
            cap *= 2;
        uint32_t *p = realloc(t->cache_ids, cap * sizeof *p);
        if (!p)
            return;
        t->cache_ids = p;
        t->cache_cap = cap;
    }
    if (!t->cache.cap && tok_map_init(&t->cache, 1024) != TY_OK)
        return;
    uint32_t *e = t->cache_ids + t->cache_used;
    e[0] = (uint32_t)n;
    e[(n + 3) / 4] = 0; /* the word's last slot, zero-padded */
    memcpy(e + 1, w, n);
    uint32_t *dst = e + 1 + (n + 3) / 4;
    dst[0] = (uint32_t)nid;
    if (nid) /* a word whose bytes were all dropped has none */
        memcpy(dst + 1, ids, nid * sizeof *ids);
    if (tok_map_put(&t->cache, key, t->cache_used) == TY_OK)
        t->cache_used += need;
}

ty_status tok_bpe_word(ty_tokenizer *t, const unsigned char *w, size_t n,
                       tok_ids *out, ty_err *err)
{
    uint32_t id;
    if (!n)
        return TY_OK;
    if (t->ignore_merges && whole_word(t, w, n, &id))
        return tok_ids_push(out, id) == TY_OK
                   ? TY_OK
                   : ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    uint64_t h = tok_hash_bytes(w, n), key = h;
    /* Without merges a word's ids are its bytes': nothing worth keeping
     * (a byte tokenizer without a regex sees a whole prompt as one word,
     * and would keep every prompt until the cache is full). */
    const int cached = n <= CACHE_MAX_WORD && t->num_merges > 0;
    if (cached) {
        int hit = cache_find(t, w, n, h, &key, out);
        if (hit)
            return hit > 0 ? TY_OK
                           : ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    }
    size_t before = out->n;
    if (word_ids(t, w, n, out) != TY_OK)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    if (cached)
        cache_add(t, w, n, key, out->n > before ? out->ids + before : NULL,
                  out->n - before);
    return TY_OK;
}

/* ---- the learned BPE --------------------------------------------------- */

ty_status tok_bpe_build(const uint32_t *merges, uint32_t n, ty_tokenizer **out,
                        ty_err *err)
{
    ty_tokenizer *t = tok_alloc(TY_TOKENIZER_BPE);
    json_t *pairs = json_array();
    uint64_t *len = malloc(((size_t)n + 256) * sizeof *len);
    size_t total = 256;
    if (!t || !pairs || !len || tok_map_init(&t->merges, n) != TY_OK)
        goto nomem;
    for (unsigned b = 0; b < 256; b++) {
        t->byte_id[b] = b;
        len[b] = 1;
    }
    for (uint32_t i = 0; i < n; i++) {
        len[256 + i] = len[merges[2 * i]] + len[merges[2 * i + 1]];
        total += len[256 + i];
    }
    if (tok_pieces_begin(t, 256 + n, total) != TY_OK)
        goto nomem;
    for (unsigned b = 0; b < 256; b++) {
        t->piece_bytes[b] = (unsigned char)b;
        t->piece_off[b + 1] = b + 1;
        t->has_piece[b] = 1;
    }
    for (uint32_t i = 0; i < n; i++) {
        uint32_t a = merges[2 * i], b = merges[2 * i + 1], id = 256 + i;
        uint64_t at = t->piece_off[id];
        memcpy(t->piece_bytes + at, t->piece_bytes + t->piece_off[a], len[a]);
        memcpy(t->piece_bytes + at + len[a], t->piece_bytes + t->piece_off[b],
               len[b]);
        t->piece_off[id + 1] = at + len[id];
        t->has_piece[id] = 1;
        if (tok_map_put(&t->merges, (uint64_t)a << 32 | b,
                        (uint64_t)i << 32 | id) != TY_OK ||
            json_array_append_new(
                pairs, json_pack("[i, i]", (json_int_t)a, (json_int_t)b)))
            goto nomem;
    }
    t->num_merges = n;
    t->use_regex = 1;
    t->desc = json_pack("{s:s, s:i, s:o}", "type", "bpe", "vocab_size",
                        (json_int_t)(256 + n), "merges", pairs);
    pairs = NULL;
    if (!t->desc)
        goto nomem;
    free(len);
    *out = t;
    return TY_OK;
nomem:
    json_decref(pairs);
    free(len);
    ty_tokenizer_free(t);
    *out = NULL;
    return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
}

ty_status tok_bpe_load(const json_t *desc, const char *field,
                       ty_tokenizer **out, ty_err *err)
{
    const json_t *vs = json_object_get(desc, "vocab_size");
    const json_t *m = json_object_get(desc, "merges");
    char f[160];
    *out = NULL;
    if (!json_is_array(m))
        return ty_fail(err, TY_EINVAL, field,
                       "a bpe tokenizer's description needs \"merges\" (an "
                       "array of [left, right] id pairs); to learn one from "
                       "a text upload, send {\"type\": \"bpe\", "
                       "\"vocab_size\": N}");
    size_t n = json_array_size(m);
    snprintf(f, sizeof f, "%s.vocab_size", field);
    if (n + 256 > TY_TOKENIZER_BPE_MAX_VOCAB)
        return ty_fail(err, TY_EINVAL, f,
                       "a bpe tokenizer has at most %u merges",
                       TY_TOKENIZER_BPE_MAX_VOCAB - 256);
    if (!json_is_integer(vs) || json_integer_value(vs) != (json_int_t)n + 256)
        return ty_fail(err, TY_EINVAL, f,
                       "vocab_size must be 256 + the number of merges (%zu)",
                       n + 256);
    uint32_t *pairs = malloc((n ? n : 1) * 2 * sizeof *pairs);
    if (!pairs)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *p = json_array_get(m, i);
        const json_t *a = json_array_get(p, 0), *b = json_array_get(p, 1);
        if (!json_is_array(p) || json_array_size(p) != 2 ||
            !json_is_integer(a) || !json_is_integer(b) ||
            json_integer_value(a) < 0 || json_integer_value(b) < 0 ||
            json_integer_value(a) >= (json_int_t)(256 + i) ||
            json_integer_value(b) >= (json_int_t)(256 + i)) {
            free(pairs);
            snprintf(f, sizeof f, "%s.merges[%zu]", field, i);
            return ty_fail(err, TY_EINVAL, f,
                           "merge %zu must be a pair of ids made before it "
                           "(each from 0 to %zu)",
                           i, 255 + i);
        }
        pairs[2 * i] = (uint32_t)json_integer_value(a);
        pairs[2 * i + 1] = (uint32_t)json_integer_value(b);
    }
    ty_status st = tok_bpe_build(pairs, (uint32_t)n, out, err);
    free(pairs);
    return st;
}
