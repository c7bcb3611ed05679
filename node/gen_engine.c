/*
 * gen_engine.c - continuous batching for text generation (Orca's
 * iteration-level scheduling over vLLM's paged cache): one engine per
 * model in use, a thread that steps every running sequence of every
 * request together.
 *
 * Each step runs one decode row for every sequence past its prompt, then
 * fills the step's remaining rows (GEN_STEP_ROWS) with chunks of waiting
 * prompts (chunked prefill: a long prompt takes several steps and never
 * stalls the running sequences for more than a step's rows). A request
 * joins at the next step when the cache has blocks for its prompt and its
 * max_tokens (reserved whole at admission, so a running sequence never
 * waits for memory and nothing is ever preempted); otherwise it waits, in
 * order, behind the first that does not fit (at most GEN_MAX_WAITING wait;
 * past that, TY_EUNAVAILABLE). A finished sequence leaves at once and its
 * blocks return to the pool. A prompt's first full blocks come from the
 * decoder's prefix cache when an earlier prompt began the same (its
 * rows start after them), and a prompt's full blocks are published to
 * it once computed. The decoder computes every row apart from the
 * others (models/nn_decode.h), so a sequence writes the same tokens
 * whichever others share its steps.
 *
 * The cache (the decoder) outlives the engine's requests, as vLLM's does:
 * when the last sequence ends its blocks are free, but those whose
 * prompt tokens are indexed stay cached (counted free, evicted the one
 * unused longest first when a sequence needs a block and no never-indexed
 * one is left), so the same system prompt a second later still hits. It
 * borrows the model's network, which stays loaded while a request holds
 * it (serve_model) and may go once none does: whoever frees a network
 * calls gen_engine_forget first (serve/modelcache.c, the replica), which
 * frees the idle cache. So that idle caches do not hold every model's
 * memory at once, an engine about to make its cache frees the idle
 * caches of the others. The engine itself (a few words and its cache's
 * handle, keyed by the network) stays for the process's life; its
 * thread runs only while it has work.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/opmetrics.h"
#include "node/gen_engine.h"
#include "node/placement.h"

#define GEN_BLOCK_TOKENS 16u
#define GEN_STEP_ROWS 64u   /* rows a step: decode rows, then prefill */
#define GEN_MAX_RUNNING 48u /* sequences in the cache at once */
#define GEN_MAX_WAITING 256u
#define GEN_MAX_THREADS 16 /* a CPU step's threads, at most */

/* The engine thread's state, kept in its engine between runs: the cache
 * (and its prefix index) outlives the thread while the model stays
 * loaded. */
typedef struct {
    struct gen_engine *e;
    nn_decoder *d;
    nn_pool *pool; /* the step's threads on the CPU, or NULL */
    /* the cache's blocks, as last reported: the pool, those sequences
     * hold, those no sequence holds whose tokens are indexed */
    uint32_t kv_total, kv_used, kv_cached;
    uint32_t vocab;
    float *logits;     /* GEN_STEP_ROWS rows */
    uint32_t *scratch; /* the sampler's */
    nn_decode_row rows[GEN_STEP_ROWS];
    gen_seq *row_of[GEN_STEP_ROWS];
    gen_seq *run[GEN_MAX_RUNNING];
    uint32_t n_run;
    gen_seq *done;      /* finished this step, to let go */
    int static_batches; /* read with the environment when the cache is made */
} eng_work;

typedef struct gen_engine {
    const nn_net *net; /* the key */
    pthread_mutex_t mu;
    pthread_cond_t idle_cv; /* thread_on went 0 */
    gen_seq *wait_head, *wait_tail;
    uint32_t n_wait;
    int thread_on;
    eng_work w; /* the thread's, while thread_on; else under mu */
    struct gen_engine *link;
} gen_engine;

static pthread_mutex_t engines_mu = PTHREAD_MUTEX_INITIALIZER;
static gen_engine *engines;

/* Every engine's together (gen_engine_totals_get), counted beside the
 * metrics. */
static struct {
    _Atomic long running, waiting, kv_used, kv_total, kv_cached;
    _Atomic uint64_t prompt, generated, prefix_hit;
} totals;

