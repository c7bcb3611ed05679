/*
 * bpe_learn.c - learns a byte-level BPE from a text, GPT-2 style.
 *
 * The text is split by the GPT-2 pre-tokenizer into words, counted once per
 * distinct word (feed). Learning (finish) repeats: take the pair of adjacent
 * ids with the highest count over all words (ties: the smaller left id,
 * then the smaller right id, so the result depends on the text only), give
 * it the next id, and replace its occurrences left to right in the words
 * that hold it. Pair counts are kept up to date incrementally: each pair
 * lists the words it occurs in (a list that may hold stale or repeated
 * words, checked when used), and a max-heap of (count, pair) is corrected
 * lazily: an entry whose count has since dropped is pushed back with the
 * count it has now. Learning stops when the vocabulary is full or no pair
 * occurs twice.
 */
#include <stdlib.h>
#include <string.h>

#include "models/data/tokenizer.h"
#include "models/data/tokenizer_int.h"

typedef struct {
    uint64_t off;   /* into syms */
    uint32_t len;   /* symbols now */
    uint64_t count; /* occurrences in the text */
} word;

struct ty_bpe_learner {
    uint32_t vocab_size;
    /* counting: the distinct words' bytes in one arena */
    unsigned char *bytes;
    uint64_t nbytes, bytes_cap;
    word *words;
    uint32_t nwords, words_cap;
    tok_map by_hash; /* hash (+k on collision) -> word index */
};

ty_status ty_bpe_learner_create(uint32_t vocab_size, ty_bpe_learner **out,
                                ty_err *err)
{
    *out = NULL;
    if (vocab_size <= 256 || vocab_size > TY_TOKENIZER_BPE_MAX_VOCAB)
        return ty_fail(err, TY_EINVAL, "tokenizer.vocab_size",
                       "vocab_size must be an integer from 257 to %u",
                       TY_TOKENIZER_BPE_MAX_VOCAB);
    ty_bpe_learner *l = calloc(1, sizeof *l);
    if (!l || tok_map_init(&l->by_hash, 4096) != TY_OK) {
        free(l);
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    }
    l->vocab_size = vocab_size;
    *out = l;
    return TY_OK;
}

void ty_bpe_learner_free(ty_bpe_learner *l)
{
    if (!l)
        return;
    free(l->bytes);
    free(l->words);
    tok_map_free(&l->by_hash);
    free(l);
}

static ty_status count_word(void *ctx, const unsigned char *p, size_t n,
                            ty_err *err)
{
    ty_bpe_learner *l = ctx;
    uint64_t h = tok_hash_bytes(p, n), v;
    for (; tok_map_get(&l->by_hash, h, &v); h++) {
        word *w = &l->words[v];
        if (w->len == n && !memcmp(l->bytes + w->off, p, n)) {
            w->count++;
            return TY_OK;
        }
    }
    if (l->nbytes + n > l->bytes_cap) {
        uint64_t cap = l->bytes_cap ? l->bytes_cap * 2 : 1u << 20;
        while (cap < l->nbytes + n)
            cap *= 2;
        unsigned char *b = realloc(l->bytes, cap);
        if (!b)
            return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        l->bytes = b;
        l->bytes_cap = cap;
    }
    if (l->nwords == l->words_cap) {
        uint32_t cap = l->words_cap ? l->words_cap * 2 : 4096;
        word *w = realloc(l->words, cap * sizeof *w);
        if (!w)
            return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
        l->words = w;
        l->words_cap = cap;
    }
    memcpy(l->bytes + l->nbytes, p, n);
    l->words[l->nwords] = (word){l->nbytes, (uint32_t)n, 1};
    l->nbytes += n;
    if (tok_map_put(&l->by_hash, h, l->nwords) != TY_OK)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    l->nwords++;
    return TY_OK;
}

ty_status ty_bpe_learner_feed(ty_bpe_learner *l, const char *text, size_t len,
                              ty_err *err)
{
    return tok_pretokenize((const unsigned char *)text, len, count_word, l,
                           err);
}

/* ---- learning ------------------------------------------------------------ */

typedef struct {
    uint64_t count, key;
} entry;

typedef struct {
    tok_map index;   /* pair key -> pair index */
    uint64_t *count; /* per pair index */
    uint32_t *head;  /* first node of its word list, UINT32_MAX none */
    uint64_t *key;   /* the pair */
    uint32_t n, cap;
    uint32_t *node_word, *node_next; /* the word lists' nodes */
    uint64_t nnodes, nodes_cap;
    entry *heap;
    size_t nheap, heap_cap;
} pairs;

