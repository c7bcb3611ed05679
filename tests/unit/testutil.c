/* testutil.c - the helpers of testutil.h, linked into every unit test.
 *
 * Scratch folders are made under /tmp (not $TMPDIR: the tests' path
 * buffers are sized for it) and named after the test binary, so a folder
 * left behind says which suite left it. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/fsutil.h"
#include "common/rng.h"
#include "models/nn.h"
#include "models/safetensors.h"
#include "models/train/train.h"
#include "testutil.h"

char tu_tmpdir[256];

int tu_tmpdir_make(char *dir, size_t size)
{
    int n =
        snprintf(dir, size, "/tmp/%.64s_XXXXXX", program_invocation_short_name);
    if (n < 0 || (size_t)n >= size) {
        fprintf(stderr,
                "testutil: a buffer of %zu bytes is too short for a "
                "scratch folder's path\n",
                size);
        if (size)
            dir[0] = '\0';
        return -1;
    }
    if (!mkdtemp(dir)) {
        fprintf(stderr, "testutil: cannot make %s: %s\n", dir, strerror(errno));
        dir[0] = '\0';
        return -1;
    }
    return 0;
}

int tu_tmpdir_remove(const char *dir)
{
    ty_err err;
    if (fs_remove_tree(dir, &err) != TY_OK) {
        fprintf(stderr, "testutil: cannot remove %s: %s\n", dir, err.msg);
        return -1;
    }
    return 0;
}

int tu_tmpdir_setup(void **state)
{
    (void)state;
    return tu_tmpdir_make(tu_tmpdir, sizeof tu_tmpdir);
}

int tu_tmpdir_teardown(void **state)
{
    (void)state;
    int rc = tu_tmpdir_remove(tu_tmpdir);
    tu_tmpdir[0] = '\0';
    return rc;
}

int tu_store_setup(void **state, const char *tenant_id, const char *key_id,
                   const uint8_t key_hash[32])
{
    tu_store_fixture *f = calloc(1, sizeof *f);
    if (!f || tu_tmpdir_make(f->dir, sizeof f->dir) != 0) {
        free(f);
        return -1;
    }
    ty_err err;
    store_admin_key_result made;
    if (store_open(f->dir, &f->st, &err) != TY_OK ||
        store_admin_key_ensure(f->st, tenant_id, key_id, key_hash, &made,
                               &err) != TY_OK) {
        fprintf(stderr, "testutil: store in %s: %s\n", f->dir, err.msg);
        store_close(f->st);
        tu_tmpdir_remove(f->dir);
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

int tu_store_teardown(void **state)
{
    tu_store_fixture *f = *state;
    store_close(f->st);
    int rc = tu_tmpdir_remove(f->dir);
    free(f);
    *state = NULL;
    return rc;
}

/* The source tree's root, from the build (tests/CMakeLists.txt). */
#ifndef TY_SOURCE_DIR
#error "TY_SOURCE_DIR (the source tree's root) must be defined"
#endif

void tu_source_path(char *out, size_t n, const char *rel)
{
    snprintf(out, n, "%s/%s", TY_SOURCE_DIR, rel);
}

void tu_fill_uniform(float *x, size_t n, uint64_t seed, uint64_t stream,
                     float scale)
{
    ty_rng r;
    ty_rng_seed(&r, seed, stream);
    for (size_t i = 0; i < n; i++)
        x[i] = (2.0f * ty_rng_uniform(&r) - 1.0f) * scale;
}

void tu_assert_grad_close(double analytic, double numeric, double abs_tol,
                          const char *what, size_t i)
{
    double diff = fabs(analytic - numeric);
    double scale = fmax(fabs(analytic), fabs(numeric));
    if (diff > 1e-2 * scale + abs_tol)
        fail_msg("%s[%zu]: analytic %.7g vs numeric %.7g", what, i, analytic,
                 numeric);
}

void tu_assert_tensors_equal(const char *a, const char *b)
{
    st_file fa, fb;
    assert_int_equal(st_open(a, &fa, NULL), TY_OK);
    assert_int_equal(st_open(b, &fb, NULL), TY_OK);
    assert_int_equal(fa.count, fb.count);
    for (size_t i = 0; i < fa.count; i++) {
        const st_tensor *t = st_find(&fb, fa.tensors[i].name);
        assert_non_null(t);
        assert_int_equal(t->nbytes, fa.tensors[i].nbytes);
        assert_memory_equal(t->data, fa.tensors[i].data, t->nbytes);
    }
    st_close(&fa);
    st_close(&fb);
}

void tu_expect_spec_error(const char *spec_text, const uint32_t *shape,
                          uint32_t ndim, uint32_t outputs, ty_task task,
                          const char *field, const char *msg_part)
{
    json_t *spec = json_loads(spec_text, 0, NULL);
    assert_non_null(spec);
    ty_err err = {0};
    json_t *norm = NULL;
    ty_status st =
        nn_spec_validate(spec, shape, ndim, outputs, task, &norm, NULL, &err);
    json_decref(spec);
    if (st != TY_EINVAL)
        fail_msg("expected an error at %s for %s", field, spec_text);
    assert_null(norm);
    if (strcmp(err.field, field))
        fail_msg("field '%s', expected '%s' (%s)", err.field, field, err.msg);
    if (!strstr(err.msg, msg_part))
        fail_msg("message '%s' lacks '%s'", err.msg, msg_part);
}

void tu_expect_hparams_error(const char *text, const char *field)
{
    json_t *j = json_loads(text, 0, NULL);
    assert_non_null(j);
    train_hparams hp;
    ty_err err;
    assert_int_equal(train_hparams_parse(j, &hp, NULL, &err), TY_EINVAL);
    assert_string_equal(err.field, field);
    json_decref(j);
}
