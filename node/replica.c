/*
 * replica.c - the serving replica process (see replica.h): reads
 * <job-dir>/replica.json, loads the model on the device TRAINYARD_DEVICE
 * names, listens on a unix socket and answers the framing of rframe.h,
 * batching requests as batcher.h decides.
 *
 * It is a process of the worker protocol (node/protocol.h) and shares the
 * worker's pieces (node/worker.h): the started line, the heartbeat thread,
 * the one stdout mutex, the device environment. Serving is one thread: an
 * epoll loop over the listening socket, the connections and a self-pipe
 * the signal handler writes to. Each connection carries one call at a
 * time: its request is read (non-blocking, a partial read kept on the
 * connection), queued, run in a batch, and its reply written before the
 * connection is read again. The batch's inputs and outputs live in two
 * buffers of max_batch_size rows made once; a request bigger than that runs
 * alone, in chunks, straight from its connection's buffer into its reply.
 */
#include "node/replica.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/jsonutil.h"
#include "node/batcher.h"
#include "node/gen_engine.h"
#include "node/placement.h"
#include "node/rframe.h"
#include "node/replica_gen.h"
#include "node/worker.h"
#include "models/nn.h"
#include "models/pool.h"
#if TRAINYARD_HAVE_CUDA
#include "gpu/cuda/backend.h"
#endif

#define WHO RPROTO_COMMAND
#define SUN_PATH_MAX (sizeof(((struct sockaddr_un *)0)->sun_path) - 1)
/* How long a drain waits for replies a client does not read. */
#define DRAIN_WRITE_LIMIT_NS (30ull * 1000000000ull)
#define EVENTS 64

static volatile sig_atomic_t stop_requested;
/* The self-pipe's write end, once it exists: the handler wakes the loop. */
static volatile sig_atomic_t wake_fd = -1;

