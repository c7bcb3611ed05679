/*
 * test_fetch_guard.c - dataset URLs cannot make the server reach what is not
 * the public internet (issue 16, finding 1), and errors carry no server
 * paths (finding 6).
 *
 * A local listener stands in for an internal service: it answers every path
 * with a recognisable marker, serves a good CSV at /data.csv and redirects
 * /redirect to 127.0.0.1. With the default flags every spelling of a
 * loopback, private, link-local, ... address, for the listener's port and for
 * a closed one, must get a 422 whose problem document is byte-for-byte the
 * same (but for the request id), without the marker. With
 * --fetch-allow-networks 127.0.0.2/32 the listener is reachable as
 * 127.0.0.2 (Linux routes all of 127/8 to lo), a redirect from it to
 * 127.0.0.1 is refused, and a reply that is not a CSV is described, not
 * quoted.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"

#define MARKER "TY-SECRET-MARKER-7f3a"

static int listener_port;

static enum MHD_Result answer(void *cls, struct MHD_Connection *c,
                              const char *url, const char *method,
                              const char *version, const char *data,
                              size_t *size, void **ptr)
{
    static char body_csv[] = "a,b,y\n1,2,x\n3,4,z\n5,6,x\n7,8,z\n";
    static char body_cols[] = MARKER "-A," MARKER "-B\n1,2\n";
    static char body_marker[] = MARKER " {\"status\":\"ok\"}\n";
    struct MHD_Response *r;
    unsigned status = 200;
    if (!strcmp(url, "/data.csv")) {
        r = MHD_create_response_from_buffer(strlen(body_csv), body_csv,
                                            MHD_RESPMEM_PERSISTENT);
    } else if (!strcmp(url, "/cols.csv")) {
        r = MHD_create_response_from_buffer(strlen(body_cols), body_cols,
                                            MHD_RESPMEM_PERSISTENT);
    } else if (!strcmp(url, "/redirect") || !strcmp(url, "/to-file")) {
        char loc[128];
        if (!strcmp(url, "/redirect"))
            snprintf(loc, sizeof loc, "http://127.0.0.1:%d/data.csv",
                     listener_port);
        else
            snprintf(loc, sizeof loc, "file:///etc/passwd");
        r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
        MHD_add_response_header(r, "Location", loc);
        status = 302;
    } else {
        r = MHD_create_response_from_buffer(strlen(body_marker), body_marker,
                                            MHD_RESPMEM_PERSISTENT);
    }
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static struct MHD_Daemon *start_listener(void)
{
    struct MHD_Daemon *d =
        MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL, answer,
                         NULL, MHD_OPTION_END);
    assert_non_null(d);
    listener_port = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT)->port;
    return d;
}

/* A port nothing listens on: bound, then closed. */
static int closed_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

static resp *fetch_csv(const srv *s, const char *url, const char *label)
{
    char body[1024];
    snprintf(body, sizeof body,
             "{\"name\": \"f\", \"format\": \"csv\", \"label_column\": "
             "\"%s\", \"urls\": {\"file\": \"%s\"}}",
             label, url);
    return http_json(s, "POST", "/v1/datasets", body);
}

/* The problem document without its request id, as compact text. */
static char *problem_text(const resp *r)
{
    assert_non_null(r->json);
    json_t *copy = json_deep_copy(r->json);
    json_object_del(copy, "request_id");
    char *text = json_dumps(copy, JSON_SORT_KEYS | JSON_COMPACT);
    json_decref(copy);
    return text;
}

static void expect_no_echo(const resp *r)
{
    if (r->body && strstr(r->body, "TY-SECRET"))
        fail_msg("the reply of the fetched URL was echoed: %s", r->body);
}

