/*
 * npy.h - the NPY header reader of npy.c, for readers of other NPY uses
 * than x and y (token ids, tokens.c).
 */
#ifndef TY_DS_NPY_H
#define TY_DS_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "common/ty.h"
#include "models/data/input.h"

typedef struct {
    char descr[32];  /* "<u2", "<i8", ... */
    size_t itemsize; /* bytes per value */
    int is_int;      /* an integer dtype */
    int is_signed;   /* int32 or int64 */
    uint32_t ndim;
    uint64_t count;       /* values: the product of the shape */
    uint64_t data_offset; /* where the values start */
} ds_npy_info;

/* Reads in's NPY preamble and header (in at its start) and checks that the
 * file holds exactly the data the header declares; leaves in at the data.
 * The dtypes are those ds_convert_npy takes (float32, float64, uint8,
 * uint16, int32, int64, little-endian); others are TY_EFORMAT. */
ty_status ds_npy_probe(ds_input *in, ds_npy_info *info, ty_err *err);

#endif