static void count_sequences(int delta)
{
    opm_gen_sequence(delta);
    atomic_fetch_add(&totals.running, delta);
}

static void count_waiting(int delta)
{
    opm_gen_waiting(delta);
    atomic_fetch_add(&totals.waiting, delta);
}

static void count_kv(long used_delta, long total_delta, long cached_delta)
{
    opm_gen_kv_blocks(used_delta, total_delta);
    if (cached_delta)
        opm_gen_kv_cached(cached_delta);
    atomic_fetch_add(&totals.kv_used, used_delta);
    atomic_fetch_add(&totals.kv_total, total_delta);
    atomic_fetch_add(&totals.kv_cached, cached_delta);
}

static void count_prompt(const char *tenant, unsigned tokens)
{
    opm_gen_prompt(tenant, tokens);
    atomic_fetch_add(&totals.prompt, tokens);
}

void gen_engine_totals_get(gen_engine_totals *t)
{
    *t = (gen_engine_totals){
        .running = atomic_load(&totals.running),
        .waiting = atomic_load(&totals.waiting),
        .kv_used = atomic_load(&totals.kv_used),
        .kv_total = atomic_load(&totals.kv_total),
        .kv_cached = atomic_load(&totals.kv_cached),
        .prompt_tokens = atomic_load(&totals.prompt),
        .generated_tokens = atomic_load(&totals.generated),
        .prefix_hit_tokens = atomic_load(&totals.prefix_hit),
    };
}

/* The process's policy (gen_engine_set_kv_budget). */
static pthread_mutex_t budget_mu = PTHREAD_MUTEX_INITIALIZER;
static gen_kv_budget budget = {.bytes = GEN_KV_DEFAULT_BYTES};

void gen_engine_set_kv_budget(const gen_kv_budget *b)
{
    pthread_mutex_lock(&budget_mu);
    budget = *b;
    if (!(budget.device_share > 0 && budget.device_share <= 1))
        budget.device_share = 0;
    pthread_mutex_unlock(&budget_mu);
}

uint32_t gen_kv_blocks(const gen_kv_budget *b, uint64_t free_bytes,
                       uint64_t per, uint64_t steps, uint32_t least)
{
    uint64_t bytes = b->bytes;
    if (b->device_share > 0 && free_bytes != UINT64_MAX) {
        const double want = b->device_share * (double)free_bytes;
        bytes = want > (double)steps ? (uint64_t)(want - (double)steps) : 0;
    }
    uint64_t n = bytes / (per ? per : 1);
    if (n < least)
        n = least;
    return n > GEN_KV_MAX_BLOCKS ? GEN_KV_MAX_BLOCKS : (uint32_t)n;
}

/* The blocks the process's policy buys for net's cache. */
static uint32_t pool_blocks(const nn_net *net, uint32_t context)
{
    pthread_mutex_lock(&budget_mu);
    const gen_kv_budget b = budget;
    pthread_mutex_unlock(&budget_mu);
    const uint64_t one = nn_decoder_bytes(net, 1, 1, GEN_BLOCK_TOKENS);
    const uint64_t two = nn_decoder_bytes(net, 1, 2, GEN_BLOCK_TOKENS);
    const uint64_t per = two > one ? two - one : 1;
    const uint64_t rows =
        nn_decoder_bytes(net, GEN_STEP_ROWS, 1, GEN_BLOCK_TOKENS);
    uint64_t free_b = UINT64_MAX, total_b = 0;
    if (b.device_share > 0) {
        ty_err err = {0};
        if (place_cuda_memory(b.device, &free_b, &total_b, &err) != TY_OK) {
            log_msg("warn",
                    "generation: the key/value cache takes %llu bytes: %s",
                    (unsigned long long)b.bytes, err.msg);
            free_b = UINT64_MAX;
        }
    }
    return gen_kv_blocks(&b, free_b, per, rows > per ? rows - per : 0,
                         (context + GEN_BLOCK_TOKENS - 1) / GEN_BLOCK_TOKENS);
}

/* Static batching, for comparison (bench/serve/generate.py): with
 * TRAINYARD_GENERATE_STATIC=1 in the server's environment a batch is
 * admitted only when the last one has finished, as a server without
 * iteration-level scheduling batches. */
