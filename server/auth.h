/*
 * auth.h - API keys.
 *
 * A key reads "ty_<20 id chars>_<52 secret chars>" (base32). The id part names
 * the key's row ("key_<id>"); only the SHA-256 of the whole key is stored, and
 * the presented key's hash is compared with it in constant time, so neither
 * the database nor response timing reveals a usable key. Keys never appear in
 * logs.
 */
#ifndef TY_AUTH_H
#define TY_AUTH_H

#include <stdint.h>

#include "common/ty.h"
#include "store/store.h"

#define AUTH_KEY_LEN 76 /* "ty_" + 20 + "_" + 52 */

/* Makes a new random key (AUTH_KEY_LEN + 1 bytes) and its row id. */
ty_status auth_key_generate(char key[AUTH_KEY_LEN + 1], char key_id[TY_ID_MAX],
                            ty_err *err);

/* The row id of a key string ("key_" + its id part); TY_EINVAL if the string
 * is not shaped like a key. */
ty_status auth_key_id(const char *key, char key_id[TY_ID_MAX]);

/* SHA-256 of the key. */
void auth_key_hash(const char *key, uint8_t hash[32]);

/* 1 if a and b are equal; the time taken does not depend on where they
 * differ. */
int auth_equal_ct(const uint8_t *a, const uint8_t *b, size_t n);

/* Checks an Authorization header value ("Bearer <key>"). On success fills
 * *who. TY_EINVAL for a missing or malformed header, TY_ENOTFOUND for an
 * unknown, revoked or wrong key (err says which, without echoing the key),
 * TY_EIO for a store failure. Keys found are remembered per thread until
 * the store's keys change (STORE_GEN_KEYS), so a known key costs no store
 * query and a revocation holds from the next request. */
ty_status auth_check(store *st, const char *authorization, store_key *who,
                     ty_err *err);

/* First start: if the store has no keys, creates the "admin" tenant and an
 * admin key, writes the key to <data_dir>/admin.key (mode 0600) and copies
 * it into key_out (*created = 1). Otherwise *created = 0. */
ty_status auth_bootstrap(store *st, const char *data_dir,
                         char key_out[AUTH_KEY_LEN + 1], int *created,
                         ty_err *err);

/* An admin key given to the server rather than generated: read from file
 * (--admin-key-file; surrounding whitespace ignored) or, when file is NULL
 * or empty, taken from env_value (TRAINYARD_ADMIN_KEY). TY_ENOTFOUND when
 * neither is given; TY_EINVAL, naming the source, when both are or when the
 * key is not shaped like a trainyard key (`trainyard keygen` makes one). */
ty_status auth_key_given(const char *file, const char *env_value,
                         char key[AUTH_KEY_LEN + 1], ty_err *err);

/* Makes a given key an admin key (store_admin_key_ensure): on an empty store
 * it is the first admin key; later an unknown key joins the admin tenant and
 * a key revoked through the API stays revoked. Nothing is written to
 * admin.key. */
ty_status auth_bootstrap_given(store *st, const char *key,
                               store_admin_key_result *result, ty_err *err);

#endif