static void on_term(int sig)
{
    int saved = errno;
    stop_requested = 1;
    if (wake_fd >= 0) {
        ssize_t w = write(wake_fd, "", 1);
        (void)w; /* a full pipe is awake already */
    }
    errno = saved;
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- replica.json ---- */

typedef struct {
    const char *replica_id, *deployment_id; /* borrowed from the document */
    const char *model_path, *socket_path;
    int threads;
    uint64_t kv_cache_bytes; /* 0: the engine's default */
    batcher_policy policy;
} replica_config;

/* The "batching" object (NULL: every default), checked as deployspec.h
 * checks a deployment's. TY_EINVAL naming the key. */
static ty_status read_batching(const json_t *batching, batcher_policy *p,
                               ty_err *err)
{
    static const char *const keys[] = {RPROTO_MAX_BATCH_SIZE,
                                       RPROTO_MAX_QUEUE_DELAY_US,
                                       RPROTO_PREFERRED_BATCH_SIZES, NULL};
    const char *path = RPROTO_BATCHING;
    memset(p, 0, sizeof *p);
    p->max_batch_size = BATCHER_DEFAULT_MAX_BATCH;
    p->max_queue_delay_ns = (uint64_t)BATCHER_DEFAULT_DELAY_US * 1000;
    if (!batching || json_is_null(batching))
        return TY_OK;
    int64_t max = 0, delay_us = 0;
    if (tyjson_check_keys(batching, keys, path, err) != TY_OK ||
        tyjson_get_int(batching, RPROTO_MAX_BATCH_SIZE, path, 0, 1,
                       BATCHER_MAX_BATCH, BATCHER_DEFAULT_MAX_BATCH, &max,
                       err) != TY_OK ||
        tyjson_get_int(batching, RPROTO_MAX_QUEUE_DELAY_US, path, 0, 0,
                       BATCHER_MAX_DELAY_US, BATCHER_DEFAULT_DELAY_US,
                       &delay_us, err) != TY_OK)
        return TY_EINVAL;
    p->max_batch_size = (uint32_t)max;
    p->max_queue_delay_ns = (uint64_t)delay_us * 1000;
    const json_t *sizes =
        json_object_get(batching, RPROTO_PREFERRED_BATCH_SIZES);
    char field[128];
    tyjson_path(field, sizeof field, path, RPROTO_PREFERRED_BATCH_SIZES);
    if (!sizes || json_is_null(sizes))
        return TY_OK;
    if (!json_is_array(sizes) || json_array_size(sizes) > BATCHER_MAX_PREFERRED)
        return ty_fail(err, TY_EINVAL, field,
                       "%s must be an array of at most %d sizes", field,
                       BATCHER_MAX_PREFERRED);
    for (size_t i = 0; i < json_array_size(sizes); i++) {
        const json_t *v = json_array_get(sizes, i);
        json_int_t lo = i ? (json_int_t)p->preferred[i - 1] + 1 : 1;
        if (!json_is_integer(v) || json_integer_value(v) < lo ||
            json_integer_value(v) > max) {
            size_t k = strlen(field);
            tyjson_path_index(field + k, sizeof field - k, "", i);
            return ty_fail(err, TY_EINVAL, field,
                           "%s must be a whole number from %lld to %lld (the "
                           "sizes strictly increasing, at most max_batch_size)",
                           field, (long long)lo, (long long)max);
        }
        p->preferred[i] = (uint32_t)json_integer_value(v);
        p->npreferred = (int)i + 1;
    }
    return TY_OK;
}

static ty_status read_config(const json_t *j, replica_config *c, ty_err *err)
{
    memset(c, 0, sizeof *c);
    int64_t threads = 0, kv = 0;
    if (tyjson_get_string(j, RPROTO_REPLICA_ID, "", 0, 128, "", &c->replica_id,
                          err) != TY_OK ||
        tyjson_get_string(j, RPROTO_DEPLOYMENT_ID, "", 0, 128, "",
                          &c->deployment_id, err) != TY_OK ||
        tyjson_get_string(j, RPROTO_MODEL_PATH, "", 1, PATH_MAX - 1, NULL,
                          &c->model_path, err) != TY_OK ||
        tyjson_get_string(j, RPROTO_SOCKET_PATH, "", 1, SUN_PATH_MAX, NULL,
                          &c->socket_path, err) != TY_OK ||
        tyjson_get_int(j, RPROTO_THREADS, "", 0, 0, 1024, 0, &threads, err) !=
            TY_OK ||
        tyjson_get_int(j, RPROTO_KV_CACHE_BYTES, "", 0, 0, INT64_MAX, 0, &kv,
                       err) != TY_OK ||
        read_batching(json_object_get(j, RPROTO_BATCHING), &c->policy, err) !=
            TY_OK) {
        ty_err_prefix(err, "%s", RPROTO_FILE);
        return TY_EINVAL;
    }
    /* The engine's threads for a batch on the CPU (0: one per core). */
    c->threads = (int)threads;
    c->kv_cache_bytes = (uint64_t)kv;
    return TY_OK;
}

/* ---- the model on its device ---- */

typedef struct {
    nn_net *net;
    nn_workspace *ws; /* max_batch_size rows */
    nn_pool *pool;    /* the engine's threads on the CPU; NULL: one */
    uint64_t features;
    uint32_t outputs;
    char device[WPROTO_SIM_UUID_MAX + 8]; /* "cpu", "cuda:N", "sim:<uuid>" */
    int cuda;                             /* ex is a CUDA context */
    int cuda_device;                      /* its device, when cuda */
#if TRAINYARD_HAVE_CUDA
    nn_exec ex;
#endif
} model;

static void model_free(model *m)
{
    /* the generation engine keeps its cache while idle: it goes first */
    if (m->net)
        gen_engine_forget(m->net);
    nn_workspace_destroy(m->ws);
    nn_pool_destroy(m->pool);
    nn_net_destroy(m->net);
#if TRAINYARD_HAVE_CUDA
    if (m->cuda)
        nn_cuda_exec_free(&m->ex);
#endif
    memset(m, 0, sizeof *m);
}

/* Loads path on the device TRAINYARD_DEVICE names, with a workspace for
 * max_batch rows that runs on `threads` of the engine's threads on the CPU
 * (0: one per core). On failure nothing is held. */
static ty_status model_load(model *m, const char *path, uint32_t max_batch,
                            int threads, ty_err *err)
{
    memset(m, 0, sizeof *m);
    int device = -1;
    const char *sim = NULL;
    ty_status s = worker_device(&device, &sim, err);
    if (s != TY_OK)
        return s;
    place_device_label(device, m->device, sizeof m->device);
    if (sim)
        snprintf(m->device, sizeof m->device, "%s", sim);
#if TRAINYARD_HAVE_CUDA
    if (device >= 0) {
        if ((s = nn_cuda_exec_init(&m->ex, device, err)) != TY_OK)
            return s;
        m->cuda = 1;
        m->cuda_device = device;
        s = nn_net_load_on(path, &nn_backend_cuda, &m->ex, &m->net, err);
    } else
#endif
        s = nn_net_load(path, &m->net, err);
    if (s == TY_OK) {
        m->features = nn_net_input_features(m->net);
        m->outputs = nn_net_num_outputs(m->net);
        m->ws = nn_workspace_create(m->net, max_batch);
        if (!m->ws)
            s = ty_fail(err, TY_ENOMEM, NULL,
                        "out of memory for a batch of %u examples on %s",
                        max_batch, m->device);
        /* A batch is worth splitting over cores as a training step is;
         * without a pool (none could be made) it runs on this thread. */
        long n = threads > 0 ? threads : sysconf(_SC_NPROCESSORS_ONLN);
        if (s == TY_OK && !m->cuda && n > 1 &&
            (m->pool = nn_pool_create((int)n)) &&
            nn_workspace_set_pool(m->ws, m->pool) != TY_OK) {
            nn_pool_destroy(m->pool);
            m->pool = NULL;
        }
    } else {
        ty_err_prefix(err, "cannot load the model %s on %s", path, m->device);
    }
    if (s != TY_OK)
        model_free(m);
    return s;
}

/* ---- connections ---- */

typedef enum {
    C_READ,   /* reading a request (maybe part of one) */
    C_QUEUED, /* its request waits for, or is in, a batch */
    C_WRITE,  /* its reply is partly written */
} conn_state;

typedef struct conn {
    int fd;
    conn_state state;
    int gone; /* hung up while queued: no reply, closed after the batch */
    struct conn *prev, *next;
    /* the request */
    unsigned char hdr[RFRAME_GEN_HDR_BYTES]; /* the larger header */
    size_t hdr_got, hdr_need; /* hdr_need: a predict's, or a generation's */
    rframe_req_hdr req;
    int gen; /* a generation (rframe.h): gen_req, ids in x */
    rframe_gen_req gen_req;
    uint32_t status; /* RFRAME_OK, or the error it gets (payload dropped) */
    size_t body, body_got; /* payload bytes, and read so far */
    float *x;              /* the payload (x_cap bytes) */
    size_t x_cap;
    uint64_t read_ns; /* when its last byte was read */
    /* the reply */
    unsigned char *w;
    size_t w_cap, w_len, w_off;
} conn;

typedef struct {
    int ep, lfd, wake_rd;
    const char *socket_path;
    const model *m;
    batcher_policy pol;
    conn *conns; /* every open connection */
    int listen_paused;
    int writing; /* connections in C_WRITE */
    int draining;
    uint64_t drain_since;
    /* the queue, oldest first: the connections and their rows */
    conn **q;
    uint32_t *qrows;
    size_t qn, qcap;
    /* the batch: max_batch_size rows of inputs and of outputs */
    float *bx, *bout;
    char drop[1 << 16]; /* dropped payloads land here */
} server;

/* Tags on the epoll entries that are not connections. */
static char tag_listen, tag_wake;

static void arm(server *sv, conn *c, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.ptr = c};
    epoll_ctl(sv->ep, EPOLL_CTL_MOD, c->fd, &ev);
}

