/*
 * inject.c - an LD_PRELOAD library that makes the N-th write, fsync, rename
 * or malloc of a running `trainyard serve` fail, as SQLite's own fault tests
 * do (issue 16). Driven by tests/fault/run.py.
 *
 * Control: TY_FAULT_CTL names a file of at least sizeof(fault_ctl) bytes
 * that the driver and this library both map shared. The driver writes the
 * server's pid, the kind, the errno and N, then sets armed; from then on every
 * call of that kind in that process (not in its workers) adds one to count,
 * and the call that makes count == target fails with err (target 0: count
 * only, nothing fails). For I/O only files under dir count (the data folder:
 * not the log, not sockets); malloc counts every allocation.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <execinfo.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

enum { K_NONE, K_WRITE, K_FSYNC, K_RENAME, K_MALLOC };

typedef struct {
    int64_t pid;     /* only this process injects */
    int64_t armed;   /* 0: pass everything through */
    int64_t kind;    /* K_* */
    int64_t err;     /* errno of the failing call */
    int64_t target;  /* 1-based call to fail; 0 = count only */
    int64_t count;   /* calls of kind since arming */
    int64_t fired;   /* calls failed */
    int64_t skipped; /* malloc targets moved on: inside jansson's parser */
    char dir[4096];  /* I/O under this prefix counts */
} fault_ctl;

static fault_ctl *ctl;
static size_t dir_len;

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);

static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_rename)(const char *, const char *);
static int (*real_renameat)(int, const char *, int, const char *);

__attribute__((constructor)) static void fault_init(void)
{
    real_write = dlsym(RTLD_NEXT, "write");
    real_pwrite = dlsym(RTLD_NEXT, "pwrite");
    real_pwrite64 = dlsym(RTLD_NEXT, "pwrite64");
    real_writev = dlsym(RTLD_NEXT, "writev");
    real_fsync = dlsym(RTLD_NEXT, "fsync");
    real_fdatasync = dlsym(RTLD_NEXT, "fdatasync");
    real_rename = dlsym(RTLD_NEXT, "rename");
    real_renameat = dlsym(RTLD_NEXT, "renameat");
    /* backtrace loads libgcc_s the first time: do it now, not inside a
     * failing malloc */
    void *warm[2];
    backtrace(warm, 2);
    const char *path = getenv("TY_FAULT_CTL");
    if (!path)
        return;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return;
    void *m = mmap(NULL, sizeof(fault_ctl), PROT_READ | PROT_WRITE, MAP_SHARED,
                   fd, 0);
    close(fd);
    if (m != MAP_FAILED)
        ctl = m;
}

/* 1 when the caller is inside jansson's json_load*: jansson 2.14's parser
 * uses freed memory when one of its allocations fails (reproduced without
 * trainyard), and the heap it corrupts makes a later, unrelated crash. A
 * failure there tests jansson, not trainyard, so the target moves on to the
 * next allocation. dladdr does not allocate. */
static int in_json_parser(void)
{
    void *frames[48];
    int depth = backtrace(frames, 48);
    for (int i = 0; i < depth; i++) {
        Dl_info info;
        if (dladdr(frames[i], &info) && info.dli_sname &&
            strncmp(info.dli_sname, "json_load", 9) == 0)
            return 1;
    }
    return 0;
}

/* 1 when this call of kind is the one to fail. */
static int hit(int kind)
{
    fault_ctl *c = ctl;
    if (!c || !__atomic_load_n(&c->armed, __ATOMIC_ACQUIRE) ||
        c->kind != kind || c->pid != (int64_t)getpid())
        return 0;
    int64_t n = __atomic_add_fetch(&c->count, 1, __ATOMIC_ACQ_REL);
    if (c->target == 0 || n != c->target)
        return 0;
    if (kind == K_MALLOC && in_json_parser()) {
        __atomic_add_fetch(&c->target, 1, __ATOMIC_ACQ_REL);
        __atomic_add_fetch(&c->skipped, 1, __ATOMIC_ACQ_REL);
        return 0;
    }
    __atomic_add_fetch(&c->fired, 1, __ATOMIC_ACQ_REL);
    if (getenv("TY_FAULT_TRACE")) {
        /* where the failing call came from, on the server's stderr */
        void *frames[24];
        int depth = backtrace(frames, 24);
        backtrace_symbols_fd(frames, depth, 2);
    }
    errno = (int)c->err;
    return 1;
}

static int under_dir_path(const char *p)
{
    if (!dir_len)
        dir_len = strlen(ctl->dir);
    return p && dir_len && strncmp(p, ctl->dir, dir_len) == 0;
}

static int armed_for(int kind)
{
    fault_ctl *c = ctl;
    return c && __atomic_load_n(&c->armed, __ATOMIC_ACQUIRE) &&
           c->kind == kind && c->pid == (int64_t)getpid();
}

static int under_dir_fd(int fd)
{
    char link[64], target[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0)
        return 0;
    target[n] = '\0';
    return under_dir_path(target);
}

static int fail_io_fd(int kind, int fd)
{
    return armed_for(kind) && under_dir_fd(fd) && hit(kind);
}

ssize_t write(int fd, const void *buf, size_t n)
{
    if (fail_io_fd(K_WRITE, fd))
        return -1;
    return real_write(fd, buf, n);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    if (fail_io_fd(K_WRITE, fd))
        return -1;
    return real_pwrite(fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
    if (fail_io_fd(K_WRITE, fd))
        return -1;
    return real_pwrite64(fd, buf, n, off);
}

ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
    if (fail_io_fd(K_WRITE, fd))
        return -1;
    return real_writev(fd, iov, cnt);
}

int fsync(int fd)
{
    if (fail_io_fd(K_FSYNC, fd))
        return -1;
    return real_fsync(fd);
}

int fdatasync(int fd)
{
    if (fail_io_fd(K_FSYNC, fd))
        return -1;
    return real_fdatasync(fd);
}

int rename(const char *from, const char *to)
{
    if (armed_for(K_RENAME) && under_dir_path(to) && hit(K_RENAME))
        return -1;
    return real_rename(from, to);
}

int renameat(int dfd, const char *from, int tfd, const char *to)
{
    if (armed_for(K_RENAME) && under_dir_path(to) && hit(K_RENAME))
        return -1;
    return real_renameat(dfd, from, tfd, to);
}

void *malloc(size_t n)
{
    if (armed_for(K_MALLOC) && hit(K_MALLOC))
        return NULL;
    return __libc_malloc(n);
}

void *calloc(size_t n, size_t size)
{
    if (armed_for(K_MALLOC) && hit(K_MALLOC))
        return NULL;
    return __libc_calloc(n, size);
}

void *realloc(void *p, size_t n)
{
    if (n && armed_for(K_MALLOC) && hit(K_MALLOC))
        return NULL;
    return __libc_realloc(p, n);
}
