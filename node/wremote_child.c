/*
 * wremote_child.c - the remote worker shim's child and signals (see
 * wremote_child.h): fork/exec of `trainyard worker --job-dir`, its stdout
 * cut into lines, its end waited for, SIGTERM/SIGINT/SIGUSR1 forwarded.
 *
 * What it keeps true:
 *  - a signal that reaches the shim reaches the running child, and one
 *    that came before the child existed is sent to it as soon as it does;
 *  - the handler knows the child's pid only while the child is unreaped,
 *    so no signal goes to a recycled pid;
 *  - the child dies of SIGPIPE when the shim is gone, and gets a SIGTERM
 *    when the shim dies first (a SIGKILL);
 *  - a stopped child never blocks on a full pipe: what it still prints is
 *    read and dropped.
 *
 * The only global state is the signal handler's (the child's pid, and what
 * came before there was a child).
 */
#include "node/wremote_child.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "node/protocol.h"

#define STOP_GRACE_S 60.0 /* a stopped child's time to exit before SIGKILL */

/* ==== signals ==== */

/* The handler forwards SIGTERM, SIGINT and SIGUSR1 to the child once it
 * runs; before, it remembers them: a SIGTERM stops the downloads (the
 * transfers read child_term through wrchild_term_flag), a SIGUSR1 is sent
 * to the child as soon as it exists (it then exits 4 before training). */
static volatile sig_atomic_t child_pid;  /* 0: no child running */
static volatile sig_atomic_t child_term; /* SIGTERM or SIGINT came */
static volatile sig_atomic_t child_usr1; /* SIGUSR1 came, no child yet */

static void on_signal(int sig)
{
    pid_t pid = (pid_t)child_pid;
    if (pid > 0)
        kill(pid, sig);
    else if (sig == SIGUSR1)
        child_usr1 = 1;
    if (sig != SIGUSR1)
        child_term = 1;
}

void wrchild_signals_install(void)
{
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    /* A dead server connection must be an error, not the end. */
    signal(SIGPIPE, SIG_IGN);
}

const volatile sig_atomic_t *wrchild_term_flag(void) { return &child_term; }

/* Blocks (block 1) or unblocks the three forwarded signals. */
static void block_signals(int block)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGUSR1);
    sigprocmask(block ? SIG_BLOCK : SIG_UNBLOCK, &set, NULL);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ==== the child ==== */

void wrchild_init(wrchild *c)
{
    memset(c, 0, sizeof *c);
    c->out_fd = -1;
}

ty_status wrchild_start(wrchild *c, const char *dir, const char *log_path,
                        ty_err *err)
{
    char *const argv[] = {"trainyard", WPROTO_COMMAND, WPROTO_ARG_JOB_DIR,
                          (char *)dir, NULL};
    int fds[2] = {-1, -1};
    int log_fd =
        open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (log_fd < 0 || null_fd < 0 || pipe2(fds, O_CLOEXEC) != 0) {
        ty_fail(err, TY_EIO, NULL, "cannot start the worker: %s",
                strerror(errno));
        if (log_fd >= 0)
            close(log_fd);
        if (null_fd >= 0)
            close(null_fd);
        return TY_EIO;
    }
    fflush(NULL);
    /* Blocked until the handler knows the child's pid; the child keeps
     * them blocked (and pending) until the worker unblocks them with its
     * handlers installed. */
    block_signals(1);
    pid_t pid = fork();
    if (pid == 0) {
        /* The worker must die of a write to a pipe nobody reads (the
         * shim is gone), as it does under the server, and be told to
         * stop when the shim dies first (a SIGKILL). */
        signal(SIGPIPE, SIG_DFL);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        dup2(null_fd, STDIN_FILENO);
        dup2(fds[1], STDOUT_FILENO);
        dup2(log_fd, STDERR_FILENO);
        execv("/proc/self/exe", argv);
        _exit(WPROTO_EXIT_EXEC);
    }
    int fork_errno = errno;
    close(fds[1]);
    close(log_fd);
    close(null_fd);
    if (pid < 0) {
        block_signals(0);
        close(fds[0]);
        return ty_fail(err, TY_EIO, NULL, "cannot fork: %s",
                       strerror(fork_errno));
    }
    c->pid = pid;
    c->out_fd = fds[0];
    fcntl(c->out_fd, F_SETFL, fcntl(c->out_fd, F_GETFL) | O_NONBLOCK);
    child_pid = pid;
    if (child_term) {
        kill(pid, SIGTERM);
        c->cancel_sent = 1;
    }
    if (child_usr1) {
        kill(pid, SIGUSR1);
        c->preempt_sent = 1;
    }
    block_signals(0);
    return TY_OK;
}

int wrchild_read(wrchild *c)
{
    ssize_t r = read(c->out_fd, c->buf + c->len, sizeof c->buf - 1 - c->len);
    if (r < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : 1;
    if (r == 0) {
        if (c->len > 0) { /* a last line without its newline */
            c->buf[c->len] = '\0';
            c->last = 1;
        }
        return 1;
    }
    c->len += (size_t)r;
    return 0;
}

const char *wrchild_line(wrchild *c)
{
    if (c->last) {
        c->last = 0;
        c->len = 0;
        return c->buf;
    }
    char *nl;
    while ((nl = memchr(c->buf + c->start, '\n', c->len - c->start))) {
        char *line = c->buf + c->start;
        *nl = '\0';
        c->start = (size_t)(nl + 1 - c->buf);
        if (nl > line)
            return line;
    }
    /* No whole line left: keep the rest at the front for the next read. */
    size_t rest = c->len - c->start;
    if (rest == sizeof c->buf - 1) {
        fprintf(stderr, "trainyard worker: the worker printed a line of "
                        "more than 64 KiB; dropped\n");
        rest = 0;
    }
    memmove(c->buf, c->buf + c->start, rest);
    c->len = rest;
    c->start = 0;
    return NULL;
}

void wrchild_preempt(wrchild *c)
{
    if (c->pid > 0 && !c->preempt_sent) {
        kill(c->pid, SIGUSR1);
        c->preempt_sent = 1;
    }
}

void wrchild_cancel(wrchild *c)
{
    if (c->pid > 0 && !c->cancel_sent) {
        kill(c->pid, SIGTERM);
        c->cancel_sent = 1;
    }
}

int wrchild_reap(wrchild *c)
{
    int ws = 0;
    block_signals(1);
    while (waitpid(c->pid, &ws, 0) < 0 && errno == EINTR)
        ;
    child_pid = 0;
    block_signals(0);
    c->pid = -1;
    close(c->out_fd);
    c->out_fd = -1;
    return ws;
}

void wrchild_stop(wrchild *c)
{
    if (c->pid <= 0)
        return;
    kill(c->pid, SIGTERM);
    double deadline = now_s() + STOP_GRACE_S;
    for (;;) {
        double left = deadline - now_s();
        if (left <= 0) {
            kill(c->pid, SIGKILL);
            break;
        }
        char drop[4096];
        struct pollfd p = {.fd = c->out_fd, .events = POLLIN};
        if (poll(&p, 1, (int)(left * 1000) + 1) <= 0)
            continue;
        ssize_t r = read(c->out_fd, drop, sizeof drop);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
            break; /* its end of the pipe is closed: it exited */
    }
    wrchild_reap(c);
}