static void set_listening(server *sv, int on)
{
    if (sv->lfd < 0 || sv->listen_paused == !on)
        return;
    struct epoll_event ev = {.events = on ? EPOLLIN : 0,
                             .data.ptr = &tag_listen};
    epoll_ctl(sv->ep, EPOLL_CTL_MOD, sv->lfd, &ev);
    sv->listen_paused = !on;
}

/* Out of the list and freed; the caller closes or keeps c->fd. */
static void conn_unlink(server *sv, conn *c)
{
    if (c->state == C_WRITE)
        sv->writing--;
    if (c->prev)
        c->prev->next = c->next;
    else
        sv->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    free(c->x);
    free(c->w);
    free(c);
}

static void conn_close(server *sv, conn *c)
{
    close(c->fd); /* leaves the epoll set with it */
    conn_unlink(sv, c);
    set_listening(sv, 1); /* a descriptor is free again */
}

/* A generation's request is in: the connection is the generation's from
 * now on (node/replica_gen.h), out of this loop. */
static void gen_handoff(server *sv, conn *c)
{
    epoll_ctl(sv->ep, EPOLL_CTL_DEL, c->fd, NULL);
    const int fd = c->fd;
    const rframe_gen_req r = c->gen_req;
    const uint32_t status = sv->draining ? RFRAME_EDRAINING : c->status;
    uint32_t *ids = (uint32_t *)c->x;
    c->x = NULL;
    conn_unlink(sv, c);
    if (status == RFRAME_OK) {
        replica_gen_start(sv->m->net, fd, &r, ids);
        return;
    }
    free(ids);
    replica_gen_refuse(fd, r.seq, status,
                       status == RFRAME_EDRAINING ? "the replica is stopping"
                                                  : "out of memory");
}

