/*
 * tokenizer_pretok.c - the GPT-2 pre-tokenizer, and the small tables the
 * tokenizers share (a uint64 hash map, GPT-2's byte-to-unicode mapping).
 *
 * The pre-tokenizer splits text as the regex of GPT-2's encoder.py (and of
 * the `tokenizers` library's ByteLevel pre-tokenizer, run by Oniguruma):
 *
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *
 * written out as the backtracking matcher takes it: at each position the
 * first alternative that matches wins. Every character is in exactly one
 * class of letter, number, white space or other (tokenizer_unicode.c), so
 * a run of one class (with an optional leading space before a non-space
 * run) is a piece; a white-space run followed by a non-space character
 * leaves its last character to the next piece (the (?!\S) backtrack).
 */
#include <stdlib.h>
#include <string.h>

#include "models/data/tokenizer.h"
#include "models/data/tokenizer_int.h"

/* ---- Unicode classes ----------------------------------------------------- */

tok_uc_class tok_uc_class_of(uint32_t cp)
{
    size_t lo = 0, hi = tok_uc_num_ranges;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < tok_uc_ranges[mid].lo)
            hi = mid;
        else if (cp > tok_uc_ranges[mid].hi)
            lo = mid + 1;
        else
            return (tok_uc_class)tok_uc_ranges[mid].cls;
    }
    return TOK_UC_OTHER;
}

uint32_t tok_utf8_at(const unsigned char *s, size_t n, size_t i, size_t *len)
{
    unsigned char b = s[i];
    if (b < 0x80 || i + 1 >= n) {
        *len = 1;
        return b;
    }
    if (b < 0xE0) {
        *len = 2;
        return (uint32_t)(b & 0x1F) << 6 | (s[i + 1] & 0x3F);
    }
    if (b < 0xF0 || i + 3 > n) {
        *len = i + 3 <= n ? 3 : n - i;
        if (*len < 3)
            return b;
        return (uint32_t)(b & 0x0F) << 12 | (uint32_t)(s[i + 1] & 0x3F) << 6 |
               (s[i + 2] & 0x3F);
    }
    if (i + 4 > n) {
        *len = n - i;
        return b;
    }
    *len = 4;
    return (uint32_t)(b & 0x07) << 18 | (uint32_t)(s[i + 1] & 0x3F) << 12 |
           (uint32_t)(s[i + 2] & 0x3F) << 6 | (s[i + 3] & 0x3F);
}

