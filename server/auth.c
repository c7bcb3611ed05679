/* auth.c - API key generation and checking (see auth.h). */
#include "server/auth.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/fsutil.h"
#include "common/sha256.h"
#include "store/store.h"

#define ID_PART 20
#define SECRET_PART 52
static const char b32[] = "abcdefghijklmnopqrstuvwxyz234567";

static int all_b32(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!s[i] || !strchr(b32, s[i]))
            return 0;
    return 1;
}

ty_status auth_key_generate(char key[AUTH_KEY_LEN + 1], char key_id[TY_ID_MAX],
                            ty_err *err)
{
    unsigned char rnd[ID_PART + SECRET_PART];
    ty_status s = ty_random_bytes(rnd, sizeof rnd, err);
    if (s != TY_OK)
        return s;
    char *p = key;
    memcpy(p, "ty_", 3);
    p += 3;
    for (int i = 0; i < ID_PART; i++)
        *p++ = b32[rnd[i] & 31];
    *p++ = '_';
    for (int i = 0; i < SECRET_PART; i++)
        *p++ = b32[rnd[ID_PART + i] & 31];
    *p = '\0';
    return auth_key_id(key, key_id);
}

ty_status auth_key_id(const char *key, char key_id[TY_ID_MAX])
{
    if (strlen(key) != AUTH_KEY_LEN || strncmp(key, "ty_", 3) != 0 ||
        key[3 + ID_PART] != '_' || !all_b32(key + 3, ID_PART) ||
        !all_b32(key + 4 + ID_PART, SECRET_PART))
        return TY_EINVAL;
    snprintf(key_id, TY_ID_MAX, "key_%.*s", ID_PART, key + 3);
    return TY_OK;
}

void auth_key_hash(const char *key, uint8_t hash[32])
{
    sha256_digest(key, strlen(key), hash);
}

int auth_equal_ct(const uint8_t *a, const uint8_t *b, size_t n)
{
    volatile uint8_t diff = 0;
    for (size_t i = 0; i < n; i++)
        diff |= a[i] ^ b[i];
    return diff == 0;
}

/* ---- the key table ----
 *
 * Every request names its key; asking the store each time cost an SQLite
 * query under the store's one lock. Each thread keeps its own table of the
 * keys it has seen (id -> tenant, admin flag, hash of the whole key), so a
 * lookup shares nothing with other threads but one atomic read of the
 * store's key counter (STORE_GEN_KEYS): a key created or revoked bumps it
 * before the API call returns, and each thread empties its table at its
 * next lookup. A revocation is therefore effective from the next request
 * on. Only keys the store found are kept, so an unknown key always asks
 * the store (the failed-authentication throttle bounds those). */

#define KEY_TABLE_SIZE 64 /* a power of two; emptied when full */

typedef struct {
    store_key who;
    uint8_t hash[32];
    int used;
} key_slot;

typedef struct {
    const store *st; /* the store the slots came from */
    uint64_t gen;
    int count;
    key_slot slot[KEY_TABLE_SIZE];
} key_table;

static __thread key_table *keys_tls;
static pthread_key_t keys_key;
static pthread_once_t keys_once = PTHREAD_ONCE_INIT;

static void key_table_free(void *t) { free(t); }
static void keys_init(void) { pthread_key_create(&keys_key, key_table_free); }

static uint32_t key_hash(const char *s)
{
    return ty_hash(s, strlen(s), TY_HASH_INIT);
}

/* This thread's table, current for st's key counter gen; NULL when out of
 * memory (the store is then asked). */
static key_table *keys_for(store *st, uint64_t gen)
{
    key_table *t = keys_tls;
    if (!t) {
        pthread_once(&keys_once, keys_init);
        t = calloc(1, sizeof *t);
        if (!t || pthread_setspecific(keys_key, t) != 0) {
            free(t);
            return NULL;
        }
        keys_tls = t;
    }
    if (t->st != st || t->gen != gen) {
        memset(t->slot, 0, sizeof t->slot);
        t->count = 0;
        t->st = st;
        t->gen = gen;
    }
    return t;
}

static key_slot *key_find(key_table *t, const char *key_id)
{
    for (uint32_t i = key_hash(key_id), n = 0; n < KEY_TABLE_SIZE; i++, n++) {
        key_slot *k = &t->slot[i & (KEY_TABLE_SIZE - 1)];
        if (!k->used || !strcmp(k->who.key_id, key_id))
            return k;
    }
    return NULL;
}

/* key_id's row: from this thread's table, or from the store (then kept). */
static ty_status key_lookup(store *st, const char *key_id, store_key *who,
                            uint8_t hash[32], ty_err *err)
{
    /* The counter is read before the store: a change that commits after
     * the query bumps it past gen, and the entry kept goes at the next
     * lookup. */
    uint64_t gen = store_gen_get(st, STORE_GEN_KEYS);
    key_table *t = keys_for(st, gen);
    key_slot *k = t ? key_find(t, key_id) : NULL;
    if (k && k->used) {
        *who = k->who;
        memcpy(hash, k->hash, 32);
        return TY_OK;
    }
    ty_status s = store_key_lookup(st, key_id, who, hash, err);
    if (s != TY_OK || !t)
        return s;
    if (t->count >= KEY_TABLE_SIZE / 2) {
        memset(t->slot, 0, sizeof t->slot);
        t->count = 0;
    }
    k = key_find(t, key_id);
    k->who = *who;
    memcpy(k->hash, hash, 32);
    k->used = 1;
    t->count++;
    return TY_OK;
}

