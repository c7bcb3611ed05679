/* test_rframe.c - the replica framing (node/rframe.h): headers round trip
 * in their little-endian layout, every limit and a bad magic are refused;
 * rframe_call against a peer this test drives on a socketpair: outputs and
 * call info, every error status mapped with its message (a long one cut
 * and the stream kept in step), replies that are not replies, a peer that
 * closes early (TY_EIO, never SIGPIPE), a payload bigger than the socket
 * buffers; rframe_connect. Generation frames: the request round trips
 * (floats and the 64-bit seed bit for bit) and its limits are refused;
 * rframe_gen_send's bytes decode on the other side; token frames read
 * back with their alternatives (those past the caller's room dropped,
 * the stream kept in step), an error frame as its status and message, a
 * frame of another sequence or a closed peer refused. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "node/rframe.h"
#include "testutil.h"

/* ---- headers ---- */

static void test_req_roundtrip(void **state)
{
    unsigned char b[RFRAME_REQ_HDR_BYTES];
    rframe_req_hdr h = {.seq = 0xdeadbeef, .rows = 3, .cols = 0x10203};
    rframe_req_hdr_encode(&h, b);
    static const unsigned char want[RFRAME_REQ_HDR_BYTES] = {
        'T', 'Y', 'R', 'Q', 0xef, 0xbe, 0xad, 0xde,
        3,   0,   0,   0,   0x03, 0x02, 0x01, 0};
    assert_memory_equal(b, want, sizeof want);
    rframe_req_hdr back = {0};
    ty_err err = {0};
    assert_int_equal(rframe_req_hdr_decode(b, &back, &err), TY_OK);
    assert_int_equal(back.seq, h.seq);
    assert_int_equal(back.rows, 3);
    assert_int_equal(back.cols, 0x10203);
    /* The largest payload allowed, exactly. */
    h = (rframe_req_hdr){.seq = 0, .rows = RFRAME_MAX_ROWS, .cols = 1024};
    rframe_req_hdr_encode(&h, b);
    assert_int_equal(rframe_req_hdr_decode(b, &back, &err), TY_OK);
    h = (rframe_req_hdr){.seq = 0, .rows = 1, .cols = RFRAME_MAX_COLS};
    rframe_req_hdr_encode(&h, b);
    assert_int_equal(rframe_req_hdr_decode(b, &back, &err), TY_OK);
}

static void test_rep_roundtrip(void **state)
{
    unsigned char b[RFRAME_REP_HDR_BYTES];
    rframe_rep_hdr h = {.seq = 7,
                        .status = RFRAME_OK,
                        .rows = 2,
                        .cols = 10,
                        .batch_rows = 9,
                        .queue_ns = 0x0102030405060708ull,
                        .compute_ns = 0xfffffffffffffffeull};
    rframe_rep_hdr_encode(&h, b);
    assert_memory_equal(b, "TYRP", 4);
    assert_int_equal(b[24], 0x08); /* queue_ns, low byte first */
    assert_int_equal(b[31], 0x01);
    assert_int_equal(b[32], 0xfe);
    rframe_rep_hdr back = {0};
    ty_err err = {0};
    assert_int_equal(rframe_rep_hdr_decode(b, &back, &err), TY_OK);
    assert_int_equal(back.seq, 7);
    assert_int_equal(back.status, RFRAME_OK);
    assert_int_equal(back.rows, 2);
    assert_int_equal(back.cols, 10);
    assert_int_equal(back.batch_rows, 9);
    assert_true(back.queue_ns == h.queue_ns);
    assert_true(back.compute_ns == h.compute_ns);
    /* An error: no rows, a message of cols bytes. */
    h = (rframe_rep_hdr){.seq = 1, .status = RFRAME_EDRAINING, .cols = 12};
    rframe_rep_hdr_encode(&h, b);
    assert_int_equal(rframe_rep_hdr_decode(b, &back, &err), TY_OK);
    assert_int_equal(back.status, RFRAME_EDRAINING);
    assert_int_equal(back.cols, 12);
    h.cols = 0; /* an empty message is still an error */
    rframe_rep_hdr_encode(&h, b);
    assert_int_equal(rframe_rep_hdr_decode(b, &back, &err), TY_OK);
}

