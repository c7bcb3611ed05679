/*
 * test_hostile_bodies.c - request bodies from clients that have no right to
 * send them (issue 29, findings 2, 3 and the first item of 7):
 *
 *   - an unauthenticated upload to a worker route (/v1/worker/jobs/{id}/...)
 *     is answered 401 from its headers, while most of its body is unsent,
 *     and nothing of it reaches <data>/tmp; the same for every route that
 *     takes a body;
 *   - an upload whose client stalls and goes, or goes in the middle of
 *     sending, leaves no temp file behind once the connection is gone;
 *   - unauthenticated clients cannot hold the large-request slots, and one
 *     tenant holding its share of them does not keep another tenant's large
 *     predict out;
 *   - failed worker tokens count toward the per-address throttle (429);
 *   - Content-Length together with Transfer-Encoding: chunked is 400.
 *
 * The requests are made on raw sockets (curl would send the whole body
 * before reading a reply), each hostile client from its own loopback
 * address so that the failed-authentication throttle of one does not touch
 * the others. Bodies are generated as they are sent, never held whole.
 * Figures are printed; what is asserted is a status, a byte count or a
 * ratio. The one wait asserted (a temp file gone after a disconnect) is a
 * liveness bound, a fraction of the idle timeout it used to take.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "models/safetensors.h"

#define MB (1024u * 1024u)
#define AUTH_BURST 5
#define IDLE_TIMEOUT_S 120   /* --connection-timeout, the server's default */
#define LARGE_BODY (5u * MB) /* over the server's 4 MiB "large" line */

static srv server;   /* the admin */
static srv tenant_a; /* the same server with tenant a's key */
static srv tenant_b;
static char predict_a[128], predict_b[128];

/* ---- raw sockets ---- */

/* A blocking socket connected to the server from src (e.g. "127.0.6.1"). */
static int connect_from(const char *src)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, src, &a.sin_addr);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in to = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)server.port)};
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&to, sizeof to), 0);
    return fd;
}

/* ---- <data>/tmp ---- */

/* Bytes in the files of <data>/tmp; *files (if not NULL) their count. */
static uint64_t tmp_bytes(int *files)
{
    char dir[PATH_MAX + 8];
    snprintf(dir, sizeof dir, "%s/tmp", server.data);
    DIR *d = opendir(dir);
    uint64_t total = 0;
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char p[PATH_MAX + 300];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (stat(p, &st) == 0) {
            total += (uint64_t)st.st_size;
            n++;
        }
    }
    if (d)
        closedir(d);
    if (files)
        *files = n;
    return total;
}

/* Waits up to limit_s for <data>/tmp to hold no file; the seconds it took,
 * or -1 when a file was still there. */
static double wait_tmp_empty(double limit_s)
{
    double t0 = now_seconds();
    int files = 1;
    while (tmp_bytes(&files), files > 0 && now_seconds() < t0 + limit_s)
        usleep(20 * 1000);
    return files ? -1 : now_seconds() - t0;
}

/* ---- a streamed upload ---- */

#define BOUNDARY "hostile-bodies-boundary"
static const char part_head[] =
    "--" BOUNDARY "\r\nContent-Disposition: form-data; name=\"file\"; "
    "filename=\"f.bin\"\r\nContent-Type: application/octet-stream\r\n\r\n";
static const char part_tail[] = "\r\n--" BOUNDARY "--\r\n";

typedef struct {
    raw_resp reply;
    uint64_t total;    /* the body's declared length */
    uint64_t sent;     /* body bytes sent in all */
    uint64_t at_reply; /* body bytes sent when the reply was readable */
    uint64_t peak_tmp; /* the most bytes seen in <data>/tmp meanwhile */
} upload_run;

/* POSTs a multipart body of one file part of `bytes` bytes to path from
 * src with extra headers (each ending in CRLF), generating it as it goes
 * and reading the reply as soon as there is one. stop_after > 0: stops
 * sending after that many file bytes and returns with the connection open
 * (its descriptor; the caller closes it); otherwise returns -1 after the
 * reply. */
