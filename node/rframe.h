/*
 * rframe.h - the replica framing: how the server hands a predict's rows to
 * a serving replica (`trainyard replica`, node/replica.h) and reads the
 * outputs back, over a unix stream socket. Binary, fixed little-endian
 * headers, float32 payloads: no JSON, no HTTP on this hop.
 *
 * One connection carries one call at a time (the server keeps a connection
 * per thread and replica); the replica reads many connections and batches
 * the rows it has received (node/batcher.h).
 *
 *   request  u32 magic RFRAME_REQ_MAGIC, u32 seq, u32 rows, u32 cols,
 *            then rows * cols float32 (row-major: rows examples of cols
 *            input values each)
 *   reply    u32 magic RFRAME_REP_MAGIC, u32 seq (the request's), u32
 *            status (RFRAME_OK or an RFRAME_E*), u32 rows, u32 cols, u32
 *            batch_rows (rows of the batch this request ran in), u64
 *            queue_ns (from the request's last byte read to its batch's
 *            start), u64 compute_ns (its batch's run),
 *            then, when status is RFRAME_OK, rows * cols float32 outputs;
 *            else `cols` bytes of a message for a person (rows 0).
 *
 * Limits: rows 1..RFRAME_MAX_ROWS, cols 1..RFRAME_MAX_COLS, and the
 * payload at most RFRAME_MAX_BYTES. A replica answers a request with the
 * wrong cols with RFRAME_ESHAPE and closes a connection that sends a bad
 * magic or sizes beyond the limits.
 */
#ifndef TY_RFRAME_H
#define TY_RFRAME_H

#include <stddef.h>
#include <stdint.h>

#include "common/ty.h"
#include "models/sample.h"

/* The float payloads travel as the host holds them: little-endian hosts
 * only (every platform trainyard builds for). */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the replica framing's float32 payloads assume a little-endian host"
#endif

#define RFRAME_REQ_MAGIC 0x51525954u /* "TYRQ" little-endian */
#define RFRAME_REP_MAGIC 0x50525954u /* "TYRP" */
#define RFRAME_REQ_HDR_BYTES 16
#define RFRAME_REP_HDR_BYTES 40
#define RFRAME_MAX_ROWS 65536u
#define RFRAME_MAX_COLS (1u << 24)
#define RFRAME_MAX_BYTES (256ull << 20)

enum {
    RFRAME_OK = 0,
    RFRAME_ESHAPE = 1,    /* cols is not the model's input size */
    RFRAME_EDEVICE = 2,   /* the model's run failed (message says why) */
    RFRAME_ENOMEM = 3,    /* the replica could not allocate the batch */
    RFRAME_EDRAINING = 4, /* the replica is stopping: try another */
    RFRAME_EBUSY = 5,     /* generation: the engine's queue is full */
};

typedef struct {
    uint32_t seq, rows, cols;
} rframe_req_hdr;

typedef struct {
    uint32_t seq, status, rows, cols, batch_rows;
    uint64_t queue_ns, compute_ns;
} rframe_rep_hdr;

/* Encoding and decoding of the fixed headers (buf: the header's bytes). */
void rframe_req_hdr_encode(const rframe_req_hdr *h,
                           unsigned char buf[RFRAME_REQ_HDR_BYTES]);
/* TY_EFORMAT for a bad magic or sizes outside the limits. */
ty_status rframe_req_hdr_decode(const unsigned char buf[RFRAME_REQ_HDR_BYTES],
                                rframe_req_hdr *h, ty_err *err);
void rframe_rep_hdr_encode(const rframe_rep_hdr *h,
                           unsigned char buf[RFRAME_REP_HDR_BYTES]);
ty_status rframe_rep_hdr_decode(const unsigned char buf[RFRAME_REP_HDR_BYTES],
                                rframe_rep_hdr *h, ty_err *err);

/* ---- the server's side: one blocking call on a connection ---- */

/* Connects to the replica listening at path: the socket's fd (close-on-
 * exec), or -1 with err (TY_EIO). */
int rframe_connect(const char *path, ty_err *err);

/* What a call learnt beside the outputs. */
typedef struct {
    uint32_t batch_rows;
    uint64_t queue_ns, compute_ns;
} rframe_call_info;

/* Sends rows examples of cols floats (x) on fd and waits for the reply:
 * out gets rows * out_cols floats. TY_OK; TY_EIO when the connection
 * failed or closed before the whole reply (the caller may retry on
 * another connection: nothing was answered); the replica's error as
 * TY_EINVAL (RFRAME_ESHAPE), TY_EDEVICE, TY_ENOMEM or TY_ECONFLICT
 * (RFRAME_EDRAINING), with its message; TY_EFORMAT for a reply that is not
 * one (then close the connection); TY_EINVAL, nothing sent, for rows, cols
 * or out_cols outside the limits. fd is blocking (a non-blocking one is
 * waited on); a receive timeout set on it (SO_RCVTIMEO) ends the call with
 * TY_EIO. Writes use MSG_NOSIGNAL: a dead replica is TY_EIO, never
 * SIGPIPE. Allocates nothing; info may be NULL. */