static int static_batches(void)
{
    const char *v = getenv("TRAINYARD_GENERATE_STATIC");
    return v && !strcmp(v, "1");
}

static ty_status make_decoder(eng_work *w, const gen_seq *g, ty_err *err)
{
    w->vocab = g->vocab;
    w->static_batches = static_batches();
    w->logits = malloc((size_t)GEN_STEP_ROWS * g->vocab * sizeof *w->logits);
    w->scratch = malloc((size_t)g->vocab * sizeof *w->scratch);
    if (!w->logits || !w->scratch)
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    const uint32_t blocks = pool_blocks(g->net, g->context);
    ty_status s = nn_decoder_create(g->net, GEN_STEP_ROWS, blocks,
                                    GEN_BLOCK_TOKENS, &w->d, err);
    if (s != TY_OK)
        return s;
    w->kv_total = blocks;
    count_kv(0, blocks, 0);
    /* On the CPU a step of many rows is worth the machine's cores, as a
     * training step is; without a pool it runs on this thread. */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores > GEN_MAX_THREADS)
        cores = GEN_MAX_THREADS;
    if (cores > 1 && (w->pool = nn_pool_create((int)cores)) &&
        !nn_decoder_set_pool(w->d, w->pool)) {
        nn_pool_destroy(w->pool);
        w->pool = NULL;
    }
    return TY_OK;
}

/* The blocks sequences hold now, and those cached, into the metrics. */
static void report_kv(eng_work *w)
{
    const uint32_t used = w->d ? w->kv_total - nn_decoder_free_blocks(w->d) : 0;
    const uint32_t cached = w->d ? nn_decoder_cached_blocks(w->d) : 0;
    if (used != w->kv_used || cached != w->kv_cached)
        count_kv((long)used - (long)w->kv_used, 0,
                 (long)cached - (long)w->kv_cached);
    w->kv_used = used;
    w->kv_cached = cached;
}

static void free_decoder(eng_work *w)
{
    if (w->d) {
        count_kv(-(long)w->kv_used, -(long)w->kv_total, -(long)w->kv_cached);
        w->kv_used = w->kv_total = w->kv_cached = 0;
    }
    nn_decoder_free(w->d);
    w->d = NULL;
    if (w->pool)
        nn_pool_destroy(w->pool);
    w->pool = NULL;
    free(w->logits);
    free(w->scratch);
    w->logits = NULL;
    w->scratch = NULL;
}

/* g is finished (with s): out of the cache, onto the list to let go. */
static void retire(eng_work *w, gen_seq *g, ty_status s, const ty_err *err)
{
    if (w->d)
        nn_kv_seq_release(w->d, &g->kv);
    g->status = s;
    if (s != TY_OK && err)
        g->err = *err;
    g->link = w->done;
    w->done = g;
}

/* Admits waiting requests while the cache has room (e->mu held). */
static void admit(eng_work *w)
{
    gen_engine *e = w->e;
    if (w->n_run && w->static_batches)
        return;
    while (e->wait_head && w->n_run < GEN_MAX_RUNNING) {
        gen_seq *g = e->wait_head;
        ty_err err = {0};
        ty_status s = TY_OK;
        if (!w->d && (s = make_decoder(w, g, &err)) != TY_OK)
            free_decoder(w);
        uint32_t cached = 0;
        if (s == TY_OK &&
            (s = nn_kv_seq_reserve_prefix(w->d, &g->kv, g->ids, g->n,
                                          (uint32_t)g->n + g->max_tokens,
                                          &cached, &err)) == TY_ELIMIT) {
            if (w->n_run)
                return; /* it waits for blocks */
            /* nothing running and still no room: it can never fit */
            s = ty_fail(&err, TY_EUNAVAILABLE, NULL,
                        "the request does not fit the generation cache");
        }
        e->wait_head = g->link;
        if (!e->wait_head)
            e->wait_tail = NULL;
        e->n_wait--;
        count_waiting(-1);
        g->link = NULL;
        if (s != TY_OK) {
            retire(w, g, s, &err);
            continue;
        }
        /* the prompt's first blocks may be in the cache already: its
         * rows start after them */
        g->fed = cached;
        opm_gen_prefix_cache(cached, g->n - cached);
        atomic_fetch_add(&totals.prefix_hit, cached);
        w->run[w->n_run++] = g;
        count_sequences(1);
    }
}