static void expect_req_refused(uint32_t rows, uint32_t cols)
{
    unsigned char b[RFRAME_REQ_HDR_BYTES];
    rframe_req_hdr_encode(
        &(rframe_req_hdr){.seq = 1, .rows = rows, .cols = cols}, b);
    rframe_req_hdr h;
    ty_err err = {0};
    assert_int_equal(rframe_req_hdr_decode(b, &h, &err), TY_EFORMAT);
    assert_true(err.msg[0] != '\0');
}

static void test_limits_refused(void **state)
{
    expect_req_refused(0, 4);
    expect_req_refused(RFRAME_MAX_ROWS + 1, 1);
    expect_req_refused(1, 0);
    expect_req_refused(1, RFRAME_MAX_COLS + 1);
    expect_req_refused(RFRAME_MAX_ROWS, 1025); /* over RFRAME_MAX_BYTES */
    expect_req_refused(UINT32_MAX, UINT32_MAX);

    unsigned char b[RFRAME_REP_HDR_BYTES];
    rframe_rep_hdr bad[] = {
        {.status = RFRAME_OK, .rows = 0, .cols = 1},
        {.status = RFRAME_OK, .rows = 1, .cols = 0},
        {.status = RFRAME_OK, .rows = RFRAME_MAX_ROWS + 1, .cols = 1},
        {.status = RFRAME_OK, .rows = 1, .cols = RFRAME_MAX_COLS + 1},
        {.status = RFRAME_OK, .rows = RFRAME_MAX_ROWS, .cols = 2048},
        {.status = RFRAME_ESHAPE, .rows = 1, .cols = 4},
        {.status = RFRAME_EDEVICE, .rows = 0, .cols = RFRAME_MAX_COLS + 1},
        {.status = RFRAME_EDRAINING + 1, .rows = 0, .cols = 4},
    };
    for (size_t i = 0; i < TY_ARRAY_LEN(bad); i++) {
        rframe_rep_hdr_encode(&bad[i], b);
        rframe_rep_hdr h;
        ty_err err = {0};
        assert_int_equal(rframe_rep_hdr_decode(b, &h, &err), TY_EFORMAT);
    }
}

static void test_bad_magic(void **state)
{
    unsigned char q[RFRAME_REQ_HDR_BYTES], r[RFRAME_REP_HDR_BYTES];
    rframe_req_hdr_encode(&(rframe_req_hdr){.seq = 1, .rows = 1, .cols = 1}, q);
    rframe_rep_hdr_encode(
        &(rframe_rep_hdr){.seq = 1, .status = RFRAME_OK, .rows = 1, .cols = 1},
        r);
    rframe_req_hdr hq;
    rframe_rep_hdr hr;
    ty_err err = {0};
    /* Each kind of header is not the other. */
    assert_int_equal(rframe_req_hdr_decode(r, &hq, &err), TY_EFORMAT);
    assert_non_null(strstr(err.msg, "magic"));
    unsigned char r2[RFRAME_REP_HDR_BYTES] = {0};
    memcpy(r2, q, sizeof q);
    assert_int_equal(rframe_rep_hdr_decode(r2, &hr, &err), TY_EFORMAT);
    q[3] ^= 0x80; /* one bit */
    assert_int_equal(rframe_req_hdr_decode(q, &hq, &err), TY_EFORMAT);
}

/* ---- calls against a peer ---- */

typedef enum {
    PEER_ECHO,        /* outputs: 2 per row, x[r*cols] + k */
    PEER_ERROR,       /* status and message */
    PEER_CLOSE,       /* reads the request, closes */
    PEER_HALF_HEADER, /* half a reply header, then closes */
    PEER_SHORT_OUT,   /* the header and half the outputs, then closes */
    PEER_WRONG_SEQ,
    PEER_BAD_MAGIC,
    PEER_WRONG_COLS,
} peer_mode;

typedef struct {
    int fd;
    peer_mode mode;
    uint32_t status;
    const char *msg;
    size_t msg_len;
    /* what it read */
    rframe_req_hdr req;
    float *x;
    int ok;
} peer;

static int read_full(int fd, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

static int write_full(int fd, const void *buf, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t w = send(fd, (const char *)buf + done, n - done, MSG_NOSIGNAL);
        if (w <= 0)
            return -1;
        done += (size_t)w;
    }
    return 0;
}