/* Makes room for a reply with `payload` bytes after its header: the
 * payload's place in c->w, or NULL when out of memory. */
static unsigned char *reply_room(conn *c, size_t payload)
{
    size_t need = RFRAME_REP_HDR_BYTES + payload;
    if (need > c->w_cap) {
        unsigned char *w = realloc(c->w, need);
        if (!w)
            return NULL;
        c->w = w;
        c->w_cap = need;
    }
    return c->w + RFRAME_REP_HDR_BYTES;
}

/* Back to reading the next request. */
static void conn_reset(server *sv, conn *c)
{
    if (c->state == C_WRITE)
        sv->writing--;
    c->state = C_READ;
    c->hdr_got = c->body_got = c->body = 0;
    c->hdr_need = RFRAME_REQ_HDR_BYTES;
    c->status = RFRAME_OK;
    arm(sv, c, EPOLLIN);
}

/* Writes what is left of c's reply; the rest when the socket can take it.
 * A client that is gone is closed (never a SIGPIPE). */
static void conn_flush(server *sv, conn *c)
{
    while (c->w_off < c->w_len) {
        ssize_t n =
            send(c->fd, c->w + c->w_off, c->w_len - c->w_off, MSG_NOSIGNAL);
        if (n > 0) {
            c->w_off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (c->state != C_WRITE) {
                c->state = C_WRITE;
                sv->writing++;
                arm(sv, c, EPOLLOUT);
            }
            return;
        }
        conn_close(sv, c);
        return;
    }
    conn_reset(sv, c);
}

/* Sends the reply whose payload (payload bytes) is in place in c->w. */
static void reply_send(server *sv, conn *c, const rframe_rep_hdr *h,
                       size_t payload)
{
    if (c->gone) {
        conn_close(sv, c);
        return;
    }
    rframe_rep_hdr_encode(h, c->w);
    c->w_len = RFRAME_REP_HDR_BYTES + payload;
    c->w_off = 0;
    conn_flush(sv, c);
}

/* Answers c's request with an error status and msg. */
static void reply_error(server *sv, conn *c, uint32_t status, const char *msg,
                        const rframe_rep_hdr *timing)
{
    size_t n = strlen(msg);
    unsigned char *p = reply_room(c, n);
    if (!p) {
        conn_close(sv, c);
        return;
    }
    memcpy(p, msg, n);
    rframe_rep_hdr h = timing ? *timing : (rframe_rep_hdr){0};
    h.seq = c->req.seq;
    h.status = status;
    h.rows = 0;
    h.cols = (uint32_t)n;
    reply_send(sv, c, &h, n);
}

/* Puts c's whole request in the queue. */
static void enqueue(server *sv, conn *c)
{
    if (sv->qn == sv->qcap) {
        size_t cap = sv->qcap ? sv->qcap * 2 : 64;
        conn **q = realloc(sv->q, cap * sizeof *q);
        if (q)
            sv->q = q;
        uint32_t *r = q ? realloc(sv->qrows, cap * sizeof *r) : NULL;
        if (r)
            sv->qrows = r;
        if (!q || !r) {
            reply_error(sv, c, RFRAME_ENOMEM, "the replica's queue is full",
                        NULL);
            return;
        }
        sv->qcap = cap;
    }
    c->state = C_QUEUED;
    arm(sv, c, 0); /* not read again until answered; hang-ups still seen */
    sv->q[sv->qn] = c;
    sv->qrows[sv->qn++] = c->req.rows;
}