/* One step over every running sequence: their rows, the decoder, then a
 * token for each sequence whose prompt is in (its last row's logits). */
static void step(eng_work *w)
{
    uint32_t nr = 0, n_pub = 0;
    gen_seq *pub[GEN_STEP_ROWS]; /* prompts that end this step */
    for (uint32_t i = 0; i < w->n_run; i++) {
        gen_seq *g = w->run[i];
        if (g->fed < g->n)
            continue;
        w->rows[nr] = (nn_decode_row){&g->kv, g->last_token, g->kv.len};
        w->row_of[nr++] = g;
    }
    for (uint32_t i = 0; i < w->n_run && nr < GEN_STEP_ROWS; i++) {
        gen_seq *g = w->run[i];
        while (g->fed < g->n && nr < GEN_STEP_ROWS) {
            w->rows[nr] = (nn_decode_row){&g->kv, g->ids[g->fed], g->fed};
            w->row_of[nr++] = g;
            g->fed++;
            if (g->fed == g->n) {
                count_prompt(g->tenant, (unsigned)g->n);
                pub[n_pub++] = g;
            }
        }
    }
    unsigned seqs = 0;
    for (uint32_t r = 0; r < nr; r++)
        seqs += r + 1 == nr || w->row_of[r + 1] != w->row_of[r];
    opm_gen_step(seqs);
    ty_err err = {0};
    ty_status s = nn_decoder_step(w->d, w->rows, nr, w->logits, &err);
    /* prompts now whole in the cache: their full blocks for later
     * prompts that begin the same */
    for (uint32_t i = 0; s == TY_OK && i < n_pub; i++)
        nn_kv_seq_publish(w->d, &pub[i]->kv, pub[i]->ids, pub[i]->n);
    for (uint32_t r = 0; r < nr; r++) {
        gen_seq *g = w->row_of[r];
        const int last = r + 1 == nr || w->row_of[r + 1] != g;
        int finished = s != TY_OK;
        ty_status gs = s;
        ty_err gerr = err;
        if (s == TY_OK && last && g->fed == g->n) {
            gs = g->next(g, w->logits + (size_t)r * w->vocab, w->scratch,
                         &g->last_token, &finished, &gerr);
            if (gs == TY_OK)
                atomic_fetch_add(&totals.generated, 1);
        }
        if (gs != TY_OK)
            finished = 1;
        if (!last || !finished)
            continue;
        if (gs == TY_OK)
            gs = g->end(g, &gerr);
        /* out of run[], keeping the rest in admission order: prompts are
         * fed oldest first, so a later one never overtakes an earlier */
        for (uint32_t i = 0; i < w->n_run; i++)
            if (w->run[i] == g) {
                memmove(w->run + i, w->run + i + 1,
                        (w->n_run - i - 1) * sizeof *w->run);
                w->n_run--;
                break;
            }
        count_sequences(-1);
        retire(w, g, gs, &gerr);
    }
}

/* Lets the finished requests go (e->mu held). */
static void let_go(eng_work *w)
{
    while (w->done) {
        gen_seq *g = w->done;
        w->done = g->link;
        g->link = NULL;
        g->done = 1;
        pthread_cond_signal(&g->done_cv);
    }
}

static void *engine_main(void *arg)
{
    gen_engine *e = arg;
    eng_work *w = &e->w;
    pthread_mutex_lock(&e->mu);
    w->e = e;
    for (;;) {
        admit(w);
        if (!w->n_run && !e->wait_head) {
            /* idle: the cache stays, its blocks free but still indexed,
             * so a prompt after the gap finds its prefix (vLLM's
             * automatic prefix caching); gen_engine_forget frees it
             * before the model goes */
            report_kv(w);
            let_go(w);
            e->thread_on = 0;
            pthread_cond_broadcast(&e->idle_cv);
            pthread_mutex_unlock(&e->mu);
            return NULL;
        }
        let_go(w);
        report_kv(w);
        if (!w->n_run)
            continue;
        pthread_mutex_unlock(&e->mu);
        step(w);
        report_kv(w);
        pthread_mutex_lock(&e->mu);
    }
}

