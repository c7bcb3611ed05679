/*
 * dataset.h - trainyard's one internal dataset format, and the converters
 * from the upload formats (CSV, IDX, NPY) into it.
 *
 * A dataset file ("TYDS") is self-describing and memory-mapped for training:
 *
 *   offset 0   "TYDS"                      magic, 4 bytes
 *   offset 4   u32 version (1)             little-endian
 *   offset 8   u64 meta_len                length of the JSON header
 *   offset 16  meta_len bytes of JSON      (see "meta" below)
 *   ...        zero padding to a multiple of 64
 *   x          num_examples * features values of x_dtype, row-major
 *   ...        zero padding to a multiple of 64
 *   y          classification: num_examples int32 class indices
 *              regression:     num_examples * y_dim float32 values
 *
 * meta (a JSON object) always has: "version" 1, "format" ("csv"|"idx"|"npy"),
 * "task" ("classification"|"regression"), "num_examples", "input_shape"
 * (array of 1..4 positive ints), "features" (their product), "x_dtype"
 * ("float32"|"uint8"), "y_dim" (1 for classification), "preprocess"
 * ("scale_255" for image bytes, "standardize" for CSV features, "tabular"
 * for CSV features with missing cells or text, "tokens" for token ids of a
 * text column (ds_convert_csv_text: the values as they are), "none"),
 * "x_offset", "y_offset" (byte offsets of x and y in the file).
 * Classification adds "num_classes" and "classes" (the label values in class
 * index order; y holds indices into them). CSV adds "feature_names" (one
 * per feature: a one-hot feature is "column=category"), "label_column" and
 * "columns" (the feature columns' schema, models/data/tabular.h).
 *
 * The class rule, the same for every format: the classes are the distinct
 * labels that occur, sorted.
 *   - Integer labels (IDX bytes, NPY class numbers, a CSV column whose every
 *     label is an integer written canonically, see ds_label_int) are JSON
 *     integers in increasing numeric order. So labels 0..K-1 that all occur
 *     have class index i = label i, and the same labels give the same classes
 *     and indices as CSV, NPY or IDX.
 *   - A CSV column whose labels are all numbers but not all such integers
 *     ("2.5", "1e3", "007") keeps them as the strings written (a JSON number
 *     would print 0.1 as 0.10000000000000001 and merge "1.0" with "1.00"),
 *     in increasing numeric order; equal values ("1", "1.0") bytewise.
 *   - Any other CSV column: strings, bytewise (so by Unicode code point).
 * Datasets converted before this rule (CSV classes as strings in order of
 * first appearance, IDX and NPY classes 0..max label) stay as they were
 * stored; ty_dataset_class_map lets them meet datasets converted since.
 *
 * Converters stream: they read their inputs in bounded chunks and write the
 * output as they go, never holding a whole upload in memory (the output's
 * label column and the class list are the only things kept). They validate
 * while parsing and fail with TY_EFORMAT and a message naming the problem
 * (for CSV, the 1-based line and column), TY_ETOOBIG past the limits below,
 * TY_EIO on I/O errors. On success out_path exists and has been fsynced; on
 * failure out_path is removed. err->field names the upload part at fault:
 * "file" (CSV), "images"/"labels" (IDX), "x"/"y" (NPY), or "label_column"
 * when the CSV has no column of that name.
 */
#ifndef TY_DATASET_H
#define TY_DATASET_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/ty.h"
#include "models/data/tokenizer.h"

#define TY_DS_MAX_DIMS 4
#define TY_DS_MAX_FEATURES (1u << 24) /* values per example */
#define TY_DS_MAX_EXAMPLES (1u << 28)
#define TY_DS_MAX_CLASSES 100000u
#define TY_DS_MAX_LINE (1u << 20) /* bytes per CSV line */
#define TY_DS_MAX_LABEL_LEN 256u  /* bytes per CSV class label */

/* A language-modeling dataset (formats "text" and "tokens") holds one flat
 * token array, not examples: ty_dataset_open refuses it, ty_tokens_open
 * opens it (see "Token datasets" below). */
typedef enum {
    TY_TASK_CLASSIFICATION = 0,
    TY_TASK_REGRESSION = 1,
    TY_TASK_LANGUAGE_MODELING = 2
} ty_task;
typedef enum { TY_DTYPE_F32 = 0, TY_DTYPE_U8 = 1 } ty_dtype;

/* "classification"/"regression"/"language_modeling" and back; parse returns
 * -1 if unknown. */
const char *ty_task_name(ty_task t);
int ty_task_parse(const char *s);

/* An open, memory-mapped dataset file. All pointers are into the mapping and
 * valid until ty_dataset_close. */
