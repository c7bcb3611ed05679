/*
 * fairq.h - a work queue shared fairly by tenants: one FIFO per tenant, a
 * cap on the items one tenant may hold (taken and not yet done) at once,
 * and the next item taken from the tenant holding the fewest, ties going
 * round-robin (the tenant served longest ago first).
 *
 * The offload pools (server/offload.c) queue requests here, so that one
 * tenant's slow work (a deployment that answers in a second, a long
 * evaluation) can hold at most its cap of the pool's threads and waits in
 * its own queue, while another tenant's request takes the next free thread.
 *
 * Pure bookkeeping: no lock, no clock, no threads; the caller serialises
 * every call (offload.c holds its pool's mutex). Items are the caller's
 * (an intrusive node); tenants are named by their id, "" for none.
 */
#ifndef TY_FAIRQ_H
#define TY_FAIRQ_H

#include <stddef.h>

#include "common/ids.h"
#include "common/ty.h"

/* Embedded in the caller's item; fairq links it, never frees it. */
typedef struct fairq_node {
    struct fairq_node *next;
} fairq_node;

/* One tenant's queue and what it holds; fairq's, freed when it holds
 * nothing and has nothing queued. */
typedef struct fairq_tenant {
    char id[TY_ID_MAX];
    fairq_node *head, *tail;
    size_t queued;
    int held;
    struct fairq_tenant *prev, *next; /* in serving order, longest ago first */
} fairq_tenant;

typedef struct {
    fairq_tenant *first, *last;
    int cap;       /* items one tenant may hold at once (>= 1) */
    size_t queued; /* over all tenants */
} fairq;

/* An empty queue whose tenants may each hold cap items (< 1 is taken as 1). */
void fairq_init(fairq *q, int cap);

/* Frees the tenants' entries; the items still queued are the caller's
 * (it must have taken them all first). */
void fairq_free(fairq *q);

/* Queues n as tenant's (NULL or "" for none). TY_OK and *takeable set
 * to 1 when the tenant is under its cap (a free taker may take it now);
 * TY_ENOMEM (nothing queued) when a new tenant's entry cannot be
 * allocated. */
ty_status fairq_push(fairq *q, const char *tenant, fairq_node *n,
                     int *takeable);

/* Takes the next item: from the tenants under their cap (every tenant
 * when ignore_cap, as when the pool is stopping), the one holding the
 * fewest, the one served longest ago among equals; its oldest item. The
 * tenant then holds one more (*who, for fairq_done). NULL when no tenant
 * can be served. */
fairq_node *fairq_take(fairq *q, int ignore_cap, fairq_tenant **who);

/* The item taken from who is done: who holds one fewer (and is freed
 * when it holds and queues nothing). */
void fairq_done(fairq *q, fairq_tenant *who);

#endif
