/*
 * accesslog.c - the request log's queue and writer (see accesslog.h).
 *
 * The queue is Vyukov's bounded multi-producer queue: each slot carries a
 * sequence number that says whose turn it is, producers claim a position
 * with one compare-and-swap on the tail, and the one consumer (the writer
 * thread) reads slots in order. The writer sleeps on a condition variable
 * with a short timeout instead of being signalled per record, so a request
 * makes no system call for its log line.
 */
#include "server/accesslog.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/opmetrics.h"

#define QUEUE_SIZE 8192 /* records; a power of two */
#define WRITER_NAP_MS 20
#define LINE_MAX 1024

typedef struct {
    uint64_t seq;
    access_rec rec;
} slot;

static struct {
    slot *slots;
    uint64_t tail; /* next position a producer claims */
    uint64_t head; /* next position the writer reads (writer only) */
    uint64_t done; /* positions written (for flush) */
    uint64_t dropped;
    access_log_opts opts;
    char path[4096];
    int fd; /* -1: stderr through stdio */
    uint64_t file_bytes;
    int running, stopping;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t wake, flushed;
} q = {.fd = -1,
       .opts = {.sample = 1},
       .mu = PTHREAD_MUTEX_INITIALIZER,
       .wake = PTHREAD_COND_INITIALIZER,
       .flushed = PTHREAD_COND_INITIALIZER};

static __thread unsigned sample_tick;

/* ---- output ---- */

static void json_escape(char **o, const char *end, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    for (; *s && *o + 7 < end; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            *(*o)++ = '\\';
            *(*o)++ = (char)c;
        } else if (c < 0x20) {
            *(*o)++ = '\\';
            *(*o)++ = 'u';
            *(*o)++ = '0';
            *(*o)++ = '0';
            *(*o)++ = hex[c >> 4];
            *(*o)++ = hex[c & 15];
        } else {
            *(*o)++ = (char)c;
        }
    }
}

/* The record as one JSON line, as log_event writes them. */
static size_t format_line(const access_rec *r, char *buf, size_t n)
{
    char now[32];
    ty_now_iso(now);
    char *o = buf, *end = buf + n - 2;
    o += snprintf(o, (size_t)(end - o),
                  "{\"ts\":\"%s\",\"level\":\"info\",\"event\":\"request\","
                  "\"request_id\":\"",
                  now);
    json_escape(&o, end, r->request_id);
    o += snprintf(o, (size_t)(end - o), "\",\"method\":\"");
    json_escape(&o, end, r->method);
    o += snprintf(o, (size_t)(end - o), "\",\"path\":\"");
    json_escape(&o, end, r->path);
    o += snprintf(o, (size_t)(end - o),
                  "\",\"route\":\"%s\",\"status\":%u,\"bytes_in\":%llu,"
                  "\"bytes_out\":%llu,\"duration_ms\":%.3f",
                  r->route ? r->route : "-", r->status,
                  (unsigned long long)r->bytes_in,
                  (unsigned long long)r->bytes_out, r->ms < 0 ? 0 : r->ms);
    if (r->tenant[0] && o < end)
        o += snprintf(o, (size_t)(end - o), ",\"tenant\":\"%s\"", r->tenant);
    if (r->aborted && o < end)
        o += snprintf(o, (size_t)(end - o), ",\"aborted\":true");
    if (r->route_template && o < end)
        o += snprintf(o, (size_t)(end - o), ",\"route_template\":\"%s\"",
                      r->route_template);
    if (o > end)
        o = end;
    *o++ = '}';
    *o++ = '\n';
    return (size_t)(o - buf);
}