typedef struct {
    ty_task task;
    uint32_t num_examples;
    uint32_t ndim;
    uint32_t shape[TY_DS_MAX_DIMS];
    uint64_t features; /* product of shape */
    ty_dtype x_dtype;
    uint32_t y_dim;         /* 1 for classification */
    uint32_t num_classes;   /* classification only, else 0 */
    const void *x;          /* (num_examples, features) of x_dtype */
    const int32_t *y_class; /* (num_examples) classification, else NULL */
    const float *y_value;   /* (num_examples, y_dim) regression, else NULL */
    json_t *meta;           /* owned; the header JSON */
    void *map;              /* private */
    size_t map_len;         /* private */
} ty_dataset;

/* Opens and validates a TYDS file (magic, version, meta, sizes, class
 * indices in range). On error *ds is zeroed and TY_EFORMAT/TY_EIO returned. */
ty_status ty_dataset_open(const char *path, ty_dataset *ds, ty_err *err);

/* Unmaps and frees; safe on a zeroed struct. */
void ty_dataset_close(ty_dataset *ds);

/* Copies example i's features as float32 into out (features values), without
 * any preprocessing (uint8 becomes 0..255). */
void ty_dataset_example_f32(const ty_dataset *ds, uint32_t i, float *out);

/* For each class of `from` (a classes array), writes its index in `to` into
 * map[i] (map holds json_array_size(from) entries). Fails with TY_EINVAL
 * naming the first class `to` lacks. Classes compare as JSON values, except
 * that a class not in `to` as it is matches its other spelling under the
 * class rule: the integer 3 and the string "3" (only a canonical integer
 * text, see ds_label_int: "03" and "+3" are not 3). So a dataset uploaded
 * since CSV integer labels became JSON integers still meets a dataset or a
 * model from before, whose classes are those labels as strings. */
ty_status ty_dataset_class_map(const json_t *from, const json_t *to,
                               int32_t *map, ty_err *err);

/* CSV: header row required; label_column names the target column; every other
 * column is a feature column, typed by its cells (models/data/tabular.h):
 * numeric (decimal or exponent notation; surrounding spaces allowed),
 * boolean or categorical (one-hot, at most TY_DS_CATEGORIES_DEFAULT
 * categories per column), and an empty feature cell is a missing value.
 * When every feature column is numeric and complete the dataset's
 * preprocess is "standardize", as it always was; otherwise "tabular"
 * (missing values are NaN in x). Classification labels become classes by the class rule above
 * (integers "3", "-1" are the classes 3 and -1; "2.5" or "x" strings);
 * regression labels must be numeric. Quoted fields ("a,b", with
 * "" for a quote) are accepted anywhere. Empty lines at the end are
 * ignored; a ragged row, an empty label, or a feature column with no value
 * at all is an error (NaN or Inf text makes a column categorical). CRLF line endings are accepted. Blanks around an unquoted field are
 * dropped everywhere (so "a, b" names columns "a" and "b"); quoted text is
 * kept as written. A UTF-8 byte-order mark at the start is skipped. */
ty_status ds_convert_csv(const char *csv_path, const char *label_column,
                         ty_task task, const char *out_path, ty_err *err);

/* For the flags of ds_convert_csv_flags and ds_convert_idx_flags: messages
 * say what is wrong with the file without quoting any of its bytes (column
 * names, cells, the first line, magic numbers). For files the server fetched
 * from a URL, whose content the client must not read back through errors. */
#define DS_CONVERT_NO_ECHO 1u

/* ds_convert_csv with flags (DS_CONVERT_NO_ECHO). */
ty_status ds_convert_csv_flags(const char *csv_path, const char *label_column,
                               ty_task task, unsigned flags,
                               const char *out_path, ty_err *err);

/* ds_convert_csv_flags with a limit on each categorical column's categories
 * (0: TY_DS_CATEGORIES_DEFAULT; at most TY_DS_CATEGORIES_MAX, else
 * TY_EINVAL naming "max_categories"). A column past it is TY_EFORMAT naming
 * "max_categories". */
ty_status ds_convert_csv_ex(const char *csv_path, const char *label_column,
                            ty_task task, unsigned flags,
                            uint32_t max_categories, const char *out_path,
                            ty_err *err);

/* IDX (MNIST): images is an idx3 (or idx2/idx4) ubyte file, labels an idx1
 * ubyte file; either may be gzip-compressed (detected by magic bytes, not by
 * name). input_shape is [1, rows, cols] for idx3, [cols] for idx2, [a, b, c]
 * for idx4 (N, a, b, c); x_dtype uint8; classification; preprocess
 * "scale_255". Wrong magic, non-ubyte types, truncation, trailing bytes, or
 * a label count that differs from the image count are TY_EFORMAT. */
