/*
 * tokens.h - the pieces of the text and tokens converters (tokens.c) that
 * tests and fuzz targets reach on their own: a streaming UTF-8 check that
 * reports byte offsets, and llm.c's .bin header check.
 */
#ifndef TY_DS_TOKENS_H
#define TY_DS_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#include "common/ty.h"

/* llm.c's token files (dev/data/data_common.py write_datafile): 256
 * little-endian int32 - magic, version, token count, zeros - then the
 * tokens as uint16. */
#define DS_BIN_MAGIC 20240520
#define DS_BIN_VERSION 1
#define DS_BIN_HEADER_BYTES 1024u

/* A UTF-8 check fed in pieces: the same verdict whatever the cut. */
typedef struct {
    uint64_t offset;      /* bytes fed so far */
    uint64_t seq_start;   /* where the sequence being read starts */
    unsigned need;        /* continuation bytes still to come */
    unsigned char lo, hi; /* the range the next continuation byte must be in */
} ds_utf8_check;

void ds_utf8_check_init(ds_utf8_check *c);

/* Feeds n bytes. Returns 1 while everything fed is (a prefix of) valid
 * UTF-8; else 0 with *bad the byte offset where the bad sequence starts
 * (so the check stops meaning anything: do not feed it on). Overlong
 * forms, surrogates and code points past U+10FFFF are invalid. */
int ds_utf8_check_feed(ds_utf8_check *c, const unsigned char *p, size_t n,
                       uint64_t *bad);

/* At the end of the input: 1 if it ended between sequences, else 0 with
 * *bad where the cut sequence starts. */
int ds_utf8_check_end(const ds_utf8_check *c, uint64_t *bad);

/* Checks an llm.c .bin header (got bytes at hdr, DS_BIN_HEADER_BYTES when
 * the file is long enough) against the file's size; *count gets the token
 * count. TY_EFORMAT naming the offset and what was found: a short header,
 * a bad magic (offset 0), version (offset 4) or count (offset 8), or a
 * count that disagrees with the bytes after the header. Messages name
 * field "file". */
ty_status ds_bin_header_check(const unsigned char *hdr, size_t got,
                              uint64_t file_size, uint64_t *count, ty_err *err);

#endif