/* Moves the file to path.1 and opens a new one (writer thread). */
static void rotate(void)
{
    char old[sizeof q.path + 2];
    snprintf(old, sizeof old, "%s.1", q.path);
    close(q.fd);
    rename(q.path, old);
    q.fd = open(q.path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
    q.file_bytes = 0;
}

static void write_fd(const char *buf, size_t len)
{
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(q.fd, buf + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    q.file_bytes += off;
}

/* Writes whole lines; a file never grows past max_bytes (but for one line
 * longer than that, alone in its file). */
static void write_out(const char *buf, size_t len)
{
    if (!len)
        return;
    if (q.fd < 0 && !q.path[0]) {
        flockfile(stderr);
        fwrite(buf, 1, len, stderr);
        fflush(stderr);
        funlockfile(stderr);
        return;
    }
    while (len > 0 && q.fd >= 0) {
        size_t take = len;
        if (q.opts.max_bytes) {
            uint64_t room = q.file_bytes < q.opts.max_bytes
                                ? q.opts.max_bytes - q.file_bytes
                                : 0;
            /* the whole lines that fit in room */
            take = 0;
            for (size_t i = 0; i < len; i++)
                if (buf[i] == '\n') {
                    if (i + 1 > room)
                        break;
                    take = i + 1;
                }
            if (take == 0 && q.file_bytes == 0) { /* one long line */
                const char *nl = memchr(buf, '\n', len);
                take = nl ? (size_t)(nl - buf) + 1 : len;
            }
        }
        write_fd(buf, take);
        buf += take;
        len -= take;
        if (len > 0)
            rotate();
    }
}

/* Whether a record's line is written (sampling). */
static int sampled(const access_rec *r, unsigned *tick)
{
    if (r->status >= 400 || r->aborted)
        return 1;
    if (q.opts.sample == 0)
        return 0;
    return (*tick)++ % q.opts.sample == 0;
}

/* Counts the record in the metrics and, if sampled, adds its line. */
static void account(const access_rec *r, char *buf, size_t *len, size_t cap,
                    unsigned *tick)
{
    if (r->timed)
        opm_predict(r->timed, r->timed_s);
    opm_http_request(r->method_label,
                     r->route_template ? r->route_template : "unmatched",
                     r->status, r->ms < 0 ? -1.0 : r->ms / 1e3);
    if (!sampled(r, tick))
        return;
    if (*len + LINE_MAX > cap) {
        write_out(buf, *len);
        *len = 0;
    }
    *len += format_line(r, buf + *len, LINE_MAX);
}

/* ---- the queue ---- */

void access_log_put(const access_rec *rec)
{
    if (!__atomic_load_n(&q.running, __ATOMIC_ACQUIRE)) {
        char buf[LINE_MAX];
        size_t len = 0;
        if (rec->timed)
            opm_predict(rec->timed, rec->timed_s);
        opm_http_request(rec->method_label,
                         rec->route_template ? rec->route_template
                                             : "unmatched",
                         rec->status, rec->ms < 0 ? -1.0 : rec->ms / 1e3);
        if (q.opts.sample != 0 || rec->status >= 400) {
            len = format_line(rec, buf, sizeof buf);
            write_out(buf, len);
        }
        return;
    }
    uint64_t pos = __atomic_load_n(&q.tail, __ATOMIC_RELAXED);
    for (;;) {
        slot *s = &q.slots[pos & (QUEUE_SIZE - 1)];
        uint64_t seq = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
        int64_t dif = (int64_t)(seq - pos);
        if (dif == 0) {
            if (__atomic_compare_exchange_n(&q.tail, &pos, pos + 1, 1,
                                            __ATOMIC_RELAXED,
                                            __ATOMIC_RELAXED)) {
                s->rec = *rec;
                __atomic_store_n(&s->seq, pos + 1, __ATOMIC_RELEASE);
                return;
            }
        } else if (dif < 0) {
            __atomic_add_fetch(&q.dropped, 1, __ATOMIC_RELAXED);
            return;
        } else {
            pos = __atomic_load_n(&q.tail, __ATOMIC_RELAXED);
        }
    }
}

/* Takes what is queued (writer thread); returns how many records. final:
 * the last drain before the writer stops (what is untold is told). */
static size_t drain(char *buf, size_t cap, int final)
{
    size_t len = 0, n = 0;
    unsigned tick = sample_tick;
    for (;;) {
        slot *s = &q.slots[q.head & (QUEUE_SIZE - 1)];
        uint64_t seq = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
        if (seq != q.head + 1)
            break;
        account(&s->rec, buf, &len, cap, &tick);
        __atomic_store_n(&s->seq, q.head + QUEUE_SIZE, __ATOMIC_RELEASE);
        q.head++;
        n++;
    }
    sample_tick = tick;
    /* A full queue stays full while the flood lasts: its line is written
     * at most once a second with the records dropped since the last, not
     * at every nap. */
    static log_limit limit;
    static uint64_t dropped; /* not yet told */
    log_repeat rep;
    dropped += __atomic_exchange_n(&q.dropped, 0, __ATOMIC_RELAXED);
    if (dropped && len + LINE_MAX <= cap &&
        (final || log_limit_take(&limit, NULL, &rep))) {
        char now[32];
        ty_now_iso(now);
        len += (size_t)snprintf(buf + len, LINE_MAX,
                                "{\"ts\":\"%s\",\"level\":\"warn\",\"event\":"
                                "\"access_log_dropped\",\"records\":%llu}\n",
                                now, (unsigned long long)dropped);
        dropped = 0;
    }
    write_out(buf, len);
    return n;
}

static void *writer(void *arg)
{
    (void)arg;
    size_t cap = 256 * LINE_MAX;
    char *buf = malloc(cap);
    if (!buf)
        return NULL;
    pthread_mutex_lock(&q.mu);
    for (;;) {
        int stopping = q.stopping;
        pthread_mutex_unlock(&q.mu);
        drain(buf, cap, stopping);
        pthread_mutex_lock(&q.mu);
        q.done = q.head;
        pthread_cond_broadcast(&q.flushed);
        if (stopping)
            break;
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_nsec += WRITER_NAP_MS * 1000000L;
        if (t.tv_nsec >= 1000000000L) {
            t.tv_sec++;
            t.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&q.wake, &q.mu, &t);
    }
    pthread_mutex_unlock(&q.mu);
    free(buf);
    return NULL;
}

ty_status access_log_start(const access_log_opts *opts, ty_err *err)
{
    q.opts = *opts;
    q.fd = -1;
    if (opts->path && *opts->path && strcmp(opts->path, "-") != 0) {
        snprintf(q.path, sizeof q.path, "%s", opts->path);
        q.fd = open(q.path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
        if (q.fd < 0)
            return ty_fail(err, TY_EIO, "--access-log", "--access-log %s: %s",
                           opts->path, strerror(errno));
        struct stat st;
        q.file_bytes = fstat(q.fd, &st) == 0 ? (uint64_t)st.st_size : 0;
    }
    q.slots = calloc(QUEUE_SIZE, sizeof *q.slots);
    if (!q.slots)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    for (uint64_t i = 0; i < QUEUE_SIZE; i++)
        q.slots[i].seq = i;
    q.tail = q.head = q.done = 0;
    q.stopping = 0;
    if (pthread_create(&q.thread, NULL, writer, NULL) != 0) {
        free(q.slots);
        q.slots = NULL;
        return ty_fail(err, TY_EIO, NULL, "cannot start the access log");
    }
    __atomic_store_n(&q.running, 1, __ATOMIC_RELEASE);
    return TY_OK;
}

void access_log_flush(void)
{
    if (!__atomic_load_n(&q.running, __ATOMIC_ACQUIRE))
        return;
    uint64_t want = __atomic_load_n(&q.tail, __ATOMIC_ACQUIRE);
    pthread_mutex_lock(&q.mu);
    while (q.done < want && !q.stopping) {
        pthread_cond_signal(&q.wake);
        pthread_cond_wait(&q.flushed, &q.mu);
    }
    pthread_mutex_unlock(&q.mu);
}

void access_log_stop(void)
{
    if (!__atomic_load_n(&q.running, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&q.mu);
    q.stopping = 1;
    pthread_cond_signal(&q.wake);
    pthread_mutex_unlock(&q.mu);
    pthread_join(q.thread, NULL);
    __atomic_store_n(&q.running, 0, __ATOMIC_RELEASE);
    free(q.slots);
    q.slots = NULL;
    if (q.fd >= 0)
        close(q.fd);
    q.fd = -1;
    q.path[0] = '\0';
}