static int upload(const char *src, const char *path, const char *headers,
                  uint64_t bytes, uint64_t stop_after, upload_run *out)
{
    static char chunk[64 * 1024];
    memset(chunk, 'x', sizeof chunk);
    memset(out, 0, sizeof *out);
    out->reply.status = -1;
    out->total = strlen(part_head) + bytes + strlen(part_tail);
    int fd = connect_from(src);
    char head[2048];
    int n = snprintf(head, sizeof head,
                     "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     "multipart/form-data; boundary=" BOUNDARY
                     "\r\nContent-Length: %llu\r\n%s\r\n",
                     path, (unsigned long long)out->total, headers);
    assert_int_equal(raw_send_all(fd, head, (size_t)n), 0);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    uint64_t file_sent = 0;
    int head_sent = 0, replied = 0, broken = 0;
    size_t tail_sent = 0;
    while (!replied && !broken && tail_sent < strlen(part_tail)) {
        if (stop_after && file_sent >= stop_after)
            break;
        struct pollfd p = {.fd = fd, .events = POLLIN | POLLOUT};
        if (poll(&p, 1, 10000) <= 0)
            break;
        if (p.revents & (POLLIN | POLLERR | POLLHUP)) {
            replied = 1;
            break;
        }
        const char *data;
        size_t len;
        if (!head_sent) {
            data = part_head;
            len = strlen(part_head);
        } else if (file_sent < bytes) {
            data = chunk;
            len = bytes - file_sent < sizeof chunk ? (size_t)(bytes - file_sent)
                                                   : sizeof chunk;
            if (stop_after && len > stop_after - file_sent)
                len = (size_t)(stop_after - file_sent);
        } else {
            data = part_tail + tail_sent;
            len = strlen(part_tail) - tail_sent;
        }
        ssize_t w = send(fd, data, len, MSG_NOSIGNAL);
        if (w < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (w <= 0) {
            broken = 1; /* the server closed: its reply may be there */
            break;
        }
        out->sent += (uint64_t)w;
        if (!head_sent) {
            /* the head is small: one send takes it whole on loopback */
            assert_int_equal((size_t)w, len);
            head_sent = 1;
        } else if (file_sent < bytes) {
            file_sent += (uint64_t)w;
        } else {
            tail_sent += (size_t)w;
        }
        uint64_t t = tmp_bytes(NULL);
        if (t > out->peak_tmp)
            out->peak_tmp = t;
    }
    out->at_reply = out->sent;
    if (stop_after && !replied && !broken)
        return fd;
    raw_read_reply(fd, 60, &out->reply);
    uint64_t t = tmp_bytes(NULL);
    if (t > out->peak_tmp)
        out->peak_tmp = t;
    close(fd);
    return -1;
}

/* ---- setup ---- */

/* A tenant named name; its key into as (a copy of the server). */
static void make_tenant(const char *name, srv *as)
{
    char body[128];
    snprintf(body, sizeof body, "{\"name\": \"%s\"}", name);
    resp *t = http_json(&server, "POST", "/v1/tenants", body);
    expect_status(t, 201);
    *as = server;
    snprintf(as->key, sizeof as->key, "%s",
             str(json_object_get(t->json, "key"), "api_key"));
    resp_free(t);
}

/* Imports a 4 -> 3 linear model as tenant `as`; its predict path into
 * path. */
static void import_model(const srv *as, const char *name, char path[128])
{
    float w[3 * 4] = {0}, b[3] = {0};
    for (int j = 0; j < 3; j++)
        w[j * 4 + j] = 1.0f;
    char st[PATH_MAX + 64], part[PATH_MAX + 96], name_part[128];
    snprintf(st, sizeof st, "%s.%s.safetensors", server.data, name);
    st_out_tensor t[2] = {{"0.weight", ST_F32, 2, {3, 4}, w},
                          {"0.bias", ST_F32, 1, {3}, b}};
    ty_err err = {0};
    assert_int_equal(st_write(st, NULL, t, 2, &err), TY_OK);
    snprintf(part, sizeof part, "weights=@%s", st);
    snprintf(name_part, sizeof name_part, "name=%s", name);
    const char *parts[] = {part,
                           "metadata={\"spec\": {\"layers\": [{\"type\": "
                           "\"dense\", \"units\": 3}]}, \"task\": "
                           "\"regression\", \"input_shape\": [4], "
                           "\"num_outputs\": 3}",
                           name_part, NULL};
    resp *r = http_upload(as, "/v1/models", parts);
    expect_status(r, 201);
    snprintf(path, 128, "/v1/models/%s/predict", str(r->json, "id"));
    resp_free(r);
    unlink(st);
}

static int group_setup(void **state)
{
    (void)state;
    char burst[16];
    snprintf(burst, sizeof burst, "%d", AUTH_BURST);
    const char *extra[] = {"--max-large-requests",
                           "2",
                           "--auth-fail-rate",
                           "1",
                           "--auth-fail-burst",
                           burst,
                           NULL};
    if (srv_start(&server, NULL, extra) != 0)
        return -1;
    make_tenant("alpha", &tenant_a);
    make_tenant("beta", &tenant_b);
    import_model(&tenant_a, "model-a", predict_a);
    import_model(&tenant_b, "model-b", predict_b);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    srv_stop(&server, 15);
    srv_cleanup(&server);
    return 0;
}

/* ---- finding 2: authenticate before storing ---- */

/* Three large uploads to the worker routes with no worker token (none, a
 * made-up one, the admin's API key): each is answered 401 while most of
 * its body is unsent, and <data>/tmp stays empty throughout. */
static void test_unauthenticated_worker_uploads_store_nothing(void **state)
{
    (void)state;
    static const struct {
        const char *path, *headers;
        uint64_t bytes;
    } ups[] = {
        {"/v1/worker/jobs/job_aaaaaaaaaaaaaaaaaaaa/model", "", 64ull * MB},
        {"/v1/worker/jobs/job_aaaaaaaaaaaaaaaaaaaa/checkpoint",
         "X-Trainyard-Worker-Token: "
         "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
         "\r\n",
         128ull * MB},
        {"/v1/worker/jobs/job_aaaaaaaaaaaaaaaaaaaa/log", NULL, 192ull * MB},
    };
    char admin[256];
    snprintf(admin, sizeof admin, "Authorization: Bearer %s\r\n", server.key);
    /* The setup's model imports remove their temp files as they complete,
     * a moment after their replies. */
    assert_true(wait_tmp_empty(30) >= 0);
    uint64_t peak = 0;
    int n401 = 0, early = 0;
    for (size_t i = 0; i < sizeof ups / sizeof ups[0]; i++) {
        upload_run u;
        double t0 = now_seconds();
        upload("127.0.6.1", ups[i].path,
               ups[i].headers ? ups[i].headers : admin, ups[i].bytes, 0, &u);
        printf("POST %s (%llu MB, %s): %d after %.1f MB of %.1f MB sent "
               "(%.2f s); peak %.1f MB in <data>/tmp\n",
               ups[i].path, (unsigned long long)(ups[i].bytes / MB),
               i == 0   ? "no token"
               : i == 1 ? "a made-up token"
                        : "an API key",
               u.reply.status, u.at_reply / (double)MB, u.total / (double)MB,
               now_seconds() - t0, u.peak_tmp / (double)MB);
        n401 += u.reply.status == 401;
        /* Answered while most of the body was still to come. */
        early += u.at_reply * 4 < u.total;
        peak = u.peak_tmp > peak ? u.peak_tmp : peak;
    }
    printf("3 unauthenticated uploads: %d x 401, %d answered before a quarter "
           "of the body was sent, peak %llu bytes in <data>/tmp\n",
           n401, early, (unsigned long long)peak);
    assert_int_equal(n401, 3);
    assert_int_equal(early, 3);
    assert_int_equal(peak, 0);
}

/* Every route that takes a body answers a request without credentials
 * from its headers: 401 while nearly all of a 16 MB body is unsent. */
static void test_no_body_before_credentials(void **state)
{
    (void)state;
    static const char *const posts[] = {
        "/v1/datasets",
        "/v1/jobs",
        "/v1/models",
        "/v1/models/mdl_aaaaaaaaaaaaaaaaaaaa/predict",
        "/v1/models/mdl_aaaaaaaaaaaaaaaaaaaa/evaluate",
        "/v1/deployments",
        "/v1/tenants",
        "/v2/models/m/infer",
        "/v1/worker/jobs/job_aaaaaaaaaaaaaaaaaaaa/checkpoint",
        "/v1/worker/jobs/job_aaaaaaaaaaaaaaaaaaaa/model",
        "/v1/worker/jobs/job_aaaaaaaaaaaaaaaaaaaa/log",
        "/v1/worker/jobs/job_aaaaaaaaaaaaaaaaaaaa/events",
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof posts / sizeof posts[0]; i++) {
        upload_run u;
        /* One address per request: the throttle stays out of it. */
        char src[32];
        snprintf(src, sizeof src, "127.0.9.%zu", i + 1);
        upload(src, posts[i], "", 16ull * MB, 0, &u);
        int ok = u.reply.status == 401 && u.at_reply * 4 < u.total &&
                 u.peak_tmp == 0;
        printf("POST %s with no credentials: %d after %.1f of %.1f MB; peak "
               "%llu bytes in <data>/tmp%s\n",
               posts[i], u.reply.status, u.at_reply / (double)MB,
               u.total / (double)MB, (unsigned long long)u.peak_tmp,
               ok ? "" : "  <- read before its credentials");
        bad += !ok;
    }
    assert_int_equal(bad, 0);
}

/* An authenticated upload whose client goes leaves no temp file: once
 * after stalling (the server has read all it was sent), once in the middle
 * of sending (its last bytes still on their way). */
static void test_gone_upload_leaves_no_temp_file(void **state)
{
    (void)state;
    char auth[256];
    snprintf(auth, sizeof auth, "Authorization: Bearer %s\r\n", server.key);
    const char *how[] = {"stalled, then closed", "closed while sending"};
    double lived[2];
    for (int k = 0; k < 2; k++) {
        upload_run u;
        int fd = upload("127.0.0.1", "/v1/datasets", auth, 100ull * MB,
                        16ull * MB, &u);
        assert_true(fd >= 0);
        if (k == 0) {
            /* Stalled: the server has taken what was sent. */
            double t0 = now_seconds();
            while (tmp_bytes(NULL) < 15ull * MB && now_seconds() < t0 + 30)
                usleep(20 * 1000);
            usleep(300 * 1000);
        }
        int files = 0;
        uint64_t held = tmp_bytes(&files);
        close(fd);
        lived[k] = wait_tmp_empty(IDLE_TIMEOUT_S / 8.0);
        printf("an upload %s after 16 MB of 100 MB: %d temp file(s), %.1f MB "
               "at the close; <data>/tmp empty %s %.2f s after it (the idle "
               "timeout is %d s)\n",
               how[k], files, held / (double)MB,
               lived[k] < 0 ? "not within" : "after",
               lived[k] < 0 ? IDLE_TIMEOUT_S / 8.0 : lived[k], IDLE_TIMEOUT_S);
    }
    /* Gone within an eighth of the idle timeout, which is what the
     * connection took to close when the server missed the client's end. */
    assert_true(lived[0] >= 0);
    assert_true(lived[1] >= 0);
}

/* ---- finding 3: large-request slots ---- */

/* A connection that sends the headers of a body of `bytes` bytes with
 * Expect: 100-continue and waits for the server's first word on them:
 * "100 Continue" (the body is wanted: a large one holds its slot from now
 * on) or a final status. Returns the socket (open), *status the status. */
static int hold_body(const char *src, const char *path, const char *headers,
                     uint64_t bytes, raw_resp *r)
{
    int fd = connect_from(src);
    char head[2048];
    int n = snprintf(head, sizeof head,
                     "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     "application/json\r\nContent-Length: %llu\r\nExpect: "
                     "100-continue\r\n%s\r\n",
                     path, (unsigned long long)bytes, headers);
    assert_int_equal(raw_send_all(fd, head, (size_t)n), 0);
    raw_read_reply(fd, 20, r);
    if (r->status == 100)
        send(fd, "{\"inputs\": [", 12, MSG_NOSIGNAL); /* and trickle no more */
    return fd;
}

/* A large (5 MiB) predict of tenant `as` on its model: its status. */
static long large_predict(const srv *as, const char *path)
{
    char *body = malloc(LARGE_BODY);
    assert_non_null(body);
    const char *doc = "{\"inputs\": [[1, 2, 3, 4]]}";
    memset(body, ' ', LARGE_BODY);
    memcpy(body, doc, strlen(doc));
    resp *r =
        http_do(as, "POST", path, "application/json", body, LARGE_BODY, NULL);
    long status = r->status;
    if (status != 200)
        printf("  %s: %ld %s\n", path, status, r->body ? r->body : "");
    resp_free(r);
    free(body);
    return status;
}

/* Two unauthenticated clients declaring 10 MB to a worker route do not
 * keep a tenant's large predict out. */
static void test_unauthenticated_clients_hold_no_large_slot(void **state)
{
    (void)state;
    raw_resp r1, r2;
    int f1 = hold_body("127.0.7.1", "/v1/worker/jobs/job_x/events", "",
                       10ull * MB, &r1);
    int f2 = hold_body("127.0.7.2", "/v1/worker/jobs/job_x/events", "",
                       10ull * MB, &r2);
    long a = large_predict(&tenant_a, predict_a);
    printf("two unauthenticated 10 MB bodies to a worker route: %d and %d; "
           "then tenant a's 5 MiB predict: %ld\n",
           r1.status, r2.status, a);
    close(f1);
    close(f2);
    assert_int_equal(r1.status, 401);
    assert_int_equal(r2.status, 401);
    assert_int_equal(a, 200);
}

/* With two large-request slots, tenant a holding one (its share) is
 * refused a second with 503 and Retry-After, while tenant b's large
 * predict is served; once a's goes, a is served again. */
static void test_large_slots_shared_per_tenant(void **state)
{
    (void)state;
    char auth_a[256];
    snprintf(auth_a, sizeof auth_a, "Authorization: Bearer %s\r\n",
             tenant_a.key);
    raw_resp h1, h2;
    /* a's large predict of the test before gives its slot back when it
     * completes, a moment after its reply (liveness bound). */
    int f1;
    double deadline = now_seconds() + 30;
    while ((f1 = hold_body("127.0.0.1", predict_a, auth_a, 10ull * MB, &h1),
            h1.status == 503) &&
           now_seconds() < deadline) {
        close(f1);
        usleep(100 * 1000);
    }
    int f2 = hold_body("127.0.0.1", predict_a, auth_a, 10ull * MB, &h2);
    long a = large_predict(&tenant_a, predict_a);
    long b = large_predict(&tenant_b, predict_b);
    printf("tenant a holds a large body (%d), asks for a second (%d) and a "
           "third (%ld); tenant b's large predict: %ld\n",
           h1.status, h2.status, a, b);
    if (h2.status == 503)
        printf("  a's second: %s\n", h2.body);
    close(f1);
    close(f2);
    assert_int_equal(h1.status, 100);
    assert_int_equal(h2.status, 503);
    assert_non_null(strcasestr(h2.head, "\r\nRetry-After: "));
    assert_non_null(strstr(h2.body, "busy"));
    assert_int_equal(a, 503);
    assert_int_equal(b, 200);
    /* a's slot comes back when its connection goes (liveness bound). */
    deadline = now_seconds() + 30;
    while ((a = large_predict(&tenant_a, predict_a)) == 503 &&
           now_seconds() < deadline)
        usleep(100 * 1000);
    assert_int_equal(a, 200);
}

/* ---- failed worker tokens are throttled ---- */

static void test_worker_token_failures_are_throttled(void **state)
{
    (void)state;
    const char *src = "127.0.8.1";
    int n401 = 0, n429 = 0, first429 = -1, other = 0;
    raw_resp r, last429 = {0};
    for (int i = 0; i < 3 * AUTH_BURST; i++) {
        int fd = connect_from(src);
        char req[512];
        snprintf(req, sizeof req,
                 "GET /v1/worker/jobs/job_aaaaaaaaaaaaaaaaaaaa HTTP/1.1\r\n"
                 "Host: x\r\nX-Trainyard-Worker-Token: %064d\r\nConnection: "
                 "close\r\n\r\n",
                 i);
        assert_int_equal(raw_send_all(fd, req, strlen(req)), 0);
        raw_read_reply(fd, 20, &r);
        close(fd);
        if (r.status == 401) {
            n401++;
        } else if (r.status == 429) {
            if (first429 < 0)
                first429 = i;
            n429++;
            last429 = r;
        } else {
            other++;
            printf("  a made-up worker token got %d\n", r.status);
        }
    }
    printf("%d made-up worker tokens from one address: %d x 401, %d x 429 "
           "(from request %d), %d other\n",
           3 * AUTH_BURST, n401, n429, first429 + 1, other);
    assert_int_equal(other, 0);
    assert_true(first429 >= AUTH_BURST);
    assert_true(n429 > 0);
    assert_non_null(strcasestr(last429.head, "\r\nRetry-After: "));
    /* A throttled address's upload is refused before its body too. */
    upload_run u;
    upload(src, "/v1/worker/jobs/job_aaaaaaaaaaaaaaaaaaaa/model", "",
           32ull * MB, 0, &u);
    printf("then an upload from it: %d after %.1f of %.1f MB\n", u.reply.status,
           u.at_reply / (double)MB, u.total / (double)MB);
    assert_int_equal(u.reply.status, 429);
    assert_true(u.at_reply * 4 < u.total);
    assert_int_equal(u.peak_tmp, 0);
    /* Another address is not affected. */
    resp *ok = http_get(&server, "/v1/jobs");
    expect_status(ok, 200);
    resp_free(ok);
}

/* ---- item 7: Content-Length with Transfer-Encoding: chunked ---- */

static void test_content_length_with_chunked_is_400(void **state)
{
    (void)state;
    char req[1024];
    snprintf(req, sizeof req,
             "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
             "%s\r\nContent-Type: application/json\r\nContent-Length: "
             "2\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
             "2\r\n{}\r\n0\r\n\r\n",
             server.key);
    int fd = connect_from("127.0.0.1");
    assert_int_equal(raw_send_all(fd, req, strlen(req)), 0);
    raw_resp r;
    raw_read_reply(fd, 20, &r);
    close(fd);
    printf("Content-Length with Transfer-Encoding: chunked: %d %s\n", r.status,
           r.body);
    assert_int_equal(r.status, 400);
    assert_non_null(strstr(r.body, "Transfer-Encoding"));
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* the figures beside cmocka's lines */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unauthenticated_worker_uploads_store_nothing),
        cmocka_unit_test(test_no_body_before_credentials),
        cmocka_unit_test(test_gone_upload_leaves_no_temp_file),
        cmocka_unit_test(test_unauthenticated_clients_hold_no_large_slot),
        cmocka_unit_test(test_large_slots_shared_per_tenant),
        cmocka_unit_test(test_worker_token_failures_are_throttled),
        cmocka_unit_test(test_content_length_with_chunked_is_400),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