/* The header is in: what becomes of the payload. */
static void request_begin(server *sv, conn *c)
{
    c->body = c->gen ? (size_t)c->gen_req.n_ids * sizeof(uint32_t)
                     : (size_t)c->req.rows * c->req.cols * sizeof(float);
    c->body_got = 0;
    c->status = RFRAME_OK;
    if (!c->gen && c->req.cols != sv->m->features) {
        c->status = RFRAME_ESHAPE;
        return;
    }
    if (c->body > c->x_cap) {
        float *x = realloc(c->x, c->body);
        if (!x) {
            c->status = RFRAME_ENOMEM;
            return;
        }
        c->x = x;
        c->x_cap = c->body;
    }
}

/* The whole request is in: queue it, or answer its error. */
static void request_done(server *sv, conn *c)
{
    char msg[160];
    if (c->gen) {
        gen_handoff(sv, c);
        return;
    }
    c->read_ns = mono_ns();
    if (sv->draining)
        c->status = RFRAME_EDRAINING;
    switch (c->status) {
        case RFRAME_OK: enqueue(sv, c); return;
        case RFRAME_ESHAPE:
            snprintf(msg, sizeof msg,
                     "the model takes %llu input values per example, not %u",
                     (unsigned long long)sv->m->features, c->req.cols);
            break;
        case RFRAME_ENOMEM:
            snprintf(msg, sizeof msg, "out of memory for %u examples",
                     c->req.rows);
            break;
        default: snprintf(msg, sizeof msg, "the replica is stopping"); break;
    }
    reply_error(sv, c, c->status, msg, NULL);
}

/* Reads what c has sent, up to the end of one request. */
static void conn_read(server *sv, conn *c)
{
    for (;;) {
        void *dst;
        size_t want;
        if (c->hdr_got < c->hdr_need) {
            dst = c->hdr + c->hdr_got;
            want = c->hdr_need - c->hdr_got;
        } else if (c->status == RFRAME_OK) {
            dst = (char *)c->x + c->body_got;
            want = c->body - c->body_got;
        } else {
            dst = sv->drop;
            want = c->body - c->body_got;
            if (want > sizeof sv->drop)
                want = sizeof sv->drop;
        }
        ssize_t n = recv(c->fd, dst, want, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) { /* the client is gone, or broke the stream */
            conn_close(sv, c);
            return;
        }
        if (c->hdr_got < c->hdr_need) {
            c->hdr_got += (size_t)n;
            if (c->hdr_got < c->hdr_need)
                continue;
            /* a generation's header is longer: its magic says so */
            c->gen = c->hdr[0] == (RFRAME_GEN_MAGIC & 0xff) &&
                     c->hdr[1] == (RFRAME_GEN_MAGIC >> 8 & 0xff) &&
                     c->hdr[2] == (RFRAME_GEN_MAGIC >> 16 & 0xff) &&
                     c->hdr[3] == (RFRAME_GEN_MAGIC >> 24);
            if (c->gen && c->hdr_need < RFRAME_GEN_HDR_BYTES) {
                c->hdr_need = RFRAME_GEN_HDR_BYTES;
                continue;
            }
            ty_err err = {0};
            if ((c->gen
                     ? rframe_gen_decode(c->hdr, &c->gen_req, &err)
                     : rframe_req_hdr_decode(c->hdr, &c->req, &err)) != TY_OK) {
                fprintf(stderr, "trainyard %s: closing a connection: %s\n", WHO,
                        err.msg);
                conn_close(sv, c);
                return;
            }
            request_begin(sv, c);
        } else {
            c->body_got += (size_t)n;
        }
        if (c->hdr_got == c->hdr_need && c->body_got == c->body) {
            request_done(sv, c);
            return;
        }
    }
}

static void accept_all(server *sv)
{
    for (;;) {
        int fd = accept4(sv->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
                errno == ENOMEM) {
                /* Until a connection closes: the queue of the listening
                 * socket keeps the rest. */
                fprintf(stderr, "trainyard %s: accept: %s\n", WHO,
                        strerror(errno));
                set_listening(sv, 0);
            }
            return;
        }
        conn *c = calloc(1, sizeof *c);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (!c || epoll_ctl(sv->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
            free(c);
            close(fd);
            continue;
        }
        c->fd = fd;
        c->hdr_need = RFRAME_REQ_HDR_BYTES;
        c->next = sv->conns;
        if (sv->conns)
            sv->conns->prev = c;
        sv->conns = c;
    }
}

