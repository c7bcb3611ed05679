/*
 * layout.h - the constants of the TYDS file layout (see dataset.h), shared by
 * the reader (dataset.c) and the writer (file.c).
 *
 * They live apart from the writer so that opening a dataset needs only these
 * numbers and not the writer: the writer builds metas with the task names of
 * dataset.h, so dataset.c including file.h made the two a circle.
 */
#ifndef TY_DS_LAYOUT_H
#define TY_DS_LAYOUT_H

#include <stdint.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "TYDS files are little-endian and mapped as native arrays"
#endif

#define DS_MAGIC "TYDS"
#define DS_VERSION 1u
#define DS_HEADER_LEN 16u /* magic, u32 version, u64 meta_len */
#define DS_ALIGN 64u      /* x and y start at multiples of this */

static inline uint64_t ds_align_up(uint64_t v)
{
    return (v + DS_ALIGN - 1) / DS_ALIGN * DS_ALIGN;
}

#endif
