/* testutil.h - helpers shared by the unit tests (tests/unit/test_*.c),
 * compiled once into the ty_testutil library that every unit test links.
 *
 * What lives here is what two or more tests would otherwise each write
 * again: a scratch folder per suite or per test (made unique, removed with
 * everything in it afterwards), a store opened in one with an admin key,
 * the path of a file in the source tree, uniform random fill, and assertions that more than one suite makes
 * (gradients against central differences, two model files holding the same
 * tensors, a spec or hyperparameter error naming its field). Helpers that fail a
 * test do so through CMocka (assert_*, fail_msg) and must only be called
 * from inside one. The fakes and generators that keep state per test
 * binary (fake_device.h, fake_graph.h, synth_data.h, nn_fd.h) stay
 * header-only; where they repeated code a test also had, they call these. */
#ifndef TY_TEST_TESTUTIL_H
#define TY_TEST_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

#include "models/data/dataset.h"
#include "store/store.h"

/* ---- scratch folders ---- */

/* The scratch folder of the running suite (or test): set by
 * tu_tmpdir_setup, "" before it and after tu_tmpdir_teardown. */
extern char tu_tmpdir[256];

/* Makes a new, empty, private folder /tmp/<test binary>_XXXXXX and writes
 * its path into dir (size bytes). 0, or -1 (with why on stderr; dir then
 * holds nothing to remove). */
int tu_tmpdir_make(char *dir, size_t size);

/* Removes dir and everything in it; a missing folder is fine. 0, or -1
 * with why on stderr. */
int tu_tmpdir_remove(const char *dir);

/* CMocka setup and teardown (group or per test) that make tu_tmpdir and
 * remove it with everything in it, also after a failed test. A teardown
 * that cannot remove it fails, so a test that leaves what cannot be
 * removed is seen. */
int tu_tmpdir_setup(void **state);
int tu_tmpdir_teardown(void **state);

/* ---- a store in a scratch folder ---- */

/* A store opened in a folder of its own; *state of the tests that use it. */
typedef struct {
    char dir[256];
    store *st;
} tu_store_fixture;

/* Makes a scratch folder, opens a store there and makes key_id (hash
 * key_hash) its admin key in a new tenant tenant_id, then sets *state to
 * the fixture (malloc'd). Meant to be called by a suite's setup. 0, or -1
 * with nothing left behind. */
int tu_store_setup(void **state, const char *tenant_id, const char *key_id,
                   const uint8_t key_hash[32]);

/* CMocka teardown for tu_store_setup: closes the store, removes its folder
 * and frees the fixture. */
int tu_store_teardown(void **state);

/* ---- files of the source tree ---- */

/* Writes the path of rel (say "gpu/sim/h100-mixed.json") in the source tree
 * the test was built from into out (n bytes), so a test finds the files it
 * reads from any working folder. */
void tu_source_path(char *out, size_t n, const char *rel);

/* ---- data ---- */

/* x[0..n) uniform in [-scale, scale), drawn from the RNG seeded with
 * (seed, stream): the same numbers for the same three on every machine. */
void tu_fill_uniform(float *x, size_t n, uint64_t seed, uint64_t stream,
                     float scale);

/* ---- assertions ---- */

/* Fails the test unless an analytic gradient is within 1% of the numeric
 * (central difference) one plus abs_tol; the message names what[i]. */
void tu_assert_grad_close(double analytic, double numeric, double abs_tol,
                          const char *what, size_t i);

/* Fails the test unless the safetensors files a and b hold the same
 * tensors (names, sizes and bytes); their metadata may differ (checkpoints record
 * wall-clock timings). */
void tu_assert_tensors_equal(const char *a, const char *b);

/* Fails the test unless nn_spec_validate rejects the spec (JSON text) for
 * input shape[ndim], outputs and task with TY_EINVAL, no normalized spec,
 * the error at field and a message containing msg_part. */
void tu_expect_spec_error(const char *spec_text, const uint32_t *shape,
                          uint32_t ndim, uint32_t outputs, ty_task task,
                          const char *field, const char *msg_part);

/* Fails the test unless train_hparams_parse rejects the JSON text with
 * TY_EINVAL naming field. */
void tu_expect_hparams_error(const char *text, const char *field);

#endif