ty_status rframe_call(int fd, uint32_t seq, const float *x, uint32_t rows,
                      uint32_t cols, float *out, uint32_t out_cols,
                      rframe_call_info *info, ty_err *err);

/* ---- generation: a language model's tokens, streamed ----
 *
 * A connection that opens with RFRAME_GEN_MAGIC asks the replica to
 * generate, and is given to that one generation: the replica runs the
 * sequence in its engine (node/gen_engine.h), with every other
 * generation's, and writes a frame per token as the engine samples it.
 * The server keeps the text (tokenizer, stop strings): the replica sees
 * ids only. The server closes the connection to stop early (a stop
 * string, a client that left); the replica sees it at its next write and
 * the sequence leaves the engine at that step.
 *
 *   request  u32 magic RFRAME_GEN_MAGIC, u32 seq, u32 n_ids, u32
 *            max_tokens, u32 choice (the seed's stream), u32 lp_top
 *            (RFRAME_GEN_NO_LOGPROBS, or the alternatives wanted per
 *            token), i32 top_k, f32 temperature, f32 top_p, u32 0,
 *            u64 seed, then n_ids u32 prompt ids
 *   token    u32 magic RFRAME_TOK_MAGIC, u32 seq, u32 status, u32 token
 *            (an error: its message's length), f32 logprob, u32 n_alts,
 *            then n_alts (u32 token, f32 logprob) pairs, most likely
 *            first (an error: the message's bytes)
 *
 * A generation is max_tokens token frames, or fewer then an error frame.
 */
#define RFRAME_GEN_MAGIC 0x51475954u /* "TYGQ" */
#define RFRAME_TOK_MAGIC 0x50475954u /* "TYGP" */
#define RFRAME_GEN_HDR_BYTES 48
#define RFRAME_TOK_HDR_BYTES 24
#define RFRAME_GEN_MAX_IDS (1u << 20)
#define RFRAME_GEN_MAX_TOKENS (1u << 24)
#define RFRAME_GEN_MAX_ALTS 20u
#define RFRAME_GEN_NO_LOGPROBS 0xffffffffu

typedef struct {
    uint32_t seq, n_ids, max_tokens, choice;
    uint32_t lp_top; /* RFRAME_GEN_NO_LOGPROBS: none */
    sample_params sp;
} rframe_gen_req;

typedef struct {
    uint32_t seq, status;
    sample_logprob tok; /* status RFRAME_OK */
    uint32_t n_alts;    /* pairs after it; an error: the message's bytes */
} rframe_tok_hdr;

void rframe_gen_encode(const rframe_gen_req *r,
                       unsigned char buf[RFRAME_GEN_HDR_BYTES]);
/* TY_EFORMAT for a bad magic, n_ids, max_tokens or lp_top. */
ty_status rframe_gen_decode(const unsigned char buf[RFRAME_GEN_HDR_BYTES],
                            rframe_gen_req *r, ty_err *err);
/* A token frame's whole bytes into buf (RFRAME_TOK_HDR_BYTES + 8 per
 * alternative): their count. */
size_t rframe_tok_encode(uint32_t seq, const sample_logprob *tok,
                         const sample_logprob *alts, uint32_t n_alts,
                         unsigned char *buf);
/* An error frame's header into buf; the message's n bytes follow it. */
void rframe_tok_error_encode(uint32_t seq, uint32_t status, size_t n,
                             unsigned char buf[RFRAME_TOK_HDR_BYTES]);

/* The server's side: sends the request and its ids on fd (TY_EIO when the
 * connection fails), then reads one token frame: *tok and up to
 * alts_cap alternatives (more are dropped; *n_alts those kept). A token
 * frame is TY_OK; an error frame is its status as rframe_call maps them
 * (RFRAME_EBUSY: TY_EUNAVAILABLE) with its message; TY_EIO for a closed or
 * failed connection, TY_EFORMAT for a frame that is not one. */
ty_status rframe_gen_send(int fd, const rframe_gen_req *r,
                          const uint32_t *ids, ty_err *err);
ty_status rframe_gen_read(int fd, uint32_t seq, sample_logprob *tok,
                          sample_logprob *alts, uint32_t alts_cap,
                          uint32_t *n_alts, ty_err *err);

#endif
