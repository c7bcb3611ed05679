/*
 * stop.h - stop strings matched across token boundaries, and whole UTF-8
 * out of byte-level tokens, for streamed generation (OpenAI's `stop`).
 *
 * A generation's text arrives a token at a time, and a token's bytes may
 * end inside a stop string or inside a UTF-8 character. The matcher is fed
 * each token's bytes and writes out what is safe to send now:
 *   - the bytes are decoded as UTF-8 first: an incomplete character at the
 *     end is held until it completes; an invalid sequence becomes U+FFFD
 *     (one per maximal invalid subpart, as Python's errors="replace"), so
 *     what comes out is always whole, valid UTF-8;
 *   - of that text, the longest tail that is still the start of a stop
 *     string is held back, and nothing else: with no stop string that
 *     could start there, everything goes out at once;
 *   - a stop string completes at the first byte where any does; the output
 *     ends just before it (the stop string is not part of the output; of
 *     several completing at the same byte, the longest, which starts
 *     first); everything after it is dropped, and later feeds give nothing.
 * At the end of the generation stop_finish gives the held tail, with a
 * dangling partial character as U+FFFD.
 *
 * The output of any cut of the same bytes into feeds is the same. Matching
 * is Knuth-Morris-Pratt per stop string: O(bytes x stop strings) per feed,
 * no allocation; the matcher is a plain struct of about 3.5 KiB.
 */
#ifndef TY_STOP_H
#define TY_STOP_H

#include <stddef.h>
#include <stdint.h>

#include "common/ty.h"

#define STOP_MAX_STRINGS 4
#define STOP_MAX_BYTES 256
/* The most bytes the matcher holds back between feeds. */
#define STOP_HOLD_MAX (STOP_MAX_BYTES - 1)
/* Bytes of out that stop_feed may write for n bytes fed (an invalid byte
 * may become U+FFFD's three bytes), and that stop_finish may write. */
#define STOP_FEED_CAP(n) (3 * (size_t)(n) + 3 + STOP_HOLD_MAX)
#define STOP_FINISH_CAP (STOP_HOLD_MAX + 3)

typedef struct {
    uint32_t n;                                      /* stop strings */
    uint16_t len[STOP_MAX_STRINGS];                  /* their bytes */
    uint16_t state[STOP_MAX_STRINGS];                /* bytes matched now */
    uint16_t fail[STOP_MAX_STRINGS][STOP_MAX_BYTES]; /* KMP prefix table */
    unsigned char str[STOP_MAX_STRINGS][STOP_MAX_BYTES];
    unsigned char part[4]; /* an incomplete char */
    uint8_t n_part, need;
    uint16_t n_hold;
    char hold[STOP_HOLD_MAX]; /* text held back */
    int matched;              /* the stop string, or -1 */
    int finished;
} stop_matcher;

/* Sets m up for n stop strings (stops[i] of lens[i] bytes; n may be 0).
 * TY_EINVAL naming "stop" with the string's index in the message: more
 * than STOP_MAX_STRINGS, one empty, over STOP_MAX_BYTES or not valid
 * UTF-8 (m is then unusable). */
ty_status stop_init(stop_matcher *m, const char *const *stops,
                    const size_t *lens, uint32_t n, ty_err *err);

/* Feeds a token's n bytes; writes the text now safe to send to out
 * (STOP_FEED_CAP(n) bytes, the caller's) and returns its length. After a
 * stop string completed, or after stop_finish, it writes nothing. */
size_t stop_feed(stop_matcher *m, const void *bytes, size_t n, char *out);

/* The generation ended (or was cut by max_tokens): writes what was held
 * back (STOP_FINISH_CAP bytes of out) and returns its length. A dangling
 * partial character becomes U+FFFD, which may itself complete a stop
 * string. Later feeds write nothing. */
size_t stop_finish(stop_matcher *m, char *out);

/* The index of the stop string that ended the output, or -1. */
int stop_matched(const stop_matcher *m);

/* 1 when the n bytes of s are valid UTF-8 (no overlong forms, surrogates
 * or code points past U+10FFFF). */
int stop_utf8_valid(const void *s, size_t n);

#endif