static void *peer_main(void *arg)
{
    peer *p = arg;
    unsigned char hb[RFRAME_REQ_HDR_BYTES];
    if (read_full(p->fd, hb, sizeof hb) != 0 ||
        rframe_req_hdr_decode(hb, &p->req, NULL) != TY_OK)
        return NULL;
    size_t n = (size_t)p->req.rows * p->req.cols;
    free(p->x);
    p->x = malloc(n * sizeof(float));
    if (!p->x || read_full(p->fd, p->x, n * sizeof(float)) != 0)
        return NULL;
    p->ok = 1;
    if (p->mode == PEER_CLOSE) {
        close(p->fd);
        return NULL;
    }
    rframe_rep_hdr h = {.seq = p->req.seq,
                        .status = RFRAME_OK,
                        .rows = p->req.rows,
                        .cols = 2,
                        .batch_rows = p->req.rows + 5,
                        .queue_ns = 1234,
                        .compute_ns = 5678};
    if (p->mode == PEER_WRONG_SEQ)
        h.seq++;
    if (p->mode == PEER_WRONG_COLS)
        h.cols = 3;
    if (p->mode == PEER_ERROR) {
        h.status = p->status;
        h.rows = 0;
        h.cols = (uint32_t)p->msg_len;
    }
    unsigned char rb[RFRAME_REP_HDR_BYTES];
    rframe_rep_hdr_encode(&h, rb);
    if (p->mode == PEER_BAD_MAGIC)
        rb[0] = 'X';
    if (p->mode == PEER_HALF_HEADER) {
        write_full(p->fd, rb, sizeof rb / 2);
        close(p->fd);
        return NULL;
    }
    if (write_full(p->fd, rb, sizeof rb) != 0)
        return NULL;
    if (p->mode == PEER_ERROR) {
        write_full(p->fd, p->msg, p->msg_len);
        return NULL;
    }
    float *out = malloc(p->req.rows * 2 * sizeof(float));
    for (uint32_t r = 0; out && r < p->req.rows; r++) {
        out[2 * r] = p->x[(size_t)r * p->req.cols] + 1;
        out[2 * r + 1] = p->x[(size_t)r * p->req.cols] + 2;
    }
    size_t bytes = p->req.rows * 2 * sizeof(float);
    if (out)
        write_full(p->fd, out, p->mode == PEER_SHORT_OUT ? bytes / 2 : bytes);
    free(out);
    if (p->mode == PEER_SHORT_OUT)
        close(p->fd);
    return NULL;
}

typedef struct {
    int fd;    /* the caller's end */
    peer peer; /* the other end's */
    pthread_t thread;
} pair;

static void pair_open(pair *pr)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    pr->fd = sv[0];
    memset(&pr->peer, 0, sizeof pr->peer);
    pr->peer.fd = sv[1];
}

/* The peer answers one call as mode says. */
static void peer_start(pair *pr, peer_mode mode)
{
    pr->peer.mode = mode;
    pr->peer.ok = 0;
    assert_int_equal(pthread_create(&pr->thread, NULL, peer_main, &pr->peer),
                     0);
}

static void peer_join(pair *pr) { pthread_join(pr->thread, NULL); }

static void pair_close(pair *pr)
{
    close(pr->fd);
    if (pr->peer.mode != PEER_CLOSE && pr->peer.mode != PEER_HALF_HEADER &&
        pr->peer.mode != PEER_SHORT_OUT)
        close(pr->peer.fd);
    free(pr->peer.x);
}

static void test_call_ok(void **state)
{
    pair pr;
    pair_open(&pr);
    float x[3 * 4], out[3 * 2];
    for (int i = 0; i < 12; i++)
        x[i] = (float)i * 0.5f;
    for (int round = 0; round < 2; round++) { /* the connection is reused */
        peer_start(&pr, PEER_ECHO);
        rframe_call_info info = {0};
        ty_err err = {0};
        memset(out, 0, sizeof out);
        assert_int_equal(
            rframe_call(pr.fd, 41 + round, x, 3, 4, out, 2, &info, &err),
            TY_OK);
        peer_join(&pr);
        assert_true(pr.peer.ok);
        assert_int_equal(pr.peer.req.seq, 41 + round);
        assert_int_equal(pr.peer.req.rows, 3);
        assert_int_equal(pr.peer.req.cols, 4);
        assert_memory_equal(pr.peer.x, x, sizeof x);
        for (int r = 0; r < 3; r++) {
            assert_true(out[2 * r] == x[r * 4] + 1);
            assert_true(out[2 * r + 1] == x[r * 4] + 2);
        }
        assert_int_equal(info.batch_rows, 8);
        assert_int_equal(info.queue_ns, 1234);
        assert_int_equal(info.compute_ns, 5678);
    }
    /* info may be NULL. */
    peer_start(&pr, PEER_ECHO);
    assert_int_equal(rframe_call(pr.fd, 1, x, 1, 4, out, 2, NULL, NULL), TY_OK);
    peer_join(&pr);
    pair_close(&pr);
}

