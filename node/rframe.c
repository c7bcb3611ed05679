/*
 * rframe.c - the replica framing (see rframe.h): the fixed headers packed
 * and unpacked byte by byte in little-endian order, and the server's side
 * of a call: connect, send a request whole, read its reply whole. The call
 * allocates nothing: the reply's outputs go straight into the caller's
 * buffer and an error's message into err.
 */
#include "node/rframe.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

/* ---- little-endian packing ---- */

static void put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

static void put64(unsigned char *p, uint64_t v)
{
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static uint64_t get64(const unsigned char *p)
{
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

/* TY_OK when rows examples of cols values are within the limits. */
static ty_status check_shape(uint32_t rows, uint32_t cols, const char *what,
                             ty_err *err)
{
    if (rows < 1 || rows > RFRAME_MAX_ROWS)
        return ty_fail(err, TY_EFORMAT, NULL, "%s: %u rows, not 1 to %u", what,
                       rows, RFRAME_MAX_ROWS);
    if (cols < 1 || cols > RFRAME_MAX_COLS)
        return ty_fail(err, TY_EFORMAT, NULL, "%s: %u columns, not 1 to %u",
                       what, cols, RFRAME_MAX_COLS);
    if ((uint64_t)rows * cols * sizeof(float) > RFRAME_MAX_BYTES)
        return ty_fail(err, TY_EFORMAT, NULL,
                       "%s: %u x %u floats is over %llu bytes", what, rows,
                       cols, (unsigned long long)RFRAME_MAX_BYTES);
    return TY_OK;
}

/* TY_OK when buf opens with magic want; what names the header. */
static ty_status check_magic(const unsigned char *buf, uint32_t want,
                             const char *what, ty_err *err)
{
    uint32_t magic = get32(buf);
    if (magic != want)
        return ty_fail(err, TY_EFORMAT, NULL, "%s: magic 0x%08x is not 0x%08x",
                       what, magic, want);
    return TY_OK;
}

void rframe_req_hdr_encode(const rframe_req_hdr *h,
                           unsigned char buf[RFRAME_REQ_HDR_BYTES])
{
    put32(buf, RFRAME_REQ_MAGIC);
    put32(buf + 4, h->seq);
    put32(buf + 8, h->rows);
    put32(buf + 12, h->cols);
}

ty_status rframe_req_hdr_decode(const unsigned char buf[RFRAME_REQ_HDR_BYTES],
                                rframe_req_hdr *h, ty_err *err)
{
    if (check_magic(buf, RFRAME_REQ_MAGIC, "request", err) != TY_OK)
        return TY_EFORMAT;
    h->seq = get32(buf + 4);
    h->rows = get32(buf + 8);
    h->cols = get32(buf + 12);
    return check_shape(h->rows, h->cols, "request", err);
}

void rframe_rep_hdr_encode(const rframe_rep_hdr *h,
                           unsigned char buf[RFRAME_REP_HDR_BYTES])
{
    put32(buf, RFRAME_REP_MAGIC);
    put32(buf + 4, h->seq);
    put32(buf + 8, h->status);
    put32(buf + 12, h->rows);
    put32(buf + 16, h->cols);
    put32(buf + 20, h->batch_rows);
    put64(buf + 24, h->queue_ns);
    put64(buf + 32, h->compute_ns);
}

ty_status rframe_rep_hdr_decode(const unsigned char buf[RFRAME_REP_HDR_BYTES],
                                rframe_rep_hdr *h, ty_err *err)
{
    if (check_magic(buf, RFRAME_REP_MAGIC, "reply", err) != TY_OK)
        return TY_EFORMAT;
    h->seq = get32(buf + 4);
    h->status = get32(buf + 8);
    h->rows = get32(buf + 12);
    h->cols = get32(buf + 16);
    h->batch_rows = get32(buf + 20);
    h->queue_ns = get64(buf + 24);
    h->compute_ns = get64(buf + 32);
    if (h->status > RFRAME_EDRAINING)
        return ty_fail(err, TY_EFORMAT, NULL, "reply: unknown status %u",
                       h->status);
    if (h->status == RFRAME_OK)
        return check_shape(h->rows, h->cols, "reply", err);
    /* An error: rows 0 and a message of cols bytes. */
    if (h->rows != 0 || h->cols > RFRAME_MAX_COLS)
        return ty_fail(err, TY_EFORMAT, NULL,
                       "reply: an error with %u rows and a %u-byte message",
                       h->rows, h->cols);
    return TY_OK;
}

/* ---- the server's side ---- */

int rframe_connect(const char *path, ty_err *err)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof sa.sun_path) {
        ty_fail(err, TY_EIO, NULL,
                "replica socket path of %zu bytes (at most %zu)", n,
                sizeof sa.sun_path - 1);
        return -1;
    }
    memcpy(sa.sun_path, path, n + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        ty_fail(err, TY_EIO, NULL, "socket: %s", strerror(errno));
        return -1;
    }
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        ty_fail(err, TY_EIO, NULL, "cannot connect to %s: %s", path,
                strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* After EAGAIN: waits until fd is ready for events when it is a
 * non-blocking fd; 0 then. -1 on a blocking one (its SO_RCVTIMEO or
 * SO_SNDTIMEO ran out: the call fails). */
static int wait_fd(int fd, short events)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || !(fl & O_NONBLOCK))
        return -1;
    struct pollfd p = {.fd = fd, .events = events};
    int rc;
    while ((rc = poll(&p, 1, -1)) < 0 && errno == EINTR)
        ;
    return rc > 0 ? 0 : -1;
}

