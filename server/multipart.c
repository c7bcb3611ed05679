/*
 * multipart.c - streaming multipart/form-data parser (see multipart.h).
 *
 * The body is scanned for the delimiter "\r\n--<boundary>". A boundary cannot
 * contain CR, so when a partial match fails, none of the matched bytes can
 * start a new match: they are plain data and are emitted from the delimiter
 * text itself. That keeps the scan a single pass with no look-back buffer.
 * The very first delimiter may come without the leading CRLF; the parser
 * starts as if a CRLF had just been seen in the (discarded) preamble.
 */
#include "server/multipart.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef enum {
    MP_PREAMBLE,    /* discarding until the first delimiter */
    MP_AFTER_DELIM, /* expecting "--" (end) or CRLF (headers follow) */
    MP_HEADERS,     /* collecting part headers up to the blank line */
    MP_BODY,        /* part data, scanning for the delimiter */
    MP_EPILOGUE,    /* after the closing delimiter; ignored */
    MP_FAILED
} mp_state;

struct mp_parser {
    mp_state state;
    const mp_callbacks *cb;
    void *ctx;
    char delim[MP_MAX_BOUNDARY + 5]; /* "\r\n--" + boundary */
    size_t delim_len;
    size_t matched; /* bytes of delim matched so far */
    char after[2];  /* the two bytes after a delimiter */
    size_t after_len;
    char header[MP_MAX_HEADER + 1];
    size_t header_len;
};

static int boundary_char_ok(int c)
{
    /* RFC 2046 bchars, which exclude CR and LF. */
    return isalnum(c) || strchr("'()+_,-./:=? ", c) != NULL;
}

ty_status mp_boundary_from_content_type(const char *ct, char *boundary,
                                        ty_err *err)
{
    if (!ct || strncasecmp(ct, "multipart/form-data", 19) != 0)
        return ty_fail(err, TY_EINVAL, NULL,
                       "Content-Type must be multipart/form-data");
    const char *p = ct + 19;
    while (*p) {
        while (*p == ';' || *p == ' ' || *p == '\t')
            p++;
        const char *key = p;
        while (*p && *p != '=' && *p != ';')
            p++;
        size_t klen = (size_t)(p - key);
        while (klen > 0 && (key[klen - 1] == ' ' || key[klen - 1] == '\t'))
            klen--;
        if (*p != '=') {
            continue;
        }
        p++;
        char val[MP_MAX_BOUNDARY + 2];
        size_t vlen = 0;
        int too_long = 0;
        if (*p == '"') {
            p++;
            while (*p && *p != '"') {
                if (*p == '\\' && p[1])
                    p++;
                if (vlen < sizeof val - 1)
                    val[vlen++] = *p;
                else
                    too_long = 1;
                p++;
            }
            if (*p == '"')
                p++;
        } else {
            while (*p && *p != ';' && *p != ' ' && *p != '\t') {
                if (vlen < sizeof val - 1)
                    val[vlen++] = *p;
                else
                    too_long = 1;
                p++;
            }
        }
        val[vlen] = '\0';
        if (klen == 8 && strncasecmp(key, "boundary", 8) == 0) {
            if (too_long || vlen == 0 || vlen > MP_MAX_BOUNDARY)
                return ty_fail(err, TY_EINVAL, NULL,
                               "the multipart boundary must be 1 to %d "
                               "characters long",
                               MP_MAX_BOUNDARY);
            for (size_t i = 0; i < vlen; i++)
                if (!boundary_char_ok((unsigned char)val[i]))
                    return ty_fail(err, TY_EINVAL, NULL,
                                   "the multipart boundary contains an invalid "
                                   "character");
            memcpy(boundary, val, vlen + 1);
            return TY_OK;
        }
    }
    return ty_fail(
        err, TY_EINVAL, NULL,
        "Content-Type multipart/form-data has no boundary parameter");
}