static void test_refused_in_every_spelling(void **state)
{
    srv s;
    const char *flags[] = {"--fetch-timeout", "5", NULL};
    assert_int_equal(srv_start(&s, NULL, flags), 0);
    struct MHD_Daemon *d = start_listener();
    int ports[2] = {listener_port, closed_port()};
    static const char *const hosts[] = {"127.0.0.1",
                                        "localhost",
                                        "LocalHost",
                                        "localhost.",
                                        "2130706433",
                                        "0x7f000001",
                                        "0x7F.0.0.1",
                                        "0177.0.0.1",
                                        "0177.1",
                                        "127.1",
                                        "127.0.1",
                                        "127.9.9.9",
                                        "[::ffff:127.0.0.1]",
                                        "[::ffff:7f00:1]",
                                        "[::1]",
                                        "[0:0:0:0:0:0:0:1]",
                                        "0.0.0.0",
                                        "0",
                                        "[::]",
                                        "10.0.0.1",
                                        "172.16.0.1",
                                        "192.168.0.1",
                                        "100.64.0.1",
                                        "169.254.169.254",
                                        "2852039166", /* 169.254.169.254 */
                                        "[::ffff:169.254.169.254]",
                                        "[fc00::1]",
                                        "[fd00::1]",
                                        "224.0.0.1",
                                        "255.255.255.255",
                                        "[ff02::1]",
                                        "[::ffff:10.0.0.1]",
                                        "[64:ff9b::7f00:1]"};
    char *first = NULL;
    int n = 0;
    for (size_t i = 0; i < sizeof hosts / sizeof *hosts; i++) {
        for (int p = 0; p < 2; p++) {
            char url[256];
            snprintf(url, sizeof url, "http://%s:%d/metrics", hosts[i],
                     ports[p]);
            resp *r = fetch_csv(&s, url, "y");
            if (r->status != 422)
                fail_msg("%s: status %ld, body %s", url, r->status, r->body);
            expect_no_echo(r);
            char *text = problem_text(r);
            if (!first)
                first = text;
            else if (strcmp(first, text) != 0)
                fail_msg("%s answered differently:\n%s\nfirst:\n%s", url, text,
                         first);
            if (text != first)
                free(text);
            resp_free(r);
            n++;
        }
    }
    print_message("%d refused URLs, all answered: %s\n", n, first);
    assert_non_null(strstr(first, "\"field\":\"urls.file\""));
    assert_non_null(strstr(first, "cannot fetch this URL"));
    free(first);
    MHD_stop_daemon(d);

    /* The operator's log says what happened. */
    FILE *f = fopen(s.log, "r");
    assert_non_null(f);
    char line[4096];
    int refused_logged = 0;
    while (fgets(line, sizeof line, f))
        refused_logged += strstr(line, "\"fetch_failed\"") &&
                          strstr(line, "\"refused_address\":\"127.0.0.1\"");
    fclose(f);
    assert_true(refused_logged > 0);
    srv_stop(&s, SIGTERM);
    srv_cleanup(&s);
}

static void test_allowed_network(void **state)
{
    srv s;
    const char *flags[] = {"--fetch-allow-networks", "127.0.0.2/32", NULL};
    assert_int_equal(srv_start(&s, NULL, flags), 0);
    struct MHD_Daemon *d = start_listener();
    char url[256];

    /* An allowed network works. */
    snprintf(url, sizeof url, "http://127.0.0.2:%d/data.csv", listener_port);
    resp *r = fetch_csv(&s, url, "y");
    if (r->status != 201)
        fail_msg("%s: status %ld, body %s", url, r->status, r->body);
    assert_int_equal(
        json_integer_value(json_object_get(r->json, "num_examples")), 4);
    resp_free(r);

    /* The rest of 127/8 stays refused, and so does a redirect from the
     * allowed host to it. */
    char *refused[2];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/data.csv", listener_port);
    r = fetch_csv(&s, url, "y");
    assert_int_equal(r->status, 422);
    refused[0] = problem_text(r);
    resp_free(r);
    snprintf(url, sizeof url, "http://127.0.0.2:%d/redirect", listener_port);
    r = fetch_csv(&s, url, "y");
    if (r->status != 422)
        fail_msg("a redirect to 127.0.0.1: status %ld, body %s", r->status,
                 r->body);
    refused[1] = problem_text(r);
    resp_free(r);
    assert_string_equal(refused[0], refused[1]);
    assert_non_null(strstr(refused[0], "cannot fetch this URL"));
    free(refused[0]);
    free(refused[1]);

    /* A redirect to another scheme is refused too. */
    snprintf(url, sizeof url, "http://127.0.0.2:%d/to-file", listener_port);
    r = fetch_csv(&s, url, "y");
    assert_int_equal(r->status, 422);
    assert_null(strstr(r->body, "root:"));
    resp_free(r);

    /* A reply that is not a CSV is described, not quoted. */
    snprintf(url, sizeof url, "http://127.0.0.2:%d/metrics", listener_port);
    r = fetch_csv(&s, url, "y");
    assert_int_equal(r->status, 422);
    expect_no_echo(r);
    assert_non_null(strstr(str(r->json, "detail"), "line 1 has 1 column"));
    resp_free(r);
    snprintf(url, sizeof url, "http://127.0.0.2:%d/cols.csv", listener_port);
    r = fetch_csv(&s, url, "y");
    assert_int_equal(r->status, 422);
    expect_no_echo(r);
    assert_non_null(strstr(str(r->json, "detail"), "it names 2 columns"));
    resp_free(r);
    MHD_stop_daemon(d);
    srv_stop(&s, SIGTERM);
    srv_cleanup(&s);
}