/* Sends the iovecs whole (iov is updated as it goes), without SIGPIPE:
 * 0, or -1 with errno. */
static int send_all(int fd, struct iovec *iov, int n)
{
    while (n > 0) {
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(fd, &m, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if ((errno == EAGAIN || errno == EWOULDBLOCK) &&
                wait_fd(fd, POLLOUT) == 0)
                continue;
            return -1;
        }
        size_t done = (size_t)w;
        while (n > 0 && done >= iov->iov_len) {
            done -= iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + done;
            iov->iov_len -= done;
        }
    }
    return 0;
}

/* Reads exactly n bytes into buf: 0; 1 at a clean end of stream before
 * the first byte; -1 (errno set; 0 for a stream that ended midway). */
static int recv_all(int fd, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = recv(fd, (char *)buf + got, n - got, 0);
        if (r > 0) {
            got += (size_t)r;
            continue;
        }
        if (r == 0) {
            errno = 0;
            return got == 0 ? 1 : -1;
        }
        if (errno == EINTR)
            continue;
        if ((errno == EAGAIN || errno == EWOULDBLOCK) &&
            wait_fd(fd, POLLIN) == 0)
            continue;
        return -1;
    }
    return 0;
}

/* TY_EIO for a failed recv_all (rc). */
static ty_status read_failed(int rc, const char *what, ty_err *err)
{
    if (rc > 0 || errno == 0)
        return ty_fail(err, TY_EIO, NULL,
                       "the replica closed the connection before the %s", what);
    return ty_fail(err, TY_EIO, NULL, "reading the %s: %s", what,
                   strerror(errno));
}

/* Reads an error reply's message (len bytes) into err->msg, as much as
 * fits, dropping the rest; returns the status the reply's maps to. */
static ty_status read_error(int fd, uint32_t status, uint32_t len,
                            ty_err *err)
{
    static const ty_status of[] = {
        [RFRAME_OK] = TY_EDEVICE,
        [RFRAME_ESHAPE] = TY_EINVAL,
        [RFRAME_EDEVICE] = TY_EDEVICE,
        [RFRAME_ENOMEM] = TY_ENOMEM,
        [RFRAME_EDRAINING] = TY_ECONFLICT,
        [RFRAME_EBUSY] = TY_EUNAVAILABLE,
    };
    char msg[sizeof err->msg];
    size_t keep = len < sizeof msg - 1 ? len : sizeof msg - 1;
    int rc = recv_all(fd, msg, keep);
    for (size_t left = len - keep; rc == 0 && left > 0;) {
        char drop[256];
        size_t k = left < sizeof drop ? left : sizeof drop;
        rc = recv_all(fd, drop, k);
        left -= k;
    }
    if (rc != 0)
        return read_failed(rc, "error message", err);
    msg[keep] = '\0';
    return ty_fail(err, of[status], NULL, "%s",
                   keep ? msg : "the replica failed");
}

