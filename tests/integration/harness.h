/*
 * harness.h - drives a real `trainyard serve` process over HTTP for the
 * integration tests: start and kill servers on free ports with temporary data
 * folders, make requests with libcurl, upload multipart forms, wait for jobs,
 * and write small dataset files.
 */
#ifndef TY_HARNESS_H
#define TY_HARNESS_H

#include <jansson.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct {
    pid_t pid;
    int port;
    char data[PATH_MAX];
    char key[128];
    char base[64];
    char log[PATH_MAX];    /* the server's stderr */
    char cacert[PATH_MAX]; /* CA file for an https:// server; set after
                               srv_start (empty: the system's CAs) */
} srv;

/* Starts `$TRAINYARD_BIN serve --listen 127.0.0.1:0 --data <data>
 * --train-device cpu` plus extra flags (NULL-terminated, may be NULL). data NULL = a new temp folder.
 * Waits for the "listening" line (http:// or https://) and reads the admin
 * key from admin.key; with a given admin key (the server says "The admin API
 * key from ...") there is no file and key stays empty for the test to set.
 * Returns 0 on success. */
int srv_start(srv *s, const char *data, const char *const *extra);

/* Sends sig and waits for the process to exit; returns its wait status. */
int srv_stop(srv *s, int sig);

/* Removes the data folder. */
void srv_cleanup(srv *s);

typedef struct {
    long status;
    char *body;
    size_t len;
    json_t *json; /* parsed body when it was JSON, else NULL */
    char content_type[128];
    char location[256];
    int curl_code; /* CURLcode of the transfer; status is -1 when
                               it is not CURLE_OK */
} resp;

/* A request. key: NULL = the server's admin key, "" = no Authorization
 * header, else that key. body may be NULL. */
resp *http_do(const srv *s, const char *method, const char *path,
              const char *content_type, const void *body, size_t len,
              const char *key);

/* A request with a JSON body (text). */
resp *http_json(const srv *s, const char *method, const char *path,
                const char *json_text);

/* GET with the admin key. */
resp *http_get(const srv *s, const char *path);

/* A multipart upload. parts is NULL-terminated "name=value" for text
 * fields and "name=@/path" for files. */
resp *http_upload(const srv *s, const char *path, const char *const *parts);

void resp_free(resp *r);

/* The string member k of o, or NULL. */
const char *str(const json_t *o, const char *k);

/* Fails the test (cmocka) unless r has this status, printing what came
 * instead. */
void expect_status(resp *r, long status);

/* Fails the test unless r is a problem reply of this status whose field is
 * field (not checked when NULL) and whose detail holds needle (when not
 * NULL), naming none of s's paths; frees r. */
void expect_refusal(const srv *s, resp *r, long status, const char *field,
                    const char *needle);

/* Polls the job until it is succeeded, failed or cancelled (or timeout);
 * returns its last representation (caller decrefs). */
json_t *wait_job(const srv *s, const char *job_id, double timeout_s);

/* Polls until pred(job) is true or timeout; returns the job. */
json_t *wait_job_until(const srv *s, const char *job_id, double timeout_s,
                       int (*pred)(const json_t *job));

/* A fresh temp folder for test files. */
void temp_dir(char out[PATH_MAX]);

/* Writes a file. */
void write_file(const char *path, const void *data, size_t len);

/* A .npy file of float32 (N, cols) or, with cols 0, float32 (N). */
void write_npy_f32(const char *path, const float *data, size_t n, size_t cols);

/* A .npy file of int64 (N). */
void write_npy_i64(const char *path, const int64_t *data, size_t n);

double now_seconds(void);

/* Writes a CSV of `rows` examples: 3 well separated blobs in 4-D (columns
 * a, b, c, d) with string labels in `species` (setosa, versicolor,
 * virginica in turn), noise drawn from seed. */
void make_blobs_csv(const char *path, int rows, uint64_t seed);

/* The pid of the `trainyard <command>` child of server s working in its
 * job folder <data>/jobs/<id> (found by its command line in /proc), or 0;
 * command: "worker" or "replica". */
pid_t find_child(const srv *s, const char *command, const char *id);

/* Every such process (a data-parallel job's mpirun and its ranks): how
 * many there are, the first `max` of their pids into pids. */
int find_children(const srv *s, const char *command, const char *id,
                  pid_t *pids, int max);

/* GET /v1/jobs/{id}, expected 200: the job (new reference). */
json_t *get_job(const srv *s, const char *id);

/* GET /v1/jobs/{id}/metrics, expected 200: its "epochs" (new reference). */
json_t *job_epochs(const srv *s, const char *id);

/* The path of the shipped simulated inventory gpu/sim/<name> in this
 * source tree into out (fails the test when it is not there). */
void sim_example(const char *name, char out[PATH_MAX]);

/* Deploys model as name on one CPU replica (POST /v1/deployments) and
 * waits up to 60 s until it is ready (else fails the test): the
 * deployment's path, /v1/deployments/<id>, into dpath (128 bytes). */
void deploy_cpu_ready(const srv *s, const char *name, const char *model,
                      char *dpath);

/* find_child(s, "worker", job_id). */
pid_t find_worker(const srv *s, const char *job_id);

/* ---- raw HTTP over a socket (tests of what a libcurl client cannot
 * send: bad framing, stalls, bodies without credentials) ---- */

/* Sends all of data on fd; 0, or -1 when the connection fails. */
int raw_send_all(int fd, const char *data, size_t len);

typedef struct {
    int status; /* -1: no answer */
    char head[4096];
    char body[4096];
} raw_resp;

/* Reads one reply from fd into *out for at most timeout_s: until the
 * server closes, its head and Content-Length's body are in, or a whole
 * "100 Continue" came. */
void raw_read_reply(int fd, double timeout_s, raw_resp *out);

/* One `trainyard` CLI run ($TRAINYARD_BIN): its exit code (-1 when it did
 * not exit), stdout and stderr (allocated; cli_result_free). */
typedef struct {
    int code;
    char *out, *err;
} cli_result;

/* Runs the CLI with args (NULL-terminated) in folder home (also its HOME
 * and XDG_CONFIG_HOME, and where its output is kept), TRAINYARD_URL url,
 * TRAINYARD_KEY key, stdin /dev/null. */
void cli_run(cli_result *r, const char *home, const char *url, const char *key,
             const char *const *args);
void cli_result_free(cli_result *r);

/* Fails the test, showing both outputs, unless r exited with code. */
void cli_expect_code(const cli_result *r, int code);

#endif
