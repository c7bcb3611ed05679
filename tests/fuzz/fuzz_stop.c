/*
 * fuzz_stop - serve/stop.c: stop strings and token bytes, arbitrary.
 * Input: byte 0 % 5 stop strings, each a length byte (0 is refused, as
 * are strings that are not UTF-8) and its bytes; then tokens, each a length
 * byte and its bytes (the last one cut short by the input's end). Fed
 * token by token, then whole, then a byte at a time, the output must be
 * the same each time, valid UTF-8, hold no stop string, and be what a
 * naive search gives on the decoded text: everything before the first
 * stop string to complete (the longest of those ending at that byte).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serve/stop.h"

#define FZ_MAX 4096

static unsigned char out_tok[3 * FZ_MAX + 512], out_whole[3 * FZ_MAX + 512],
    out_byte[3 * FZ_MAX + 512], text[3 * FZ_MAX + 512];

typedef struct {
    const char *s[STOP_MAX_STRINGS];
    size_t len[STOP_MAX_STRINGS];
    uint32_t n;
} stops;

/* The tokens' content bytes, their length bytes left out, into whole;
 * returns how many. */
static size_t token_bytes(const uint8_t *toks, size_t n, uint8_t *whole)
{
    size_t w = 0;
    for (size_t j = 0; j < n;) {
        size_t l = toks[j];
        if (l > n - j - 1)
            l = n - j - 1;
        memcpy(whole + w, toks + j + 1, l);
        w += l;
        j += 1 + l;
    }
    return w;
}

/* Feeds the tokens (cut: 0 as given, 1 whole, 2 a byte at a time) to a
 * matcher over st; returns the output's length. */
static size_t run(const stops *st, const uint8_t *toks, size_t n, int cut,
                  unsigned char *out, int *matched)
{
    stop_matcher m;
    ty_err err = {0};
    if (stop_init(&m, st->s, st->len, st->n, &err) != TY_OK)
        abort();
    size_t g = 0;
    char buf[STOP_FEED_CAP(256)];
    if (cut == 0) {
        for (size_t i = 0; i < n;) {
            size_t len = toks[i];
            if (len > n - i - 1)
                len = n - i - 1;
            size_t k = stop_feed(&m, toks + i + 1, len, buf);
            if (k > STOP_FEED_CAP(len))
                abort();
            memcpy(out + g, buf, k);
            g += k;
            i += 1 + len;
        }
    } else {
        static uint8_t whole[FZ_MAX];
        const size_t w = token_bytes(toks, n, whole);
        if (cut == 1) {
            /* every token's bytes in one feed */
            char *big = malloc(STOP_FEED_CAP(w));
            if (!big)
                abort();
            size_t k = stop_feed(&m, whole, w, big);
            memcpy(out + g, big, k);
            g += k;
            free(big);
        } else {
            /* one byte of token content at a time */
            for (size_t j = 0; j < w; j++) {
                size_t k = stop_feed(&m, whole + j, 1, buf);
                memcpy(out + g, buf, k);
                g += k;
            }
        }
    }
    char fin[STOP_FINISH_CAP];
    size_t k = stop_finish(&m, fin);
    memcpy(out + g, fin, k);
    g += k;
    *matched = stop_matched(&m);
    return g;
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t size)
{
    if (!size || size > FZ_MAX)
        return 0;
    stops st = {.n = d[0] % 5};
    size_t i = 1;
    for (uint32_t k = 0; k < st.n; k++) {
        if (i >= size)
            return 0;
        size_t len = d[i++];
        if (len > size - i)
            return 0;
        st.s[k] = (const char *)d + i;
        st.len[k] = len;
        i += len;
    }
    stop_matcher probe;
    ty_err err = {0};
    int valid = 1;
    for (uint32_t k = 0; k < st.n; k++)
        valid = valid && st.len[k] && stop_utf8_valid(st.s[k], st.len[k]);
    ty_status s = stop_init(&probe, st.s, st.len, st.n, &err);
    if ((s == TY_OK) != valid || (s != TY_OK && !err.msg[0]))
        abort();
    if (s != TY_OK)
        return 0;
    const uint8_t *toks = d + i;
    size_t n = size - i;
    int m0, m1, m2, mt;
    size_t g0 = run(&st, toks, n, 0, out_tok, &m0);
    size_t g1 = run(&st, toks, n, 1, out_whole, &m1);
    size_t g2 = run(&st, toks, n, 2, out_byte, &m2);
    if (g0 != g1 || g0 != g2 || memcmp(out_tok, out_whole, g0) ||
        memcmp(out_tok, out_byte, g0) || m0 != m1 || m0 != m2)
        abort();
    if (!stop_utf8_valid(out_tok, g0))
        abort();
    for (uint32_t k = 0; k < st.n; k++)
        if (memmem(out_tok, g0, st.s[k], st.len[k]))
            abort();
    /* The naive answer: the decoded text (no stop strings), searched. */
    stops none = {.n = 0};
    size_t t = run(&none, toks, n, 0, text, &mt);
    size_t best_end = SIZE_MAX, best_start = 0;
    int best = -1;
    for (uint32_t k = 0; k < st.n; k++) {
        unsigned char *hit = memmem(text, t, st.s[k], st.len[k]);
        if (!hit)
            continue;
        size_t start = (size_t)(hit - text), end = start + st.len[k];
        if (end < best_end || (end == best_end && start < best_start)) {
            best_end = end;
            best_start = start;
            best = (int)k;
        }
    }
    size_t want = best < 0 ? t : best_start;
    if (g0 != want || memcmp(out_tok, text, want))
        abort();
    if ((best < 0) != (m0 < 0) ||
        (best >= 0 && (st.len[m0] != st.len[best] ||
                       memcmp(st.s[m0], st.s[best], st.len[best]))))
        abort();
    return 0;
}