/* A payload far bigger than the socket buffers, with the peer reading as
 * it comes: short writes and reads are finished. */
static void test_call_big(void **state)
{
    pair pr;
    pair_open(&pr);
    const uint32_t rows = 4000, cols = 300;
    float *x = malloc((size_t)rows * cols * sizeof *x);
    float *out = malloc((size_t)rows * 2 * sizeof *out);
    assert_non_null(x);
    assert_non_null(out);
    tu_fill_uniform(x, (size_t)rows * cols, 5, 0, 10.0f);
    peer_start(&pr, PEER_ECHO);
    ty_err err = {0};
    assert_int_equal(rframe_call(pr.fd, 9, x, rows, cols, out, 2, NULL, &err),
                     TY_OK);
    peer_join(&pr);
    assert_memory_equal(pr.peer.x, x, (size_t)rows * cols * sizeof *x);
    for (uint32_t r = 0; r < rows; r++)
        assert_true(out[2 * r + 1] == x[(size_t)r * cols] + 2);
    free(x);
    free(out);
    pair_close(&pr);
}

static void expect_error_status(uint32_t status, ty_status want,
                                const char *msg)
{
    pair pr;
    pair_open(&pr);
    pr.peer.status = status;
    pr.peer.msg = msg;
    pr.peer.msg_len = strlen(msg);
    float x[2] = {1, 2}, out[2];
    peer_start(&pr, PEER_ERROR);
    ty_err err = {0};
    rframe_call_info info = {0};
    assert_int_equal(rframe_call(pr.fd, 5, x, 1, 2, out, 2, &info, &err), want);
    peer_join(&pr);
    if (!*msg) /* something a person can read all the same */
        assert_true(err.msg[0] != '\0');
    else if (strlen(msg) < sizeof err.msg)
        assert_string_equal(err.msg, msg);
    else /* cut to what fits */
        assert_int_equal(strncmp(err.msg, msg, sizeof err.msg - 1), 0);
    /* The message was read whole: the next call on the connection works. */
    peer_start(&pr, PEER_ECHO);
    assert_int_equal(rframe_call(pr.fd, 6, x, 1, 2, out, 2, &info, &err),
                     TY_OK);
    peer_join(&pr);
    assert_true(out[0] == 2.0f);
    pair_close(&pr);
}

static void test_call_error_statuses(void **state)
{
    expect_error_status(RFRAME_ESHAPE, TY_EINVAL,
                        "the model takes 4 input values per example, not 2");
    expect_error_status(RFRAME_EDEVICE, TY_EDEVICE, "the GPU fell off");
    expect_error_status(RFRAME_ENOMEM, TY_ENOMEM, "out of memory");
    expect_error_status(RFRAME_EDRAINING, TY_ECONFLICT,
                        "the replica is stopping");
    expect_error_status(RFRAME_EDEVICE, TY_EDEVICE, "");
}

static void test_call_long_message(void **state)
{
    static char msg[3000];
    memset(msg, 'm', sizeof msg - 1);
    expect_error_status(RFRAME_EDEVICE, TY_EDEVICE, msg);
}

static void expect_call_fails(peer_mode mode, ty_status want)
{
    pair pr;
    pair_open(&pr);
    float x[4] = {1, 2, 3, 4}, out[4];
    peer_start(&pr, mode);
    ty_err err = {0};
    assert_int_equal(rframe_call(pr.fd, 5, x, 2, 2, out, 2, NULL, &err), want);
    assert_true(err.msg[0] != '\0');
    peer_join(&pr);
    pair_close(&pr);
}

static void test_call_peer_closes(void **state)
{
    expect_call_fails(PEER_CLOSE, TY_EIO);
    expect_call_fails(PEER_HALF_HEADER, TY_EIO);
    expect_call_fails(PEER_SHORT_OUT, TY_EIO);
}

static void test_call_not_a_reply(void **state)
{
    expect_call_fails(PEER_WRONG_SEQ, TY_EFORMAT);
    expect_call_fails(PEER_BAD_MAGIC, TY_EFORMAT);
    expect_call_fails(PEER_WRONG_COLS, TY_EFORMAT);
}