ty_status auth_check(store *st, const char *authorization, store_key *who,
                     ty_err *err)
{
    if (!authorization || !*authorization)
        return ty_fail(err, TY_EINVAL, NULL,
                       "this endpoint needs an API key: send the header "
                       "'Authorization: Bearer <key>'");
    if (strncasecmp(authorization, "Bearer ", 7) != 0)
        return ty_fail(err, TY_EINVAL, NULL,
                       "the Authorization header must read 'Bearer <key>'");
    const char *key = authorization + 7;
    while (*key == ' ')
        key++;
    char key_id[TY_ID_MAX];
    if (auth_key_id(key, key_id) != TY_OK)
        return ty_fail(err, TY_ENOTFOUND, NULL,
                       "the API key is malformed (keys look like ty_...)");
    uint8_t want[32], got[32];
    ty_status s = key_lookup(st, key_id, who, want, err);
    if (s == TY_ENOTFOUND)
        return ty_fail(err, TY_ENOTFOUND, NULL,
                       "the API key is unknown or has been revoked");
    if (s != TY_OK)
        return s;
    auth_key_hash(key, got);
    if (!auth_equal_ct(want, got, 32))
        return ty_fail(err, TY_ENOTFOUND, NULL,
                       "the API key is unknown or has been revoked");
    return TY_OK;
}

ty_status auth_bootstrap(store *st, const char *data_dir,
                         char key_out[AUTH_KEY_LEN + 1], int *created,
                         ty_err *err)
{
    *created = 0;
    int64_t n = 0;
    ty_status s = store_key_count(st, &n, err);
    if (s != TY_OK || n > 0)
        return s;
    char key_id[TY_ID_MAX];
    if ((s = auth_key_generate(key_out, key_id, err)) != TY_OK)
        return s;
    /* The file first: if the commit then fails, a restart makes a new key
     * and overwrites the file, and no key is ever live without being saved. */
    char path[PATH_MAX], line[AUTH_KEY_LEN + 2];
    snprintf(path, sizeof path, "%s/admin.key", data_dir);
    snprintf(line, sizeof line, "%s\n", key_out);
    if ((s = fs_write_atomic(path, line, strlen(line), 0600, err)) != TY_OK)
        return s;
    store_admin_key_result r;
    if ((s = auth_bootstrap_given(st, key_out, &r, err)) != TY_OK)
        return s;
    *created = 1;
    return TY_OK;
}

ty_status auth_key_given(const char *file, const char *env_value,
                         char key[AUTH_KEY_LEN + 1], ty_err *err)
{
    int have_file = file && *file, have_env = env_value && *env_value;
    if (!have_file && !have_env)
        return TY_ENOTFOUND;
    if (have_file && have_env)
        return ty_fail(err, TY_EINVAL, "--admin-key-file",
                       "the admin key is given twice, by --admin-key-file and "
                       "by TRAINYARD_ADMIN_KEY: give it one way");
    const char *from = have_file ? "--admin-key-file" : "TRAINYARD_ADMIN_KEY";
    char *text = NULL;
    size_t len = 0;
    if (have_file) {
        ty_status s = fs_read_all(file, 4096, &text, &len, err);
        if (s != TY_OK) {
            char why[sizeof err->msg];
            snprintf(why, sizeof why, "%s", err->msg);
            /* Never TY_ENOTFOUND: that would read as "no key given". */
            return ty_fail(err, TY_EINVAL, from, "--admin-key-file %s: %s",
                           file, why);
        }
    } else {
        text = strdup(env_value);
        len = strlen(text);
    }
    const char *p = text;
    while (len > 0 && strchr(" \t\r\n", p[len - 1]))
        len--;
    while (len > 0 && strchr(" \t\r\n", *p))
        p++, len--;
    char key_id[TY_ID_MAX];
    ty_status s = TY_OK;
    if (len != AUTH_KEY_LEN) {
        s = TY_EINVAL;
    } else {
        memcpy(key, p, AUTH_KEY_LEN);
        key[AUTH_KEY_LEN] = '\0';
        s = auth_key_id(key, key_id);
    }
    free(text);
    if (s != TY_OK) {
        memset(key, 0, AUTH_KEY_LEN + 1);
        return ty_fail(err, TY_EINVAL, from,
                       "%s: not a trainyard key (keys read ty_ followed by 20 "
                       "and 52 characters of a-z and 2-7, as `trainyard "
                       "keygen` prints)",
                       from);
    }
    return TY_OK;
}

ty_status auth_bootstrap_given(store *st, const char *key,
                               store_admin_key_result *result, ty_err *err)
{
    char key_id[TY_ID_MAX], tenant_id[TY_ID_MAX];
    if (auth_key_id(key, key_id) != TY_OK)
        return ty_fail(err, TY_EINVAL, NULL, "the admin key is malformed");
    ty_status s = ty_id_new("tn_", tenant_id, err);
    if (s != TY_OK)
        return s;
    uint8_t hash[32];
    auth_key_hash(key, hash);
    return store_admin_key_ensure(st, tenant_id, key_id, hash, result, err);
}