ty_status ds_convert_idx(const char *images_path, const char *labels_path,
                         const char *out_path, ty_err *err);

/* Default of ds_idx_opts.max_inflated: the default --max-upload-bytes. */
#define TY_DS_MAX_INFLATED_DEFAULT (2ULL << 30)

/* A gzip file is inflated only as far as its header declares (a stream that
 * holds more than 64 KiB past that is refused without reading on), and the
 * compressed files of one conversion may together declare (so inflate) at
 * most max_inflated bytes: a header declaring more is refused (TY_ETOOBIG)
 * before its data is inflated. */
typedef struct {
    uint64_t max_inflated; /* in: 0 = TY_DS_MAX_INFLATED_DEFAULT */
    unsigned flags;        /* in: DS_CONVERT_NO_ECHO */
    uint64_t inflated;     /* out: bytes inflated from gzip files, also on
                              failure */
} ds_idx_opts;

/* ds_convert_idx with limits (opts may be NULL: the defaults). */
ty_status ds_convert_idx_ex(const char *images_path, const char *labels_path,
                            const char *out_path, ds_idx_opts *opts,
                            ty_err *err);

/* ds_convert_idx with flags (DS_CONVERT_NO_ECHO). */
ty_status ds_convert_idx_flags(const char *images_path, const char *labels_path,
                               unsigned flags, const char *out_path,
                               ty_err *err);

/* NPY (format 1.0/2.0/3.0, C or Fortran order, little-endian or
 * byte-order-free):
 * x of float32, float64, uint8, int32 or int64 with shape (N, ...) (1 to 4
 * dims after N; stored as float32, except uint8 which stays uint8 with
 * preprocess "scale_255"); y of the same dtypes with shape (N) or, for
 * regression, (N, k) (classification also takes (N, 1)); x of shape (N) has
 * input_shape [1]. task < 0 means: classification when y is an integer
 * type, regression otherwise. Classification needs integer-valued y from 0
 * to TY_DS_MAX_CLASSES - 1 (float y with integer values is accepted); the
 * classes are the labels that occur (the class rule above). Fortran-ordered
 * arrays are converted to C order as they are read (a block of examples at a
 * time: 16 MiB, or one example when that is larger). Object dtypes, big-endian data,
 * NaN/Inf and count mismatches are TY_EFORMAT. */
ty_status ds_convert_npy(const char *x_path, const char *y_path, int task,
                         const char *out_path, ty_err *err);

/* ---- Token datasets ---------------------------------------------------
 *
 * A language-modeling dataset is a TYDS file (same header, meta and
 * alignment) whose meta has "format" ("text"|"tokens"), "task"
 * "language_modeling", "num_tokens", "vocab_size", "token_dtype" ("uint16"
 * when vocab_size <= 65536, else "uint32"), "tokenizer" (the tokenizer's
 * description, below; null for token ids made elsewhere) and
 * "x_offset"/"y_offset" as every TYDS file: x is the flat token array
 * (num_tokens little-endian ids, so a training window is a slice of the
 * mapping), y is empty.
 *
 * A tokenizer's description (models/data/tokenizer.h loads it with
 * ty_tokenizer_load; a model trained on the dataset carries the same JSON
 * as its "trainyard.tokenizer" metadata) is self-contained:
 *   "byte"                         one token per byte, vocabulary 256 (the
 *                                  legacy form, kept; {"type": "byte"} too)
 *   {"type": "bpe", "vocab_size": N, "merges": [[l, r], ...]}
 *                                  a byte-level BPE learned here: ids 0-255
 *                                  the bytes, merge i (ids l, r) makes id
 *                                  256 + i; N = 256 + merges; the GPT-2
 *                                  pre-tokenizer, no prefix space
 *   {"type": "huggingface", "vocab_size": N, "tokenizer_json": {...}}
 *                                  a Hugging Face tokenizer.json as uploaded
 *                                  (a bare tokenizer.json loads too)
 * Sizes: a learned BPE of 65,536 ids is about 1 MB of JSON, GPT-2's
 * tokenizer.json 1.4 MB: both well inside a TYDS meta (no limit) and a
 * safetensors header (ST_MAX_HEADER, 100 MB), so the model file carries
 * the tokenizer itself. */

#define TY_DS_MAX_VOCAB (1u << 24)
#define TY_DS_BYTE_VOCAB 256u

/* An open, memory-mapped token dataset; pointers valid until
 * ty_tokens_close. */
