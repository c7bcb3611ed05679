/*
 * tensor.h - KServe v2 tensors to and from the model's float32: the
 * datatypes of the protocol, tensor data as JSON text or as raw
 * little-endian bytes (Triton's binary tensor data extension), the split of
 * a binary body into its JSON header and its data, and the strings of the
 * classification extension ("score:index[:label]").
 *
 * Every value is checked against its declared datatype before it becomes a
 * float: an integer type takes only integers in its range (INT8 200, UINT8
 * -5 and UINT8 1.5 are refused), a float type only values that are finite
 * in it and in float32 (FP16 1e40, FP64 1e300 are refused), BOOL only
 * true/false (JSON) or the bytes 0/1 (binary). FP16 and BF16 values from
 * JSON are rounded to their type first, so JSON and binary data of the same
 * tensor give the same floats. Errors name the input: `input "x": ...`.
 *
 * All functions are pure (bytes in, floats or bytes out, an error out), so
 * a fuzzer can call them on arbitrary bytes (tests/fuzz/fuzz_tensor.c).
 */
#ifndef TY_SERVE_TENSOR_H
#define TY_SERVE_TENSOR_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/ty.h"
#include "serve/decode.h"

typedef enum {
    SERVE_DT_BOOL = 0,
    SERVE_DT_UINT8,
    SERVE_DT_UINT16,
    SERVE_DT_UINT32,
    SERVE_DT_UINT64,
    SERVE_DT_INT8,
    SERVE_DT_INT16,
    SERVE_DT_INT32,
    SERVE_DT_INT64,
    SERVE_DT_FP16,
    SERVE_DT_BF16,
    SERVE_DT_FP32,
    SERVE_DT_FP64,
    SERVE_DT_BYTES, /* strings: named, never taken as a model input */
    SERVE_DT_COUNT
} serve_dtype;

/* The datatype named name ("FP32"); 0 when there is none of that name. */
int serve_dtype_parse(const char *name, serve_dtype *dt);
const char *serve_dtype_name(serve_dtype dt);
/* Bytes per element in binary data (BOOL 1); 0 for BYTES. */
size_t serve_dtype_size(serve_dtype dt);

/* The n elements of data (JSON: an array of values, nested or flat,
 * row-major; serve_span from serve_infer_scan) into x (n floats), each
 * checked against dt. TY_EINVAL naming the input (name) and the element:
 * `input "x": data[3]: 200 is out of range for INT8 (-128 to 127)`. */
ty_status serve_tensor_from_json(serve_dtype dt, serve_span data, uint64_t n,
                                 const char *name, float *x, ty_err *err);

/* The n elements of raw (len bytes, little-endian, row-major) into x, each
 * checked against dt. len must be n * serve_dtype_size(dt) exactly:
 * TY_EINVAL saying how many bytes were expected otherwise. */
ty_status serve_tensor_from_binary(serve_dtype dt, const void *raw, size_t len,
                                   uint64_t n, const char *name, float *x,
                                   ty_err *err);

/* A binary request body: the JSON header is its first header_len bytes
 * (the Inference-Header-Content-Length header's text, NULL when absent),
 * the tensor data the rest. *json_len gets the header's length: len when
 * header_len is NULL (all JSON). TY_EINVAL when the header's value is not a
 * decimal within the body. A value of 0 means a body of raw data alone
 * (Triton's raw binary request). */
ty_status serve_tensor_split(size_t len, const char *header_len,
                             size_t *json_len, ty_err *err);

/* Row's k indices by value, the largest first (ties: the lower index
 * first; NaN last), into idx: its first n are the top n. idx and scratch
 * each have room for k. O(k log k). */
void serve_tensor_top(const float *row, uint32_t k, uint32_t *idx,
                      uint32_t *scratch);

/* A classification string "score:index[:label]" into out (n bytes, cut
 * there); label is the class's entry in classes (a string, or an integer
 * written in decimal), none when classes is NULL or too short. The score
 * is the shortest decimal that reads back as the float. Returns its
 * length. */
size_t serve_tensor_class_text(float score, uint32_t index,
                               const json_t *classes, char *out, size_t n);

/* IEEE half and bfloat16 bits to float, and the nearest half (ties to
 * even) of v; *finite 0 when v rounds beyond the half range. */
float serve_half_to_float(uint16_t h);
float serve_bf16_to_float(uint16_t h);
double serve_round_half(double v, int *finite);

#endif