static int entry_before(const entry *a, const entry *b)
{
    return a->count != b->count ? a->count > b->count : a->key < b->key;
}

static int heap_push(pairs *p, entry e)
{
    if (p->nheap == p->heap_cap) {
        size_t cap = p->heap_cap ? p->heap_cap * 2 : 4096;
        entry *h = realloc(p->heap, cap * sizeof *h);
        if (!h)
            return -1;
        p->heap = h;
        p->heap_cap = cap;
    }
    size_t i = p->nheap++;
    while (i > 0 && entry_before(&e, &p->heap[(i - 1) / 2])) {
        p->heap[i] = p->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    p->heap[i] = e;
    return 0;
}

static entry heap_pop(pairs *p)
{
    entry top = p->heap[0], last = p->heap[--p->nheap];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1, m = i;
        const entry *mv = &last;
        if (c < p->nheap && entry_before(&p->heap[c], mv)) {
            m = c;
            mv = &p->heap[c];
        }
        if (c + 1 < p->nheap && entry_before(&p->heap[c + 1], mv))
            m = c + 1;
        if (m == i)
            break;
        p->heap[i] = p->heap[m];
        i = m;
    }
    if (p->nheap)
        p->heap[i] = last;
    return top;
}

/* The index of pair key, made (count 0) if new; UINT32_MAX out of memory. */
static uint32_t pair_of(pairs *p, uint64_t key)
{
    uint64_t v;
    if (tok_map_get(&p->index, key, &v))
        return (uint32_t)v;
    if (p->n == p->cap) {
        uint32_t cap = p->cap ? p->cap * 2 : 1u << 14;
        uint64_t *c = realloc(p->count, cap * sizeof *c);
        if (c)
            p->count = c;
        uint32_t *h = realloc(p->head, cap * sizeof *h);
        if (h)
            p->head = h;
        uint64_t *k = realloc(p->key, cap * sizeof *k);
        if (k)
            p->key = k;
        if (!c || !h || !k)
            return UINT32_MAX;
        p->cap = cap;
    }
    if (tok_map_put(&p->index, key, p->n) != TY_OK)
        return UINT32_MAX;
    p->count[p->n] = 0;
    p->head[p->n] = UINT32_MAX;
    p->key[p->n] = key;
    return p->n++;
}

static int list_add(pairs *p, uint32_t pi, uint32_t w)
{
    if (p->nnodes == p->nodes_cap) {
        uint64_t cap = p->nodes_cap ? p->nodes_cap * 2 : 1u << 16;
        uint32_t *a = realloc(p->node_word, cap * sizeof *a);
        if (a)
            p->node_word = a;
        uint32_t *b = realloc(p->node_next, cap * sizeof *b);
        if (b)
            p->node_next = b;
        if (!a || !b || cap > UINT32_MAX)
            return -1;
        p->nodes_cap = cap;
    }
    p->node_word[p->nnodes] = w;
    p->node_next[p->nnodes] = p->head[pi];
    p->head[pi] = (uint32_t)p->nnodes++;
    return 0;
}

static void pairs_free(pairs *p)
{
    tok_map_free(&p->index);
    free(p->count);
    free(p->head);
    free(p->key);
    free(p->node_word);
    free(p->node_next);
    free(p->heap);
}

#define KEY(a, b) ((uint64_t)(a) << 32 | (uint64_t)(b))