/* ---- batches ---- */

/* The reply status for a failed run. */
static uint32_t run_status(ty_status s)
{
    return s == TY_ENOMEM ? RFRAME_ENOMEM : RFRAME_EDEVICE;
}

/* Runs the k oldest requests as one batch and answers each. */
static void run_batch(server *sv, size_t k)
{
    const model *m = sv->m;
    const uint64_t f = m->features, o = m->outputs;
    const uint32_t max = sv->pol.max_batch_size;
    conn *first = sv->q[0];
    ty_err err = {0};
    ty_status s = TY_OK;
    uint32_t rows = 0;
    uint64_t t0 = mono_ns();
    if (first->req.rows > max) {
        /* Alone, in chunks, from its buffer into its reply. */
        float *out = (float *)reply_room(first, first->req.rows * o * 4);
        if (!out)
            s = ty_fail(&err, TY_ENOMEM, NULL, "out of memory for %u outputs",
                        first->req.rows);
        for (uint32_t i = 0; s == TY_OK && i < first->req.rows; i += max) {
            uint32_t b = first->req.rows - i < max ? first->req.rows - i : max;
            s = nn_net_predict(m->net, m->ws, first->x + i * f, b, out + i * o,
                               &err);
        }
        rows = max;
    } else {
        /* One request runs from its own buffer; more are copied in. */
        for (size_t i = 0; i < k; i++) {
            if (k > 1)
                memcpy(sv->bx + rows * f, sv->q[i]->x,
                       sv->q[i]->req.rows * f * sizeof(float));
            rows += sv->q[i]->req.rows;
        }
        s = nn_net_predict(m->net, m->ws, k > 1 ? sv->bx : first->x, rows,
                           sv->bout, &err);
    }
    uint64_t t1 = mono_ns();
    if (s != TY_OK)
        fprintf(stderr, "trainyard %s: a batch of %u examples failed: %s\n",
                WHO, rows, err.msg);
    uint32_t at = 0; /* the row of the batch where the request starts */
    for (size_t i = 0; i < k; i++) {
        conn *c = sv->q[i];
        rframe_rep_hdr h = {.seq = c->req.seq,
                            .status = RFRAME_OK,
                            .rows = c->req.rows,
                            .cols = (uint32_t)o,
                            .batch_rows = rows,
                            .queue_ns = t0 - c->read_ns,
                            .compute_ns = t1 - t0};
        size_t bytes = (size_t)c->req.rows * o * sizeof(float);
        unsigned char *p = NULL;
        at += c->req.rows;
        if (s != TY_OK) {
            reply_error(sv, c, run_status(s), err.msg, &h);
        } else if (c->req.rows > max) { /* its outputs are in place */
            reply_send(sv, c, &h, bytes);
        } else if (!(p = reply_room(c, bytes))) {
            reply_error(sv, c, RFRAME_ENOMEM, "out of memory for the outputs",
                        &h);
        } else {
            memcpy(p, sv->bout + (at - c->req.rows) * o, bytes);
            reply_send(sv, c, &h, bytes);
        }
    }
    sv->qn -= k;
    memmove(sv->q, sv->q + k, sv->qn * sizeof *sv->q);
    memmove(sv->qrows, sv->qrows + k, sv->qn * sizeof *sv->qrows);
}

/* Runs every batch that is due; returns how long until the next one may
 * be (UINT64_MAX: nothing waits). */
static uint64_t run_due(server *sv)
{
    uint64_t wait = UINT64_MAX;
    while (sv->qn > 0) {
        uint64_t waited = mono_ns() - sv->q[0]->read_ns;
        size_t k = batcher_next(&sv->pol, sv->qrows, sv->qn, waited,
                                sv->draining, &wait);
        if (k == 0)
            break;
        run_batch(sv, k);
    }
    return wait;
}

/* ---- the loop ---- */

