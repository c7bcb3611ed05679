/*
 * multipart.h - a streaming multipart/form-data parser (RFC 7578, RFC 2046).
 *
 * Bytes are fed in whatever chunks the network delivers; part data is handed
 * to callbacks as it arrives, so an upload of any size passes through a
 * bounded amount of memory (the part headers, at most MP_MAX_HEADER bytes).
 * The parser never allocates after creation.
 */
#ifndef TY_MULTIPART_H
#define TY_MULTIPART_H

#include <stddef.h>

#include "common/ty.h"

#define MP_MAX_BOUNDARY 70
#define MP_MAX_HEADER 16384

typedef struct {
    /* A part starts. name is its form field name (never NULL; may be empty),
     * filename is NULL when the part has none, content_type is NULL when the
     * part did not give one. Return TY_OK to go on; anything else stops the
     * parse and is returned from mp_parser_feed (with err filled by you). */
    ty_status (*on_part_begin)(void *ctx, const char *name,
                               const char *filename, const char *content_type,
                               ty_err *err);
    ty_status (*on_part_data)(void *ctx, const char *data, size_t len,
                              ty_err *err);
    ty_status (*on_part_end)(void *ctx, ty_err *err);
} mp_callbacks;

typedef struct mp_parser mp_parser;

/* Extracts the boundary parameter of a multipart/form-data Content-Type into
 * boundary (MP_MAX_BOUNDARY + 1 bytes). TY_EINVAL when the type is not
 * multipart/form-data or the boundary is missing or invalid. */
ty_status mp_boundary_from_content_type(const char *content_type,
                                        char *boundary, ty_err *err);

/* NULL when out of memory. cb and ctx are borrowed for the parser's life. */
mp_parser *mp_parser_create(const char *boundary, const mp_callbacks *cb,
                            void *ctx);
void mp_parser_destroy(mp_parser *p);

/* Consumes len bytes. TY_EFORMAT on malformed input (message says what),
 * or a callback's status. After an error the parser must not be fed again. */
ty_status mp_parser_feed(mp_parser *p, const char *data, size_t len,
                         ty_err *err);

/* Checks that the closing boundary was seen. TY_EFORMAT if not. */
ty_status mp_parser_finish(mp_parser *p, ty_err *err);

#endif