static gen_engine *engine_of(const nn_net *net)
{
    for (gen_engine *e = engines; e; e = e->link)
        if (e->net == net)
            return e;
    gen_engine *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->net = net;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->idle_cv, NULL);
    e->link = engines;
    engines = e;
    return e;
}

/* Frees e's cache if its thread is off (e->mu held). */
static void drop_idle_cache(gen_engine *e)
{
    if (!e->thread_on && e->w.d)
        free_decoder(&e->w);
}

ty_status gen_engine_submit(gen_seq *g, ty_err *err)
{
    pthread_mutex_lock(&engines_mu);
    gen_engine *e = engine_of(g->net);
    if (!e) {
        pthread_mutex_unlock(&engines_mu);
        return ty_fail(err, TY_ENOMEM, NULL, "out of memory");
    }
    /* An engine about to make its cache first frees the idle caches of
     * the others: a cache outlives its requests for the prefixes it
     * holds, not to hold every model's memory at once. */
    pthread_mutex_lock(&e->mu);
    const int cold = !e->w.d;
    pthread_mutex_unlock(&e->mu);
    for (gen_engine *o = engines; cold && o; o = o->link)
        if (o != e) {
            pthread_mutex_lock(&o->mu);
            drop_idle_cache(o);
            pthread_mutex_unlock(&o->mu);
        }
    pthread_mutex_lock(&e->mu);
    pthread_mutex_unlock(&engines_mu);
    if (e->n_wait >= GEN_MAX_WAITING) {
        pthread_mutex_unlock(&e->mu);
        return ty_fail(err, TY_EUNAVAILABLE, NULL,
                       "%u generation requests are waiting for this model; "
                       "try again soon",
                       e->n_wait);
    }
    pthread_cond_init(&g->done_cv, NULL);
    g->engine = e;
    g->done = 0;
    g->link = NULL;
    if (e->wait_tail)
        e->wait_tail->link = g;
    else
        e->wait_head = g;
    e->wait_tail = g;
    e->n_wait++;
    count_waiting(1);
    if (!e->thread_on) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &attr, engine_main, e) == 0) {
            e->thread_on = 1;
        } else {
            /* take it back out: with no thread, the queue was empty (a
             * thread leaves only when nothing waits) */
            e->wait_head = e->wait_tail = NULL;
            e->n_wait--;
            count_waiting(-1);
            pthread_attr_destroy(&attr);
            pthread_mutex_unlock(&e->mu);
            pthread_cond_destroy(&g->done_cv);
            return ty_fail(err, TY_ENOMEM, NULL, "no thread to generate");
        }
        pthread_attr_destroy(&attr);
    }
    pthread_mutex_unlock(&e->mu);
    return TY_OK;
}

ty_status gen_engine_wait(gen_seq *g, ty_err *err)
{
    gen_engine *e = g->engine;
    pthread_mutex_lock(&e->mu);
    while (!g->done)
        pthread_cond_wait(&g->done_cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
    pthread_cond_destroy(&g->done_cv);
    if (g->status != TY_OK)
        *err = g->err;
    return g->status;
}

ty_status gen_engine_run(gen_seq *g, ty_err *err)
{
    ty_status s = gen_engine_submit(g, err);
    return s != TY_OK ? s : gen_engine_wait(g, err);
}

void gen_engine_forget(const nn_net *net)
{
    pthread_mutex_lock(&engines_mu);
    for (gen_engine *e = engines; e; e = e->link) {
        if (e->net != net)
            continue;
        pthread_mutex_lock(&e->mu);
        /* no request holds net, so the thread is leaving if on */
        while (e->thread_on)
            pthread_cond_wait(&e->idle_cv, &e->mu);
        drop_idle_cache(e);
        pthread_mutex_unlock(&e->mu);
    }
    pthread_mutex_unlock(&engines_mu);
}