/* Stops accepting: the listening socket is closed and its file removed. */
static void start_drain(server *sv)
{
    sv->draining = 1;
    sv->drain_since = mono_ns();
    close(sv->lfd);
    sv->lfd = -1;
    unlink(sv->socket_path);
    fprintf(stderr,
            "trainyard %s: draining: %zu request(s) queued, %d reply(ies) "
            "being written\n",
            WHO, sv->qn, sv->writing);
}

/* Waits for events for at most wait_ns (UINT64_MAX: no limit). */
static int wait_events(server *sv, struct epoll_event *evs, uint64_t wait_ns)
{
    if (wait_ns == UINT64_MAX)
        return epoll_wait(sv->ep, evs, EVENTS, -1);
    struct timespec ts = {.tv_sec = (time_t)(wait_ns / 1000000000ull),
                          .tv_nsec = (long)(wait_ns % 1000000000ull)};
    int n = epoll_pwait2(sv->ep, evs, EVENTS, &ts, NULL);
    if (n < 0 && errno == ENOSYS) /* before Linux 5.11: milliseconds */
        n = epoll_wait(sv->ep, evs, EVENTS,
                       (int)((wait_ns + 999999) / 1000000));
    return n;
}

static void serve_loop(server *sv)
{
    struct epoll_event evs[EVENTS];
    for (;;) {
        if (stop_requested && !sv->draining)
            start_drain(sv);
        uint64_t wait = run_due(sv);
        if (sv->draining && sv->qn == 0) {
            /* generations end on their own (max_tokens at most) */
            if ((sv->writing == 0 ||
                 mono_ns() - sv->drain_since > DRAIN_WRITE_LIMIT_NS) &&
                replica_gen_running() == 0)
                return;
            wait = 100000000ull; /* look at the clock again */
        }
        int n = wait_events(sv, evs, wait);
        for (int i = 0; i < n; i++) {
            void *tag = evs[i].data.ptr;
            uint32_t e = evs[i].events;
            if (tag == &tag_wake) {
                char buf[64];
                while (read(sv->wake_rd, buf, sizeof buf) > 0)
                    ;
                continue;
            }
            if (tag == &tag_listen) {
                if (sv->lfd >= 0)
                    accept_all(sv);
                continue;
            }
            conn *c = tag;
            if (c->state == C_QUEUED) {
                if (e & (EPOLLHUP | EPOLLERR)) {
                    epoll_ctl(sv->ep, EPOLL_CTL_DEL, c->fd, NULL);
                    c->gone = 1;
                }
            } else if (c->state == C_WRITE) {
                conn_flush(sv, c);
            } else {
                conn_read(sv, c);
            }
        }
    }
}

/* The listening socket at path (a stale file there removed first): its
 * fd, or -1 with err. */
static int listen_at(const char *path, ty_err *err)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t n = strlen(path);
    if (n == 0 || n > SUN_PATH_MAX) {
        ty_fail(err, TY_EINVAL, RPROTO_SOCKET_PATH,
                "socket_path has %zu bytes (1 to %zu)", n, SUN_PATH_MAX);
        return -1;
    }
    memcpy(sa.sun_path, path, n + 1);
    if (unlink(path) != 0 && errno != ENOENT) {
        ty_fail(err, TY_EIO, NULL, "cannot remove the stale %s: %s", path,
                strerror(errno));
        return -1;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        chmod(path, 0600) != 0 || listen(fd, SOMAXCONN) != 0) {
        ty_fail(err, TY_EIO, NULL, "cannot listen on %s: %s", path,
                strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* Makes the epoll set, the self-pipe and the batch buffers around the
 * listening socket sv->lfd. */
static ty_status server_open(server *sv, ty_err *err)
{
    int p[2] = {-1, -1};
    sv->ep = epoll_create1(EPOLL_CLOEXEC);
    if (sv->ep < 0 || pipe2(p, O_NONBLOCK | O_CLOEXEC) != 0)
        return ty_fail(err, TY_EIO, NULL, "epoll or pipe: %s", strerror(errno));
    sv->wake_rd = p[0];
    wake_fd = p[1];
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &tag_wake};
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = &tag_listen};
    if (epoll_ctl(sv->ep, EPOLL_CTL_ADD, p[0], &ev) != 0 ||
        epoll_ctl(sv->ep, EPOLL_CTL_ADD, sv->lfd, &lev) != 0)
        return ty_fail(err, TY_EIO, NULL, "epoll_ctl: %s", strerror(errno));
    size_t rows = sv->pol.max_batch_size;
    sv->bx = malloc(rows * sv->m->features * sizeof(float));
    sv->bout = malloc(rows * sv->m->outputs * sizeof(float));
    if (!sv->bx || !sv->bout)
        return ty_fail(err, TY_ENOMEM, NULL,
                       "out of memory for a batch of %zu examples", rows);
    return TY_OK;
}

