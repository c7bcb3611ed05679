/* router.c - segment-wise route matching (see router.h). */
#include "server/router.h"

#include <stdio.h>
#include <string.h>

static const char *const method_names[] = {
    [HTTP_GET] = "GET",         [HTTP_HEAD] = "HEAD",
    [HTTP_POST] = "POST",       [HTTP_PUT] = "PUT",
    [HTTP_PATCH] = "PATCH",     [HTTP_DELETE] = "DELETE",
    [HTTP_OPTIONS] = "OPTIONS", [HTTP_OTHER] = "OTHER",
};
_Static_assert(sizeof method_names / sizeof method_names[0] ==
                   HTTP_METHOD_COUNT,
               "every method needs a name");

http_method http_method_parse(const char *s)
{
    for (int m = 0; m < HTTP_OTHER; m++)
        if (strcmp(s, method_names[m]) == 0)
            return (http_method)m;
    return HTTP_OTHER;
}

const char *http_method_name(http_method m)
{
    return (unsigned)m < HTTP_METHOD_COUNT ? method_names[m] : "OTHER";
}

/* Matches one pattern against path, filling params; 1 on a match. */
static int match_pattern(const char *pattern, const char *path,
                         route_match *out)
{
    const char *p = pattern, *s = path;
    int np = 0;
    size_t plen = strlen(path);
    if (plen > 1 && path[plen - 1] == '/')
        plen--;
    const char *end = path + plen;
    while (*p && s < end) {
        if (*p == '{') {
            const char *close = strchr(p, '}');
            if (!close || np >= ROUTE_MAX_PARAMS)
                return 0;
            const char *seg_end = memchr(s, '/', (size_t)(end - s));
            if (!seg_end)
                seg_end = end;
            size_t len = (size_t)(seg_end - s);
            if (len == 0 || len >= ROUTE_MAX_PARAM_LEN)
                return 0;
            if (out) {
                memcpy(out->params[np], s, len);
                out->params[np][len] = '\0';
            }
            np++;
            s = seg_end;
            p = close + 1;
            continue;
        }
        if (*p != *s)
            return 0;
        p++;
        s++;
    }
    if (*p || s != end)
        return 0;
    if (out)
        out->nparams = np;
    return 1;
}

route_result router_match(const route *table, size_t n, http_method method,
                          const char *path, route_match *out, char *allow,
                          size_t allow_len)
{
    http_method want = method == HTTP_HEAD ? HTTP_GET : method;
    int path_seen = 0;
    unsigned allowed = 0;
    for (size_t i = 0; i < n; i++) {
        if (!match_pattern(table[i].pattern, path, NULL))
            continue;
        path_seen = 1;
        allowed |= 1u << table[i].method;
        if (table[i].method == want) {
            if (out) {
                memset(out, 0, sizeof *out);
                out->route = &table[i];
                match_pattern(table[i].pattern, path, out);
            }
            return ROUTE_FOUND;
        }
    }
    if (!path_seen)
        return ROUTE_NOT_FOUND;
    if (allow && allow_len) {
        allow[0] = '\0';
        size_t used = 0;
        if (allowed & (1u << HTTP_GET))
            allowed |= 1u << HTTP_HEAD;
        for (int m = 0; m < HTTP_OTHER; m++) {
            if (!(allowed & (1u << m)))
                continue;
            int w = snprintf(allow + used, allow_len - used, "%s%s",
                             used ? ", " : "", method_names[m]);
            if (w < 0 || (size_t)w >= allow_len - used)
                break;
            used += (size_t)w;
        }
    }
    return ROUTE_METHOD_NOT_ALLOWED;
}
