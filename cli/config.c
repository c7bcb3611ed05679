/*
 * config.c - the client's config file and key input (see config.h). The
 * file holds a secret: it is created 0600 with O_EXCL under a temporary
 * name and renamed into place, so no moment exists where it is readable by
 * others, and the key is never echoed or logged.
 */
#include "cli/config.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include "common/fsutil.h"

static ty_status config_dir(char out[PATH_MAX], ty_err *err)
{
    const char *xdg = getenv("XDG_CONFIG_HOME");
    const char *home = getenv("HOME");
    if (xdg && *xdg)
        snprintf(out, PATH_MAX, "%s/trainyard", xdg);
    else if (home && *home)
        snprintf(out, PATH_MAX, "%s/.config/trainyard", home);
    else
        return ty_fail(err, TY_EINVAL, NULL,
                       "neither XDG_CONFIG_HOME nor HOME is set: there is no "
                       "place for the config file");
    return TY_OK;
}

ty_status cli_config_path(char out[PATH_MAX], ty_err *err)
{
    char dir[PATH_MAX];
    ty_status st = config_dir(dir, err);
    if (st != TY_OK)
        return st;
    if (snprintf(out, PATH_MAX, "%s/config.json", dir) >= PATH_MAX)
        return ty_fail(err, TY_EINVAL, NULL, "the config path is too long");
    return TY_OK;
}

static void copy_field(const json_t *o, const char *k, char *dst, size_t n)
{
    const char *v = json_string_value(json_object_get(o, k));
    if (v)
        snprintf(dst, n, "%s", v);
}

ty_status cli_config_load(cli_config *cfg, ty_err *err)
{
    memset(cfg, 0, sizeof *cfg);
    char path[PATH_MAX];
    ty_status st = cli_config_path(path, err);
    if (st != TY_OK)
        return TY_OK; /* no place for a file: nothing stored */
    if (!fs_exists(path))
        return TY_OK;
    json_error_t je;
    json_t *o = json_load_file(path, 0, &je);
    if (!json_is_object(o)) {
        json_decref(o);
        return ty_fail(err, TY_EFORMAT, NULL,
                       "%s is not a JSON object (%s); run trainyard login "
                       "again or remove it",
                       path, je.text);
    }
    copy_field(o, "url", cfg->url, sizeof cfg->url);
    copy_field(o, "key", cfg->key, sizeof cfg->key);
    copy_field(o, "cacert", cfg->cacert, sizeof cfg->cacert);
    json_decref(o);
    return TY_OK;
}

ty_status cli_config_save(const cli_config *cfg, char path[PATH_MAX],
                          ty_err *err)
{
    char dir[PATH_MAX], tmp[PATH_MAX + 16];
    ty_status st = config_dir(dir, err);
    if (st != TY_OK || (st = cli_config_path(path, err)) != TY_OK)
        return st;
    if ((st = fs_mkdirs(dir, 0700, err)) != TY_OK)
        return st;
    /* An existing folder made wider by hand is narrowed again. */
    if (chmod(dir, 0700) != 0)
        return ty_fail(err, TY_EIO, NULL, "cannot chmod %s: %s", dir,
                       strerror(errno));
    json_t *o = json_pack("{s:s, s:s}", "url", cfg->url, "key", cfg->key);
    if (o && *cfg->cacert)
        json_object_set_new(o, "cacert", json_string(cfg->cacert));
    char *text = o ? json_dumps(o, JSON_INDENT(2)) : NULL;
    json_decref(o);
    if (!text)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        free(text);
        return ty_fail(err, TY_EIO, NULL, "cannot create %s: %s", tmp,
                       strerror(errno));
    }
    size_t len = strlen(text);
    text[len] = '\0';
    st = fs_write_full(fd, text, len, err);
    if (st == TY_OK)
        st = fs_write_full(fd, "\n", 1, err);
    free(text);
    if (st == TY_OK)
        st = fs_fsync_fd(fd, tmp, err);
    close(fd);
    if (st == TY_OK)
        st = fs_rename_durable(tmp, path, err);
    if (st != TY_OK)
        unlink(tmp);
    return st;
}

ty_status cli_config_remove(int *removed, char path[PATH_MAX], ty_err *err)
{
    *removed = 0;
    ty_status st = cli_config_path(path, err);
    if (st != TY_OK)
        return st;
    if (unlink(path) == 0) {
        *removed = 1;
        return TY_OK;
    }
    if (errno == ENOENT)
        return TY_OK;
    return ty_fail(err, TY_EIO, NULL, "cannot remove %s: %s", path,
                   strerror(errno));
}

/* Trims whitespace around s in place; returns s's new start. */
static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n')
        s++;
    size_t n = strlen(s);
    while (n > 0 && strchr(" \t\r\n", s[n - 1]))
        s[--n] = '\0';
    return s;
}

static ty_status take_key(char *line, char *key, size_t size, const char *from,
                          ty_err *err)
{
    char *k = trim(line);
    if (!*k)
        return ty_fail(err, TY_EINVAL, NULL, "no API key in %s", from);
    if (strlen(k) >= size || strpbrk(k, " \t"))
        return ty_fail(err, TY_EINVAL, NULL,
                       "%s does not hold one API key (ty_...)", from);
    snprintf(key, size, "%s", k);
    return TY_OK;
}

ty_status cli_read_key_file(const char *path, char *key, size_t size,
                            ty_err *err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return ty_fail(err, TY_EINVAL, NULL, "cannot read the key file %s: %s",
                       path, strerror(errno));
    char line[512] = "";
    if (!fgets(line, sizeof line, f))
        line[0] = '\0';
    fclose(f);
    return take_key(line, key, size, path, err);
}

ty_status cli_read_key_stdin(char *key, size_t size, ty_err *err)
{
    char line[512] = "";
    int tty = isatty(0);
    struct termios old, quiet;
    if (tty) {
        fprintf(stderr, "API key: ");
        fflush(stderr);
        if (tcgetattr(0, &old) == 0) {
            quiet = old;
            quiet.c_lflag &= ~(tcflag_t)ECHO;
            tcsetattr(0, TCSAFLUSH, &quiet);
        } else {
            tty = 0;
        }
    }
    char *got = fgets(line, sizeof line, stdin);
    if (tty) {
        tcsetattr(0, TCSAFLUSH, &old);
        fputc('\n', stderr);
    }
    if (!got)
        line[0] = '\0';
    return take_key(line, key, size, "standard input", err);
}
