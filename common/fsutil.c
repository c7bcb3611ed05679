/* fsutil.c - durable file operations (see fsutil.h). */
#include "common/fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

ty_status fs_mkdirs(const char *path, unsigned mode, ty_err *err)
{
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return ty_fail(err, TY_EINVAL, NULL, "path too long: %s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, mode) != 0 && errno != EEXIST)
            return ty_fail(err, ty_errno_status(errno), NULL,
                           "cannot create %s: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, mode) != 0 && errno != EEXIST)
        return ty_fail(err, ty_errno_status(errno), NULL,
                       "cannot create %s: %s", buf, strerror(errno));
    return TY_OK;
}

ty_status fs_fsync_dir(const char *path, ty_err *err)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return ty_fail(err, TY_EIO, NULL, "cannot open directory %s: %s", path,
                       strerror(errno));
    ty_status st = fs_fsync_fd(fd, path, err);
    close(fd);
    return st;
}

ty_status fs_fsync_fd(int fd, const char *what, ty_err *err)
{
    if (fsync(fd) != 0)
        return ty_fail(err, ty_errno_status(errno), NULL,
                       "fsync of %s failed: %s", what, strerror(errno));
    return TY_OK;
}

static void dir_of(const char *path, char *out, size_t n)
{
    snprintf(out, n, "%s", path);
    char *slash = strrchr(out, '/');
    if (!slash)
        snprintf(out, n, ".");
    else if (slash == out)
        out[1] = '\0';
    else
        *slash = '\0';
}

ty_status fs_rename_durable(const char *tmp, const char *final, ty_err *err)
{
    if (rename(tmp, final) != 0)
        return ty_fail(err, ty_errno_status(errno), NULL,
                       "cannot rename %s to %s: %s", tmp, final,
                       strerror(errno));
    char dir[PATH_MAX];
    dir_of(final, dir, sizeof dir);
    return fs_fsync_dir(dir, err);
}

ty_status fs_write_full(int fd, const void *data, size_t len, ty_err *err)
{
    const char *p = data;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return ty_fail(err, ty_errno_status(errno), NULL,
                           "write failed: %s", strerror(errno));
        }
        p += w;
        len -= (size_t)w;
    }
    return TY_OK;
}

ty_status fs_write_atomic(const char *path, const void *data, size_t len,
                          unsigned mode, ty_err *err)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", path) >= (int)sizeof tmp)
        return ty_fail(err, TY_EINVAL, NULL, "path too long: %s", path);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0)
        return ty_fail(err, ty_errno_status(errno), NULL,
                       "cannot create %s: %s", tmp, strerror(errno));
    ty_status st = TY_OK;
    if (fchmod(fd, mode) != 0) {
        st = ty_fail(err, TY_EIO, NULL, "chmod %s: %s", tmp, strerror(errno));
        goto fail;
    }
    if ((st = fs_write_full(fd, data, len, err)) != TY_OK)
        goto fail;
    if ((st = fs_fsync_fd(fd, tmp, err)) != TY_OK)
        goto fail;
    close(fd);
    fd = -1;
    if ((st = fs_rename_durable(tmp, path, err)) != TY_OK)
        goto fail;
    return TY_OK;
fail:
    if (fd >= 0)
        close(fd);
    unlink(tmp);
    return st;
}

ty_status fs_read_all(const char *path, size_t limit, char **out, size_t *len,
                      ty_err *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return ty_fail(err, errno == ENOENT ? TY_ENOTFOUND : TY_EIO, NULL,
                       "cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0) {
        fclose(f);
        return ty_fail(err, TY_EIO, NULL, "cannot stat %s", path);
    }
    if ((uint64_t)sb.st_size > limit) {
        fclose(f);
        return ty_fail(err, TY_ETOOBIG, NULL, "%s is larger than %zu bytes",
                       path, limit);
    }
    char *buf = malloc((size_t)sb.st_size + 1);
    if (!buf) {
        fclose(f);
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory reading %s", path);
    }
    size_t n = fread(buf, 1, (size_t)sb.st_size, f);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return ty_fail(err, TY_EIO, NULL, "cannot read %s", path);
    }
    buf[n] = '\0';
    *out = buf;
    if (len)
        *len = n;
    return TY_OK;
}

ty_status fs_remove_tree(const char *path, ty_err *err)
{
    DIR *d = opendir(path);
    if (!d) {
        if (errno == ENOENT)
            return TY_OK;
        if (errno == ENOTDIR) {
            if (unlink(path) != 0 && errno != ENOENT)
                return ty_fail(err, TY_EIO, NULL, "cannot remove %s: %s", path,
                               strerror(errno));
            return TY_OK;
        }
        return ty_fail(err, TY_EIO, NULL, "cannot open %s: %s", path,
                       strerror(errno));
    }
    ty_status st = TY_OK;
    struct dirent *e;
    while (st == TY_OK && (e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char child[PATH_MAX];
        snprintf(child, sizeof child, "%s/%s", path, e->d_name);
        struct stat sb;
        if (lstat(child, &sb) == 0 && S_ISDIR(sb.st_mode))
            st = fs_remove_tree(child, err);
        else if (unlink(child) != 0 && errno != ENOENT)
            st = ty_fail(err, TY_EIO, NULL, "cannot remove %s: %s", child,
                         strerror(errno));
    }
    closedir(d);
    if (st == TY_OK && rmdir(path) != 0 && errno != ENOENT)
        st = ty_fail(err, TY_EIO, NULL, "cannot remove %s: %s", path,
                     strerror(errno));
    return st;
}

int fs_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

int64_t fs_file_size(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return -1;
    return (int64_t)sb.st_size;
}