typedef struct {
    uint64_t num_tokens;
    uint32_t vocab_size;
    uint32_t token_size; /* bytes per id: 2 or 4 */
    int byte_tokenizer;  /* 1: token i is byte i of the text */
    const void *tokens;  /* num_tokens ids of token_size bytes */
    json_t *meta;        /* owned; the header JSON */
    void *map;           /* private */
    size_t map_len;      /* private */
} ty_tokens;

/* Opens and validates a token dataset (meta, sizes, every id below
 * vocab_size). A TYDS file of examples is TY_EFORMAT. */
ty_status ty_tokens_open(const char *path, ty_tokens *t, ty_err *err);

/* Unmaps and frees; safe on a zeroed struct. */
void ty_tokens_close(ty_tokens *t);

static inline uint32_t ty_tokens_at(const ty_tokens *t, uint64_t i)
{
    if (t->token_size == 2)
        return ((const uint16_t *)t->tokens)[i];
    return ((const uint32_t *)t->tokens)[i];
}

/* Text (format "text"): a UTF-8 file, tokenized with the byte tokenizer
 * (token = byte, vocabulary 256) and stored as uint16 ids. The bytes are
 * kept as they are (a byte-order mark, CRLF). Invalid UTF-8 is TY_EFORMAT
 * naming the byte offset where the bad sequence starts (a sequence cut off
 * by the end of the file too); an empty file is TY_EFORMAT. err->field is
 * "file". flags: DS_CONVERT_NO_ECHO (messages never quote the file's bytes
 * anyway). */
ty_status ds_convert_text(const char *path, unsigned flags,
                          const char *out_path, ty_err *err);

/* ds_convert_text with the tokenizer req asks for (NULL or the byte
 * tokenizer: ds_convert_text): a byte-level BPE learned from the text
 * (req->learn_vocab; the text is read three times: check and learn, count,
 * write) or req->tok (a BPE or a tokenizer.json). meta "tokenizer" is the
 * tokenizer's description, "vocab_size" its vocabulary (uint32 ids past
 * 65536). The same errors as ds_convert_text, and TY_EFORMAT when the text
 * encodes to no token at all (a tokenizer.json without an unk token drops
 * the characters its vocabulary lacks, as the tokenizers library does). */
ty_status ds_convert_text_tok(const char *path, const ty_tokenizer_request *req,
                              unsigned flags, const char *out_path,
                              ty_err *err);

/* Text classification (format "csv" with a text column): every data row's
 * text_column cell is tokenized with the tokenizer req asks for (NULL or no
 * tokenizer: the byte tokenizer; req->learn_vocab: a byte-level BPE learned
 * from the text column's cells; req->tok: a BPE or a tokenizer.json), each
 * cell on its own, and its ids truncated to max_length (1 to
 * TY_DS_TEXT_MAX_LENGTH, else TY_EINVAL naming "max_length") and padded
 * with -1 after the text: x is (num_examples, max_length) float32 ids,
 * input_shape [max_length], preprocess "tokens" (no scaling). An empty cell
 * is a row of padding. The labels are classes by the class rule above
 * (classification only). Columns other than the text and the label are
 * ignored. meta adds "label_column", "text_column", "tokenizer" (the
 * description, as a token dataset's), "vocab_size", "max_length",
 * "num_tokens" (the cells' ids before truncation) and "truncated_examples"
 * (rows with more than max_length ids). Errors as ds_convert_csv's (line and
 * column, field "file"; a missing label column names "label_column"); a
 * cell that is not UTF-8 is TY_EFORMAT naming its line and column; a text
 * column not in the header is TY_EFORMAT naming "text_column", as is
 * (TY_EINVAL) a text column that is the label column. */
#define TY_DS_TEXT_MAX_LENGTH 8192u
#define TY_DS_TEXT_DEFAULT_LENGTH 128u
ty_status ds_convert_csv_text(const char *csv_path, const char *label_column,
                              const char *text_column,
                              const ty_tokenizer_request *req,
                              uint32_t max_length, unsigned flags,
                              const char *out_path, ty_err *err);

/* Tokens (format "tokens"): token ids made elsewhere, recognised by their
 * first bytes: a 1-D NPY array of uint8, uint16, int32 or int64, or llm.c's
 * .bin (a header of 256 little-endian int32: magic 20240520, version 1, the
 * token count, then that many uint16 ids). vocab_size (1 to
 * TY_DS_MAX_VOCAB; 0 is TY_EINVAL naming "vocab_size") bounds the ids: an id
 * outside 0..vocab_size-1 is TY_EFORMAT naming its position. A bad magic or
 * version, a count that disagrees with the file's size, a truncated file:
 * TY_EFORMAT with the offsets. */
ty_status ds_convert_tokens(const char *path, uint32_t vocab_size,
                            unsigned flags, const char *out_path, ty_err *err);

#endif
