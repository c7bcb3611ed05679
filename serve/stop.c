/*
 * stop.c - stop strings across token boundaries, whole UTF-8 (stop.h).
 *
 * Two stages, byte by byte: the UTF-8 decoder (part/need: the character
 * being completed) turns raw bytes into valid text; each byte of that text
 * advances every stop string's KMP state (how many of its leading bytes
 * end the text now). Since the text before a feed's new bytes ends in the
 * held tail, and the held tail is exactly as long as the largest state,
 * every stop string that can still complete starts inside it: what lies
 * before it can be sent. Stop strings are valid UTF-8, so a match or a
 * held tail always starts on a character boundary of the (valid) text.
 */
#include "serve/stop.h"

#include <string.h>

/* The range the second byte of a sequence led by b must fall in. */
static void second_range(unsigned char b, unsigned char *lo, unsigned char *hi)
{
    *lo = 0x80;
    *hi = 0xBF;
    if (b == 0xE0)
        *lo = 0xA0; /* no overlong 3-byte forms */
    else if (b == 0xED)
        *hi = 0x9F; /* no surrogates */
    else if (b == 0xF0)
        *lo = 0x90; /* no overlong 4-byte forms */
    else if (b == 0xF4)
        *hi = 0x8F; /* nothing past U+10FFFF */
}

/* The bytes a character led by b takes, or 0 when b cannot lead one. */
static int lead_len(unsigned char b)
{
    if (b < 0x80)
        return 1;
    if (b >= 0xC2 && b <= 0xDF)
        return 2;
    if (b >= 0xE0 && b <= 0xEF)
        return 3;
    if (b >= 0xF0 && b <= 0xF4)
        return 4;
    return 0;
}

int stop_utf8_valid(const void *s, size_t n)
{
    const unsigned char *p = s;
    size_t i = 0;
    while (i < n) {
        int len = lead_len(p[i]);
        if (!len || (size_t)len > n - i)
            return 0;
        for (int j = 1; j < len; j++) {
            unsigned char lo = 0x80, hi = 0xBF;
            if (j == 1)
                second_range(p[i], &lo, &hi);
            if (p[i + j] < lo || p[i + j] > hi)
                return 0;
        }
        i += (size_t)len;
    }
    return 1;
}

ty_status stop_init(stop_matcher *m, const char *const *stops,
                    const size_t *lens, uint32_t n, ty_err *err)
{
    memset(m, 0, sizeof *m);
    m->matched = -1;
    if (n > STOP_MAX_STRINGS)
        return ty_fail(err, TY_EINVAL, "stop",
                       "stop takes at most %d strings, not %u",
                       STOP_MAX_STRINGS, n);
    for (uint32_t i = 0; i < n; i++) {
        size_t len = lens[i];
        if (len == 0 || len > STOP_MAX_BYTES)
            return ty_fail(err, TY_EINVAL, "stop",
                           "stop string %u must be 1 to %d bytes, not %zu", i,
                           STOP_MAX_BYTES, len);
        if (!stop_utf8_valid(stops[i], len))
            return ty_fail(err, TY_EINVAL, "stop",
                           "stop string %u is not valid UTF-8", i);
        memcpy(m->str[i], stops[i], len);
        m->len[i] = (uint16_t)len;
        /* fail[j]: the longest proper prefix of str[0..j] that is also
         * its suffix. */
        uint16_t *f = m->fail[i];
        const unsigned char *s = m->str[i];
        f[0] = 0;
        for (size_t j = 1, k = 0; j < len; j++) {
            while (k > 0 && s[j] != s[k])
                k = f[k - 1];
            if (s[j] == s[k])
                k++;
            f[j] = (uint16_t)k;
        }
    }
    m->n = n;
    return TY_OK;
}

/* Appends one byte of valid text at out[*pos] and advances the states.
 * Returns 1 when a stop string completed: *pos is then where the output
 * ends. */
static int text_byte(stop_matcher *m, unsigned char c, char *out, size_t *pos)
{
    out[(*pos)++] = (char)c;
    int best = -1;
    for (uint32_t i = 0; i < m->n; i++) {
        size_t k = m->state[i];
        const unsigned char *s = m->str[i];
        while (k > 0 && s[k] != c)
            k = m->fail[i][k - 1];
        if (s[k] == c)
            k++;
        m->state[i] = (uint16_t)k;
        if (k == m->len[i] && (best < 0 || m->len[i] > m->len[best]))
            best = (int)i;
    }
    if (best < 0)
        return 0;
    m->matched = best;
    *pos -= m->len[best];
    return 1;
}

static int text_bytes(stop_matcher *m, const unsigned char *b, size_t n,
                      char *out, size_t *pos)
{
    for (size_t i = 0; i < n; i++)
        if (text_byte(m, b[i], out, pos))
            return 1;
    return 0;
}

static const unsigned char replacement[3] = {0xEF, 0xBF, 0xBD};

/* One raw byte through the decoder into the text. Returns 1 on a match. */
static int raw_byte(stop_matcher *m, unsigned char c, char *out, size_t *pos)
{
    if (m->n_part) {
        unsigned char lo = 0x80, hi = 0xBF;
        if (m->n_part == 1)
            second_range(m->part[0], &lo, &hi);
        if (c >= lo && c <= hi) {
            m->part[m->n_part++] = c;
            if (m->n_part < m->need)
                return 0;
            m->n_part = 0;
            return text_bytes(m, m->part, m->need, out, pos);
        }
        /* The partial character ends here: one U+FFFD for it, then c
         * starts afresh. */
        m->n_part = 0;
        if (text_bytes(m, replacement, 3, out, pos))
            return 1;
    }
    int len = lead_len(c);
    if (len == 1)
        return text_byte(m, c, out, pos);
    if (!len)
        return text_bytes(m, replacement, 3, out, pos);
    m->part[0] = c;
    m->n_part = 1;
    m->need = (uint8_t)len;
    return 0;
}

/* The held tail, then n raw bytes, into out; holds back the new tail
 * unless final. Returns the bytes to send. */
static size_t run(stop_matcher *m, const unsigned char *b, size_t n, char *out,
                  int final)
{
    if (m->matched >= 0 || m->finished)
        return 0;
    size_t pos = m->n_hold;
    memcpy(out, m->hold, m->n_hold);
    m->n_hold = 0;
    for (size_t i = 0; i < n; i++)
        if (raw_byte(m, b[i], out, &pos))
            return pos;
    if (final) {
        m->finished = 1;
        if (m->n_part) {
            m->n_part = 0;
            text_bytes(m, replacement, 3, out, &pos);
        }
        return pos;
    }
    uint16_t hold = 0;
    for (uint32_t i = 0; i < m->n; i++)
        if (m->state[i] > hold)
            hold = m->state[i];
    memcpy(m->hold, out + pos - hold, hold);
    m->n_hold = hold;
    return pos - hold;
}

size_t stop_feed(stop_matcher *m, const void *bytes, size_t n, char *out)
{
    return run(m, bytes, n, out, 0);
}

size_t stop_finish(stop_matcher *m, char *out)
{
    return run(m, NULL, 0, out, 1);
}

int stop_matched(const stop_matcher *m) { return m->matched; }