ty_status rframe_call(int fd, uint32_t seq, const float *x, uint32_t rows,
                      uint32_t cols, float *out, uint32_t out_cols,
                      rframe_call_info *info, ty_err *err)
{
    ty_err why = {0};
    if (check_shape(rows, cols, "request", &why) != TY_OK ||
        check_shape(rows, out_cols, "outputs", &why) != TY_OK)
        return ty_fail(err, TY_EINVAL, NULL, "%s", why.msg);
    unsigned char hdr[RFRAME_REP_HDR_BYTES]; /* the larger of the two */
    rframe_req_hdr_encode(&(rframe_req_hdr){seq, rows, cols}, hdr);
    struct iovec iov[2] = {
        {.iov_base = hdr, .iov_len = RFRAME_REQ_HDR_BYTES},
        {.iov_base = (void *)x, .iov_len = (size_t)rows * cols * sizeof *x},
    };
    if (send_all(fd, iov, 2) != 0)
        return ty_fail(err, TY_EIO, NULL, "sending to the replica: %s",
                       strerror(errno));
    int rc = recv_all(fd, hdr, RFRAME_REP_HDR_BYTES);
    if (rc != 0)
        return read_failed(rc, "reply", err);
    rframe_rep_hdr h;
    ty_status s = rframe_rep_hdr_decode(hdr, &h, err);
    if (s != TY_OK)
        return s;
    if (h.seq != seq)
        return ty_fail(err, TY_EFORMAT, NULL,
                       "reply: sequence %u answers no call (%u was sent)",
                       h.seq, seq);
    if (info)
        *info = (rframe_call_info){.batch_rows = h.batch_rows,
                                   .queue_ns = h.queue_ns,
                                   .compute_ns = h.compute_ns};
    if (h.status != RFRAME_OK)
        return read_error(fd, h.status, h.cols, err);
    if (h.rows != rows || h.cols != out_cols)
        return ty_fail(err, TY_EFORMAT, NULL,
                       "reply: %u x %u outputs for %u rows of %u", h.rows,
                       h.cols, rows, out_cols);
    rc = recv_all(fd, out, (size_t)rows * out_cols * sizeof *out);
    if (rc != 0)
        return read_failed(rc, "outputs", err);
    return TY_OK;
}

/* ---- generation ---- */

void rframe_gen_encode(const rframe_gen_req *r,
                       unsigned char buf[RFRAME_GEN_HDR_BYTES])
{
    uint32_t temp, top_p;
    memcpy(&temp, &r->sp.temperature, 4);
    memcpy(&top_p, &r->sp.top_p, 4);
    put32(buf, RFRAME_GEN_MAGIC);
    put32(buf + 4, r->seq);
    put32(buf + 8, r->n_ids);
    put32(buf + 12, r->max_tokens);
    put32(buf + 16, r->choice);
    put32(buf + 20, r->lp_top);
    put32(buf + 24, (uint32_t)r->sp.top_k);
    put32(buf + 28, temp);
    put32(buf + 32, top_p);
    put32(buf + 36, 0);
    put64(buf + 40, r->sp.seed);
}

ty_status rframe_gen_decode(const unsigned char buf[RFRAME_GEN_HDR_BYTES],
                            rframe_gen_req *r, ty_err *err)
{
    if (check_magic(buf, RFRAME_GEN_MAGIC, "generation", err) != TY_OK)
        return TY_EFORMAT;
    uint32_t temp = get32(buf + 28), top_p = get32(buf + 32);
    r->seq = get32(buf + 4);
    r->n_ids = get32(buf + 8);
    r->max_tokens = get32(buf + 12);
    r->choice = get32(buf + 16);
    r->lp_top = get32(buf + 20);
    r->sp.top_k = (int32_t)get32(buf + 24);
    memcpy(&r->sp.temperature, &temp, 4);
    memcpy(&r->sp.top_p, &top_p, 4);
    r->sp.seed = get64(buf + 40);
    if (r->n_ids < 1 || r->n_ids > RFRAME_GEN_MAX_IDS || r->max_tokens < 1 ||
        r->max_tokens > RFRAME_GEN_MAX_TOKENS ||
        (r->lp_top > RFRAME_GEN_MAX_ALTS &&
         r->lp_top != RFRAME_GEN_NO_LOGPROBS))
        return ty_fail(err, TY_EFORMAT, NULL,
                       "generation: %u ids, %u tokens, %u alternatives",
                       r->n_ids, r->max_tokens, r->lp_top);
    return TY_OK;
}