/* The class of the character at s[i] and its length. */
static tok_uc_class class_at(const unsigned char *s, size_t n, size_t i,
                             size_t *len)
{
    unsigned char b = s[i];
    if (b < 0x80) {
        *len = 1;
        if ((b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z'))
            return TOK_UC_LETTER;
        if (b >= '0' && b <= '9')
            return TOK_UC_NUMBER;
        if (b == ' ' || (b >= 9 && b <= 13))
            return TOK_UC_SPACE;
        return TOK_UC_OTHER;
    }
    return tok_uc_class_of(tok_utf8_at(s, n, i, len));
}

/* The length of a contraction ('s 't 're 've 'm 'll 'd) at s[i], or 0. */
static size_t contraction(const unsigned char *s, size_t n, size_t i)
{
    if (s[i] != '\'' || i + 1 >= n)
        return 0;
    unsigned char c = s[i + 1];
    if (c == 's' || c == 't' || c == 'm' || c == 'd')
        return 2;
    if (i + 2 < n &&
        ((c == 'r' && s[i + 2] == 'e') || (c == 'v' && s[i + 2] == 'e') ||
         (c == 'l' && s[i + 2] == 'l')))
        return 3;
    return 0;
}

ty_status tok_pretokenize(const unsigned char *s, size_t n, tok_piece_fn fn,
                          void *ctx, ty_err *err)
{
    size_t i = 0, len;
    ty_status st;
    while (i < n) {
        size_t start = i, k = contraction(s, n, i);
        if (k) {
            i += k;
            goto piece;
        }
        size_t at = s[i] == ' ' && i + 1 < n ? i + 1 : i;
        tok_uc_class c = class_at(s, n, at, &len);
        if (c != TOK_UC_SPACE) { /* ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s...]+` */
            i = at + len;
            while (i < n && class_at(s, n, i, &len) == c)
                i += len;
            goto piece;
        }
        /* white space: the run, less its last character when a non-space
         * character follows and the run is longer than one */
        size_t last = i;
        class_at(s, n, i, &len);
        i += len;
        while (i < n && class_at(s, n, i, &len) == TOK_UC_SPACE) {
            last = i;
            i += len;
        }
        if (i < n && last > start)
            i = last;
    piece:
        if ((st = fn(ctx, s + start, i - start, err)) != TY_OK)
            return st;
    }
    return TY_OK;
}

/* ---- GPT-2's bytes_to_unicode -------------------------------------------- */

static int printable_byte(unsigned b)
{
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) ||
           (b >= 0xAE && b <= 0xFF);
}

uint32_t tok_byte_char(unsigned b)
{
    if (printable_byte(b))
        return b;
    unsigned k = 0; /* the others, in byte order, from 256 on */
    for (unsigned x = 0; x < b; x++)
        k += !printable_byte(x);
    return 256 + k;
}

int tok_char_byte(uint32_t cp)
{
    if (cp < 256)
        return printable_byte(cp) ? (int)cp : -1;
    if (cp >= 256 + 68) /* 68 bytes are not printable */
        return -1;
    unsigned k = cp - 256;
    for (unsigned x = 0; x < 256; x++)
        if (!printable_byte(x) && k-- == 0)
            return (int)x;
    return -1;
}

/* ---- a uint64 -> uint64 hash map ---------------------------------------- */

#define EMPTY UINT64_MAX

static size_t slot_of(uint64_t key, size_t cap)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return (size_t)key & (cap - 1);
}

ty_status tok_map_init(tok_map *m, size_t expect)
{
    size_t cap = 16;
    while (cap < expect * 2)
        cap <<= 1;
    m->keys = malloc(cap * sizeof *m->keys);
    m->vals = malloc(cap * sizeof *m->vals);
    m->cap = cap;
    m->n = 0;
    if (!m->keys || !m->vals) {
        tok_map_free(m);
        return TY_ENOMEM;
    }
    memset(m->keys, 0xFF, cap * sizeof *m->keys);
    return TY_OK;
}

void tok_map_free(tok_map *m)
{
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

static ty_status grow(tok_map *m)
{
    tok_map bigger;
    if (tok_map_init(&bigger, m->cap) != TY_OK)
        return TY_ENOMEM;
    for (size_t i = 0; i < m->cap; i++)
        if (m->keys[i] != EMPTY)
            tok_map_put(&bigger, m->keys[i], m->vals[i]);
    tok_map_free(m);
    *m = bigger;
    return TY_OK;
}

ty_status tok_map_put(tok_map *m, uint64_t key, uint64_t val)
{
    if ((m->n + 1) * 2 > m->cap && grow(m) != TY_OK)
        return TY_ENOMEM;
    size_t i = slot_of(key, m->cap);
    while (m->keys[i] != EMPTY && m->keys[i] != key)
        i = (i + 1) & (m->cap - 1);
    if (m->keys[i] == EMPTY) {
        m->keys[i] = key;
        m->n++;
    }
    m->vals[i] = val;
    return TY_OK;
}

int tok_map_get(const tok_map *m, uint64_t key, uint64_t *val)
{
    if (!m->cap)
        return 0;
    size_t i = slot_of(key, m->cap);
    while (m->keys[i] != EMPTY) {
        if (m->keys[i] == key) {
            *val = m->vals[i];
            return 1;
        }
        i = (i + 1) & (m->cap - 1);
    }
    return 0;
}

uint64_t tok_hash_bytes(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ULL;
    }
    return h == EMPTY ? 0 : h;
}