ty_status ty_bpe_learner_finish(ty_bpe_learner *l, ty_tokenizer **out,
                                ty_err *err)
{
    pairs p = {0};
    uint32_t max_merges = l->vocab_size - 256, nm = 0;
    uint32_t *syms = malloc((l->nbytes ? l->nbytes : 1) * sizeof *syms);
    uint32_t *merges = malloc((size_t)max_merges * 2 * sizeof *merges);
    uint32_t *stamp = calloc(l->nwords ? l->nwords : 1, sizeof *stamp);
    uint32_t *old = NULL, *touched = NULL;
    size_t old_cap = 0, ntouched = 0, touched_cap = 0;
    ty_status st = TY_ENOMEM;
    *out = NULL;
    if (!syms || !merges || !stamp || tok_map_init(&p.index, 1u << 16))
        goto done;
    for (uint64_t i = 0; i < l->nbytes; i++)
        syms[i] = l->bytes[i];
    /* the pairs of every word */
    for (uint32_t w = 0; w < l->nwords; w++) {
        const word *wd = &l->words[w];
        for (uint32_t i = 0; i + 1 < wd->len; i++) {
            uint32_t pi =
                pair_of(&p, KEY(syms[wd->off + i], syms[wd->off + i + 1]));
            if (pi == UINT32_MAX || list_add(&p, pi, w))
                goto done;
            p.count[pi] += wd->count;
        }
    }
    for (uint32_t i = 0; i < p.n; i++)
        if (heap_push(&p, (entry){p.count[i], p.key[i]}))
            goto done;
    while (nm < max_merges && p.nheap) {
        entry top = heap_pop(&p);
        uint64_t v;
        tok_map_get(&p.index, top.key, &v);
        uint32_t pi = (uint32_t)v;
        if (p.count[pi] != top.count) {
            if (p.count[pi] && heap_push(&p, (entry){p.count[pi], top.key}))
                goto done;
            continue;
        }
        if (top.count < 2)
            break;
        uint32_t a = (uint32_t)(top.key >> 32), b = (uint32_t)top.key;
        uint32_t z = 256 + nm;
        merges[2 * nm] = a;
        merges[2 * nm + 1] = b;
        nm++;
        ntouched = 0;
        for (uint32_t nd = p.head[pi]; nd != UINT32_MAX; nd = p.node_next[nd]) {
            uint32_t w = p.node_word[nd];
            if (stamp[w] == nm)
                continue;
            stamp[w] = nm;
            word *wd = &l->words[w];
            uint32_t *s = syms + wd->off, len = wd->len, j = 0;
            if (len > old_cap) {
                old_cap = len * 2;
                uint32_t *o = realloc(old, old_cap * sizeof *o);
                if (!o)
                    goto done;
                old = o;
            }
            memcpy(old, s, len * sizeof *s);
            for (uint32_t i = 0; i < len;) {
                if (i + 1 < len && old[i] == a && old[i + 1] == b) {
                    s[j++] = z;
                    i += 2;
                } else {
                    s[j++] = old[i++];
                }
            }
            if (j == len)
                continue; /* a stale entry of the list */
            wd->len = j;
            for (uint32_t i = 0; i + 1 < len; i++) {
                uint64_t q;
                tok_map_get(&p.index, KEY(old[i], old[i + 1]), &q);
                p.count[q] -= wd->count;
            }
            for (uint32_t i = 0; i + 1 < j; i++) {
                uint32_t q = pair_of(&p, KEY(s[i], s[i + 1]));
                if (q == UINT32_MAX)
                    goto done;
                p.count[q] += wd->count;
                if (s[i] != z && s[i + 1] != z)
                    continue;
                if (list_add(&p, q, w))
                    goto done;
                if (ntouched == touched_cap) {
                    touched_cap = touched_cap ? touched_cap * 2 : 256;
                    uint32_t *t = realloc(touched, touched_cap * sizeof *t);
                    if (!t)
                        goto done;
                    touched = t;
                }
                touched[ntouched++] = q;
            }
        }
        /* the new pairs enter the heap with their final counts (a pair
         * pushed twice is the same entry twice: harmless) */
        for (size_t i = 0; i < ntouched; i++)
            if (p.count[touched[i]] &&
                heap_push(&p, (entry){p.count[touched[i]], p.key[touched[i]]}))
                goto done;
        p.head[pi] = UINT32_MAX;
    }
    st = tok_bpe_build(merges, nm, out, err);
done:
    if (st == TY_ENOMEM && !*out)
        ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    pairs_free(&p);
    free(syms);
    free(merges);
    free(stamp);
    free(old);
    free(touched);
    return st;
}

ty_status ty_tokenizer_learn(uint32_t vocab_size, const char *text, size_t len,
                             ty_tokenizer **out, ty_err *err)
{
    ty_bpe_learner *l;
    ty_status st = ty_bpe_learner_create(vocab_size, &l, err);
    *out = NULL;
    if (st != TY_OK)
        return st;
    if ((st = ty_bpe_learner_feed(l, text, len, err)) == TY_OK)
        st = ty_bpe_learner_finish(l, out, err);
    ty_bpe_learner_free(l);
    return st;
}