/* Finding 6: a weights file too short for safetensors is named by its form
 * field, not by the server's temporary path. */
static void test_import_errors_name_no_path(void **state)
{
    srv s;
    assert_int_equal(srv_start(&s, NULL, NULL), 0);
    char dir[PATH_MAX], path[PATH_MAX + 32], part[PATH_MAX + 48];
    temp_dir(dir);
    static const struct {
        size_t len;
        const char *detail;
    } cases[] = {
        {3,
         "the weights are not a valid safetensors file: the file has 3 bytes, "
         "too short for safetensors"},
        {1,
         "the weights are not a valid safetensors file: the file has 1 byte, "
         "too short for safetensors"},
        {7,
         "the weights are not a valid safetensors file: the file has 7 bytes, "
         "too short for safetensors"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(path, sizeof path, "%s/w%zu.safetensors", dir, i);
        write_file(path, "\x01\x02\x03\x04\x05\x06\x07", cases[i].len);
        snprintf(part, sizeof part, "weights=@%s", path);
        const char *parts[] = {
            part,
            "metadata={\"spec\": {\"layers\": [{\"type\": \"dense\", "
            "\"units\": 3}]}, \"task\": \"regression\", \"input_shape\": [4], "
            "\"num_outputs\": 3}",
            NULL};
        resp *r = http_upload(&s, "/v1/models", parts);
        assert_int_equal(r->status, 422);
        if (strstr(r->body, s.data) || strstr(r->body, "upload-") ||
            strstr(r->body, "/tmp"))
            fail_msg("a server path in the reply: %s", r->body);
        assert_string_equal(str(r->json, "detail"), cases[i].detail);
        assert_string_equal(str(r->json, "field"), "weights");
        resp_free(r);
    }
    srv_stop(&s, SIGTERM);
    srv_cleanup(&s);
}

/* A stored dataset file that does not open is the server's fault, told
 * without the blob's path (the log has it). */
static void test_damaged_dataset_no_path(void **state)
{
    srv s;
    assert_int_equal(srv_start(&s, NULL, NULL), 0);
    char dir[PATH_MAX], path[PATH_MAX + 32], part[PATH_MAX + 48];
    temp_dir(dir);
    snprintf(path, sizeof path, "%s/d.csv", dir);
    const char *csv = "a,b,y\n1,2,x\n3,4,z\n";
    write_file(path, csv, strlen(csv));
    snprintf(part, sizeof part, "file=@%s", path);
    const char *ds_parts[] = {"name=d", "format=csv", "label_column=y", part,
                              NULL};
    resp *r = http_upload(&s, "/v1/datasets", ds_parts);
    assert_int_equal(r->status, 201);
    char examples[128];
    snprintf(examples, sizeof examples, "/v1/datasets/%s/examples",
             str(r->json, "id"));
    resp_free(r);
    char blobs[PATH_MAX + 8], blob[PATH_MAX * 2];
    snprintf(blobs, sizeof blobs, "%s/blobs", s.data);
    DIR *top = opendir(blobs);
    assert_non_null(top);
    int damaged = 0;
    for (struct dirent *e; (e = readdir(top));) {
        if (e->d_name[0] == '.')
            continue;
        char sub[PATH_MAX * 2];
        snprintf(sub, sizeof sub, "%s/%s", blobs, e->d_name);
        DIR *in = opendir(sub);
        for (struct dirent *f; in && (f = readdir(in));) {
            if (f->d_name[0] == '.')
                continue;
            snprintf(blob, sizeof blob, "%s/%s", sub, f->d_name);
            write_file(blob, "TYDS\x01\x00", 6);
            damaged++;
        }
        if (in)
            closedir(in);
    }
    closedir(top);
    assert_int_equal(damaged, 1);
    r = http_get(&s, examples);
    print_message("a damaged dataset file: %ld %s\n", r->status, r->body);
    assert_true(r->status >= 400);
    if (strstr(r->body, s.data) || strstr(r->body, "/blobs/"))
        fail_msg("a server path in the reply: %s", r->body);
    resp_free(r);
    srv_stop(&s, SIGTERM);
    srv_cleanup(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refused_in_every_spelling),
        cmocka_unit_test(test_allowed_network),
        cmocka_unit_test(test_import_errors_name_no_path),
        cmocka_unit_test(test_damaged_dataset_no_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