size_t rframe_tok_encode(uint32_t seq, const sample_logprob *tok,
                         const sample_logprob *alts, uint32_t n_alts,
                         unsigned char *buf)
{
    uint32_t lp;
    memcpy(&lp, &tok->logprob, 4);
    put32(buf, RFRAME_TOK_MAGIC);
    put32(buf + 4, seq);
    put32(buf + 8, RFRAME_OK);
    put32(buf + 12, tok->token);
    put32(buf + 16, lp);
    put32(buf + 20, n_alts);
    unsigned char *p = buf + RFRAME_TOK_HDR_BYTES;
    for (uint32_t i = 0; i < n_alts; i++, p += 8) {
        memcpy(&lp, &alts[i].logprob, 4);
        put32(p, alts[i].token);
        put32(p + 4, lp);
    }
    return (size_t)(p - buf);
}

void rframe_tok_error_encode(uint32_t seq, uint32_t status, size_t n,
                             unsigned char buf[RFRAME_TOK_HDR_BYTES])
{
    put32(buf, RFRAME_TOK_MAGIC);
    put32(buf + 4, seq);
    put32(buf + 8, status);
    put32(buf + 12, (uint32_t)n);
    put32(buf + 16, 0);
    put32(buf + 20, 0);
}

ty_status rframe_gen_send(int fd, const rframe_gen_req *r,
                          const uint32_t *ids, ty_err *err)
{
    unsigned char hdr[RFRAME_GEN_HDR_BYTES];
    rframe_gen_encode(r, hdr);
    struct iovec iov[2] = {
        {.iov_base = hdr, .iov_len = sizeof hdr},
        {.iov_base = (void *)ids, .iov_len = (size_t)r->n_ids * sizeof *ids},
    };
    if (send_all(fd, iov, 2) != 0)
        return ty_fail(err, TY_EIO, NULL, "sending to the replica: %s",
                       strerror(errno));
    return TY_OK;
}

ty_status rframe_gen_read(int fd, uint32_t seq, sample_logprob *tok,
                          sample_logprob *alts, uint32_t alts_cap,
                          uint32_t *n_alts, ty_err *err)
{
    unsigned char b[RFRAME_TOK_HDR_BYTES];
    int rc = recv_all(fd, b, sizeof b);
    if (rc != 0)
        return read_failed(rc, "next token", err);
    if (check_magic(b, RFRAME_TOK_MAGIC, "token", err) != TY_OK)
        return TY_EFORMAT;
    const uint32_t status = get32(b + 8), n = get32(b + 20);
    if (get32(b + 4) != seq || status > RFRAME_EBUSY ||
        (status == RFRAME_OK && n > RFRAME_GEN_MAX_ALTS))
        return ty_fail(err, TY_EFORMAT, NULL,
                       "token: sequence %u (%u was sent), status %u, %u "
                       "alternatives",
                       get32(b + 4), seq, status, n);
    if (status != RFRAME_OK)
        return read_error(fd, status, get32(b + 12), err);
    uint32_t lp = get32(b + 16);
    tok->token = get32(b + 12);
    memcpy(&tok->logprob, &lp, 4);
    *n_alts = 0;
    for (uint32_t i = 0; i < n; i++) {
        unsigned char a[8];
        if ((rc = recv_all(fd, a, sizeof a)) != 0)
            return read_failed(rc, "token's alternatives", err);
        if (i >= alts_cap)
            continue;
        lp = get32(a + 4);
        alts[i].token = get32(a);
        memcpy(&alts[i].logprob, &lp, 4);
        *n_alts = i + 1;
    }
    return TY_OK;
}