/* A peer gone before the call: the write fails as TY_EIO; SIGPIPE, left at
 * its default here, would kill the test. */
static void test_call_dead_peer(void **state)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    close(sv[1]);
    float x[2] = {1, 2}, out[2];
    ty_err err = {0};
    assert_int_equal(rframe_call(sv[0], 1, x, 1, 2, out, 2, NULL, &err),
                     TY_EIO);
    close(sv[0]);
}

static void test_call_refuses_bad_sizes(void **state)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    float x[2] = {1, 2}, out[2];
    ty_err err = {0};
    assert_int_equal(rframe_call(sv[0], 1, x, 0, 2, out, 2, NULL, &err),
                     TY_EINVAL);
    assert_int_equal(rframe_call(sv[0], 1, x, 1, 0, out, 2, NULL, &err),
                     TY_EINVAL);
    assert_int_equal(rframe_call(sv[0], 1, x, 1, 2, out, 0, NULL, &err),
                     TY_EINVAL);
    assert_int_equal(
        rframe_call(sv[0], 1, x, RFRAME_MAX_ROWS, 2, out, 1025, NULL, &err),
        TY_EINVAL);
    /* Nothing was sent. */
    int fl = fcntl(sv[1], F_GETFL);
    fcntl(sv[1], F_SETFL, fl | O_NONBLOCK);
    char b;
    assert_int_equal(read(sv[1], &b, 1), -1);
    close(sv[0]);
    close(sv[1]);
}