static void server_close(server *sv)
{
    while (sv->conns)
        conn_close(sv, sv->conns);
    if (sv->lfd >= 0)
        close(sv->lfd);
    if (sv->ep >= 0)
        close(sv->ep);
    int w = wake_fd;
    wake_fd = -1;
    if (w >= 0)
        close(w);
    if (sv->wake_rd >= 0)
        close(sv->wake_rd);
    free(sv->q);
    free(sv->qrows);
    free(sv->bx);
    free(sv->bout);
}

/* Loads, listens, says "ready" and serves until a drain ends. */
static int run(const json_t *doc)
{
    ty_err err = {0};
    replica_config cfg;
    if (read_config(doc, &cfg, &err) != TY_OK)
        return worker_fail(WHO, err.msg);
    model m;
    uint64_t t0 = mono_ns();
    if (model_load(&m, cfg.model_path, cfg.policy.max_batch_size, cfg.threads,
                   &err) != TY_OK)
        return worker_fail(WHO, err.msg);
    double load_seconds = (double)(mono_ns() - t0) / 1e9;
    replica_gen_loaded(m.net);
    /* A language model's cache: on a GPU or MIG slice the replica holds
     * alone, most of the memory the model left free; on the CPU (and a
     * simulated slice, which the CPU stands in for) the server's share. */
    gen_engine_set_kv_budget(&(gen_kv_budget){
        .bytes = cfg.kv_cache_bytes ? cfg.kv_cache_bytes : GEN_KV_DEFAULT_BYTES,
        .device_share = m.cuda ? GEN_KV_DEVICE_SHARE : 0,
        .device = m.cuda_device});
    int rc = WPROTO_EXIT_OK;
    server *sv = calloc(1, sizeof *sv);
    if (!sv) {
        model_free(&m);
        return worker_fail(WHO, "out of memory");
    }
    sv->ep = sv->wake_rd = -1;
    sv->socket_path = cfg.socket_path;
    sv->m = &m;
    sv->pol = cfg.policy;
    sv->lfd = stop_requested ? -1 : listen_at(cfg.socket_path, &err);
    if (stop_requested) /* stopped while loading: nothing to drain */
        goto done;
    if (sv->lfd < 0 || server_open(sv, &err) != TY_OK) {
        rc = worker_fail(WHO, err.msg);
        goto done;
    }
    worker_emit(
        wproto_encode_ready(&(wproto_ready){.socket = cfg.socket_path,
                                            .features = m.features,
                                            .outputs = m.outputs,
                                            .device = m.device,
                                            .load_seconds = load_seconds}));
    fprintf(stderr,
            "trainyard %s: %s of %s serving %s on %s (%s): batches of up to "
            "%u, %llu us delay\n",
            WHO, cfg.replica_id, cfg.deployment_id, cfg.model_path,
            cfg.socket_path, m.device, cfg.policy.max_batch_size,
            (unsigned long long)(cfg.policy.max_queue_delay_ns / 1000));
    serve_loop(sv);
done:
    if (sv->lfd >= 0) /* not drained: still ours to remove */
        unlink(cfg.socket_path);
    server_close(sv);
    free(sv);
    model_free(&m);
    return rc;
}

int replica_main(int argc, char **argv)
{
    /* SIGTERM and SIGINT drain; replicas are never preempted. */
    static const worker_process_def def = {.who = WHO,
                                           .file = RPROTO_FILE,
                                           .on_term = on_term,
                                           .on_usr1 = SIG_IGN,
                                           .body = run,
                                           .heartbeat_fields =
                                               replica_gen_heartbeat};
    /* A client gone mid-reply is an error on its connection only. */
    signal(SIGPIPE, SIG_IGN);
    return worker_process(&def, argc, argv);
}
