/* blob.c - content-addressed blob folder (see blob.h). */
#include "store/blob.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "common/sha256.h"

void blob_path(const char *data_dir, const char *sha256, char *out, size_t n)
{
    snprintf(out, n, "%s/blobs/%.2s/%s", data_dir, sha256, sha256);
}

ty_status blob_import(const char *data_dir, const char *tmp_path,
                      char sha256_out[65], int64_t *bytes, ty_err *err)
{
    ty_status s = sha256_file_hex(tmp_path, sha256_out, err);
    if (s != TY_OK)
        return s;
    *bytes = fs_file_size(tmp_path);
    char dir[PATH_MAX], final[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/blobs/%.2s", data_dir, sha256_out);
    if ((s = fs_mkdirs(dir, 0700, err)) != TY_OK)
        return s;
    blob_path(data_dir, sha256_out, final, sizeof final);
    if (fs_exists(final)) {
        unlink(tmp_path);
        return TY_OK;
    }
    return fs_rename_durable(tmp_path, final, err);
}

ty_status blob_remove(const char *data_dir, const char *sha256, ty_err *err)
{
    char path[PATH_MAX];
    blob_path(data_dir, sha256, path, sizeof path);
    if (unlink(path) != 0 && errno != ENOENT)
        return ty_fail(err, TY_EIO, NULL, "cannot remove blob %s: %s", path,
                       strerror(errno));
    return TY_OK;
}