static void test_connect(void **state)
{
    ty_err err = {0};
    char path[200];
    snprintf(path, sizeof path, "%s/r.sock", tu_tmpdir);
    assert_int_equal(rframe_connect(path, &err), -1); /* nobody there */
    assert_non_null(strstr(err.msg, path));
    char longp[300];
    memset(longp, 'a', sizeof longp - 1);
    longp[sizeof longp - 1] = '\0';
    assert_int_equal(rframe_connect(longp, &err), -1);

    int l = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    assert_int_equal(bind(l, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(l, 4), 0);
    int fd = rframe_connect(path, &err);
    assert_true(fd >= 0);
    assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    int a = accept(l, NULL, NULL);
    assert_true(a >= 0);
    close(a);
    close(fd);
    close(l);
    unlink(path);
}

/* ---- generation ---- */

static void test_gen_roundtrip(void **state)
{
    (void)state;
    rframe_gen_req r = {.seq = 9,
                        .n_ids = 3,
                        .max_tokens = 77,
                        .choice = 5,
                        .lp_top = RFRAME_GEN_NO_LOGPROBS,
                        .sp = {0.7f, -1, 0.95f, 0x0123456789abcdefull}};
    unsigned char b[RFRAME_GEN_HDR_BYTES];
    rframe_gen_encode(&r, b);
    assert_memory_equal(b, "TYGQ", 4);
    rframe_gen_req back = {0};
    ty_err err = {0};
    assert_int_equal(rframe_gen_decode(b, &back, &err), TY_OK);
    assert_int_equal(back.seq, 9);
    assert_int_equal(back.n_ids, 3);
    assert_int_equal(back.max_tokens, 77);
    assert_int_equal(back.choice, 5);
    assert_int_equal(back.lp_top, RFRAME_GEN_NO_LOGPROBS);
    assert_memory_equal(&back.sp.temperature, &r.sp.temperature, 4);
    assert_memory_equal(&back.sp.top_p, &r.sp.top_p, 4);
    assert_int_equal(back.sp.top_k, -1);
    assert_true(back.sp.seed == r.sp.seed);
    /* each limit refused */
    static const struct {
        uint32_t n_ids, max_tokens, lp_top;
    } bad[] = {{0, 1, 0},
               {RFRAME_GEN_MAX_IDS + 1, 1, 0},
               {1, 0, 0},
               {1, RFRAME_GEN_MAX_TOKENS + 1, 0},
               {1, 1, RFRAME_GEN_MAX_ALTS + 1}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        rframe_gen_req x = r;
        x.n_ids = bad[i].n_ids;
        x.max_tokens = bad[i].max_tokens;
        x.lp_top = bad[i].lp_top;
        rframe_gen_encode(&x, b);
        assert_int_equal(rframe_gen_decode(b, &back, &err), TY_EFORMAT);
    }
    rframe_gen_encode(&r, b);
    b[0] = 'X';
    assert_int_equal(rframe_gen_decode(b, &back, &err), TY_EFORMAT);
}

static void test_gen_send_and_tokens(void **state)
{
    (void)state;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    const uint32_t ids[3] = {4, 0, 65535};
    rframe_gen_req r = {.seq = 2,
                        .n_ids = 3,
                        .max_tokens = 4,
                        .choice = 0,
                        .lp_top = 2,
                        .sp = {1.0f, 0, 1.0f, 42}};
    ty_err err = {0};
    assert_int_equal(rframe_gen_send(sv[0], &r, ids, &err), TY_OK);
    unsigned char b[RFRAME_GEN_HDR_BYTES];
    assert_int_equal(read_full(sv[1], b, sizeof b), 0);
    rframe_gen_req got = {0};
    assert_int_equal(rframe_gen_decode(b, &got, &err), TY_OK);
    assert_int_equal(got.lp_top, 2);
    uint32_t back[3];
    assert_int_equal(read_full(sv[1], back, sizeof back), 0);
    assert_memory_equal(back, ids, sizeof ids);

    /* two tokens, the first with two alternatives, then an error */
    unsigned char f[RFRAME_TOK_HDR_BYTES + 8 * RFRAME_GEN_MAX_ALTS + 64];
    const sample_logprob t1 = {17, -0.25f}, t2 = {3, -1.5f};
    const sample_logprob alts[2] = {{17, -0.25f}, {8, -2.0f}};
    size_t n = rframe_tok_encode(2, &t1, alts, 2, f);
    assert_int_equal(n, RFRAME_TOK_HDR_BYTES + 16);
    assert_int_equal(write_full(sv[1], f, n), 0);
    n = rframe_tok_encode(2, &t2, NULL, 0, f);
    assert_int_equal(write_full(sv[1], f, n), 0);
    const char msg[] = "the engine's queue is full";
    rframe_tok_error_encode(2, RFRAME_EBUSY, strlen(msg), f);
    memcpy(f + RFRAME_TOK_HDR_BYTES, msg, strlen(msg));
    assert_int_equal(write_full(sv[1], f, RFRAME_TOK_HDR_BYTES + strlen(msg)),
                     0);

    sample_logprob tok, room[1];
    uint32_t kept = 9;
    /* room for one alternative: the second is read past, not kept */
    assert_int_equal(rframe_gen_read(sv[0], 2, &tok, room, 1, &kept, &err),
                     TY_OK);
    assert_int_equal(tok.token, 17);
    assert_true(tok.logprob == -0.25f);
    assert_int_equal(kept, 1);
    assert_int_equal(room[0].token, 17);
    assert_int_equal(rframe_gen_read(sv[0], 2, &tok, NULL, 0, &kept, &err),
                     TY_OK);
    assert_int_equal(tok.token, 3);
    assert_int_equal(kept, 0);
    assert_int_equal(rframe_gen_read(sv[0], 2, &tok, NULL, 0, &kept, &err),
                     TY_EUNAVAILABLE);
    assert_string_equal(err.msg, msg);

    /* another sequence's frame */
    n = rframe_tok_encode(5, &t2, NULL, 0, f);
    assert_int_equal(write_full(sv[1], f, n), 0);
    assert_int_equal(rframe_gen_read(sv[0], 2, &tok, NULL, 0, &kept, &err),
                     TY_EFORMAT);
    /* the peer closes */
    close(sv[1]);
    assert_int_equal(rframe_gen_read(sv[0], 2, &tok, NULL, 0, &kept, &err),
                     TY_EIO);
    close(sv[0]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_req_roundtrip),
        cmocka_unit_test(test_rep_roundtrip),
        cmocka_unit_test(test_limits_refused),
        cmocka_unit_test(test_bad_magic),
        cmocka_unit_test(test_call_ok),
        cmocka_unit_test(test_call_big),
        cmocka_unit_test(test_call_error_statuses),
        cmocka_unit_test(test_call_long_message),
        cmocka_unit_test(test_call_peer_closes),
        cmocka_unit_test(test_call_not_a_reply),
        cmocka_unit_test(test_call_dead_peer),
        cmocka_unit_test(test_call_refuses_bad_sizes),
        cmocka_unit_test(test_connect),
        cmocka_unit_test(test_gen_roundtrip),
        cmocka_unit_test(test_gen_send_and_tokens),
    };
    return cmocka_run_group_tests(tests, tu_tmpdir_setup, tu_tmpdir_teardown);
}