mp_parser *mp_parser_create(const char *boundary, const mp_callbacks *cb,
                            void *ctx)
{
    size_t blen = strlen(boundary);
    if (blen == 0 || blen > MP_MAX_BOUNDARY)
        return NULL;
    mp_parser *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    memcpy(p->delim, "\r\n--", 4);
    memcpy(p->delim + 4, boundary, blen);
    p->delim_len = 4 + blen;
    p->cb = cb;
    p->ctx = ctx;
    p->state = MP_PREAMBLE;
    p->matched = 2; /* as if the preamble ended in CRLF */
    return p;
}

void mp_parser_destroy(mp_parser *p) { free(p); }

/* Copies the value of parameter `key` from a Content-Disposition header value
 * into out; returns 1 if present. */
static int disposition_param(const char *v, const char *key, char *out,
                             size_t n)
{
    size_t klen = strlen(key);
    const char *p = v;
    while ((p = strchr(p, ';')) != NULL) {
        p++;
        while (*p == ' ' || *p == '\t')
            p++;
        if (strncasecmp(p, key, klen) != 0 || p[klen] != '=')
            continue;
        p += klen + 1;
        size_t len = 0;
        if (*p == '"') {
            p++;
            while (*p && *p != '"') {
                if (*p == '\\' && (p[1] == '"' || p[1] == '\\'))
                    p++;
                if (len < n - 1)
                    out[len++] = *p;
                p++;
            }
        } else {
            while (*p && *p != ';' && *p != ' ' && *p != '\t') {
                if (len < n - 1)
                    out[len++] = *p;
                p++;
            }
        }
        out[len] = '\0';
        return 1;
    }
    return 0;
}

static ty_status parse_headers(mp_parser *p, ty_err *err)
{
    char name[256] = "", filename[256], ctype[256];
    int have_disp = 0, have_file = 0, have_ctype = 0;
    char *save = NULL;
    p->header[p->header_len] = '\0';
    for (char *line = strtok_r(p->header, "\r\n", &save); line;
         line = strtok_r(NULL, "\r\n", &save)) {
        char *colon = strchr(line, ':');
        if (!colon)
            return ty_fail(err, TY_EFORMAT, NULL,
                           "malformed multipart part header: no colon");
        *colon = '\0';
        char *val = colon + 1;
        while (*val == ' ' || *val == '\t')
            val++;
        if (strcasecmp(line, "Content-Disposition") == 0) {
            if (strncasecmp(val, "form-data", 9) != 0)
                return ty_fail(err, TY_EFORMAT, NULL,
                               "multipart part is not form-data");
            have_disp = disposition_param(val, "name", name, sizeof name);
            have_file =
                disposition_param(val, "filename", filename, sizeof filename);
        } else if (strcasecmp(line, "Content-Type") == 0) {
            snprintf(ctype, sizeof ctype, "%s", val);
            have_ctype = 1;
        }
    }
    if (!have_disp)
        return ty_fail(err, TY_EFORMAT, NULL,
                       "multipart part has no Content-Disposition name");
    return p->cb->on_part_begin(p->ctx, name, have_file ? filename : NULL,
                                have_ctype ? ctype : NULL, err);
}

static ty_status emit(mp_parser *p, const char *data, size_t len, ty_err *err)
{
    if (len == 0 || p->state != MP_BODY)
        return TY_OK;
    return p->cb->on_part_data(p->ctx, data, len, err);
}

static ty_status fail(mp_parser *p, ty_status st)
{
    p->state = MP_FAILED;
    return st;
}

ty_status mp_parser_feed(mp_parser *p, const char *data, size_t len,
                         ty_err *err)
{
    ty_status st;
    size_t i = 0;
    while (i < len) {
        switch (p->state) {
            case MP_PREAMBLE:
            case MP_BODY: {
                size_t span_start = i;
                while (i < len) {
                    if (p->matched == 0) {
                        const char *cr = memchr(data + i, '\r', len - i);
                        if (!cr) {
                            i = len;
                            break;
                        }
                        i = (size_t)(cr - data);
                    }
                    if (data[i] == p->delim[p->matched]) {
                        p->matched++;
                        i++;
                        if (p->matched == p->delim_len)
                            break;
                        continue;
                    }
                    /* Mismatch: the matched prefix (a CRLF plus part of the
                 * boundary, which has no CR) is data. Flush what precedes it
                 * in this chunk, then the prefix from the delimiter text. */
                    size_t prefix = p->matched;
                    p->matched = 0;
                    if (prefix > 0) {
                        size_t in_chunk = i - span_start;
                        size_t from_chunk =
                            in_chunk < prefix ? in_chunk : prefix;
                        size_t from_delim = prefix - from_chunk;
                        /* Bytes of the prefix that arrived in earlier chunks were
                     * held back; emit them from the delimiter text. */
                        if ((st = emit(p, data + span_start,
                                       in_chunk - from_chunk, err)) != TY_OK)
                            return fail(p, st);
                        if ((st = emit(p, p->delim, from_delim, err)) != TY_OK)
                            return fail(p, st);
                        if ((st = emit(p, p->delim + from_delim, from_chunk,
                                       err)) != TY_OK)
                            return fail(p, st);
                        span_start = i;
                    }
                    /* Re-examine data[i] against the delimiter's first byte. */
                }
                if (p->matched == p->delim_len) {
                    /* Everything in this chunk before the delimiter is data. */
                    size_t in_chunk = i - span_start;
                    size_t delim_in_chunk =
                        in_chunk < p->delim_len ? in_chunk : p->delim_len;
                    if ((st = emit(p, data + span_start,
                                   in_chunk - delim_in_chunk, err)) != TY_OK)
                        return fail(p, st);
                    if (p->state == MP_BODY &&
                        (st = p->cb->on_part_end(p->ctx, err)) != TY_OK)
                        return fail(p, st);
                    p->matched = 0;
                    p->after_len = 0;
                    p->state = MP_AFTER_DELIM;
                } else {
                    /* Hold back the bytes that may be the start of a delimiter. */
                    size_t in_chunk = i - span_start;
                    size_t held = p->matched < in_chunk ? p->matched : in_chunk;
                    if ((st = emit(p, data + span_start, in_chunk - held,
                                   err)) != TY_OK)
                        return fail(p, st);
                }
                break;
            }
            case MP_AFTER_DELIM:
                p->after[p->after_len++] = data[i++];
                if (p->after_len < 2)
                    break;
                if (p->after[0] == '-' && p->after[1] == '-') {
                    p->state = MP_EPILOGUE;
                } else if (p->after[0] == '\r' && p->after[1] == '\n') {
                    p->header_len = 0;
                    p->state = MP_HEADERS;
                } else {
                    return fail(p,
                                ty_fail(err, TY_EFORMAT, NULL,
                                        "malformed multipart body: unexpected "
                                        "bytes after a boundary"));
                }
                break;
            case MP_HEADERS:
                if (p->header_len >= MP_MAX_HEADER)
                    return fail(p, ty_fail(err, TY_EFORMAT, NULL,
                                           "multipart part headers are longer "
                                           "than %d bytes",
                                           MP_MAX_HEADER));
                p->header[p->header_len++] = data[i++];
                if (p->header_len == 2 && memcmp(p->header, "\r\n", 2) == 0) {
                    return fail(p, ty_fail(err, TY_EFORMAT, NULL,
                                           "multipart part has no headers"));
                }
                if (p->header_len >= 4 &&
                    memcmp(p->header + p->header_len - 4, "\r\n\r\n", 4) == 0) {
                    p->header_len -= 4;
                    if ((st = parse_headers(p, err)) != TY_OK)
                        return fail(p, st);
                    p->matched = 0;
                    p->state = MP_BODY;
                }
                break;
            case MP_EPILOGUE: return TY_OK;
            case MP_FAILED:
                return ty_fail(err, TY_EINTERNAL, NULL,
                               "multipart parser used after an error");
        }
    }
    return TY_OK;
}

ty_status mp_parser_finish(mp_parser *p, ty_err *err)
{
    if (p->state == MP_EPILOGUE)
        return TY_OK;
    if (p->state == MP_FAILED)
        return ty_fail(err, TY_EFORMAT, NULL, "malformed multipart body");
    return ty_fail(err, TY_EFORMAT, NULL,
                   "the multipart body ended before its closing boundary "
                   "(was the upload cut short?)");
}
