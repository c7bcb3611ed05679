/*
 * fairq.c - a work queue shared fairly by tenants (see fairq.h).
 *
 * The tenants with something queued or held are a list in serving order:
 * one served is moved to the end, so scanning from the front finds, among
 * those holding equally few, the one served longest ago. A scan costs one
 * step per such tenant; they are at most the pool's threads plus the
 * tenants waiting, and an item here is a request that costs far more.
 *
 * Invariants: a tenant is in the list exactly when it holds or queues
 * something; q->queued is the sum of its tenants' queued; held <= cap
 * except for what fairq_take gave with ignore_cap.
 */
#include "server/fairq.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void fairq_init(fairq *q, int cap)
{
    memset(q, 0, sizeof *q);
    q->cap = cap < 1 ? 1 : cap;
}

void fairq_free(fairq *q)
{
    fairq_tenant *t = q->first;
    while (t) {
        fairq_tenant *next = t->next;
        free(t);
        t = next;
    }
    q->first = q->last = NULL;
    q->queued = 0;
}

static void unlink_tenant(fairq *q, fairq_tenant *t)
{
    if (t->prev)
        t->prev->next = t->next;
    else
        q->first = t->next;
    if (t->next)
        t->next->prev = t->prev;
    else
        q->last = t->prev;
    t->prev = t->next = NULL;
}

static void append_tenant(fairq *q, fairq_tenant *t)
{
    t->prev = q->last;
    t->next = NULL;
    if (q->last)
        q->last->next = t;
    else
        q->first = t;
    q->last = t;
}

ty_status fairq_push(fairq *q, const char *tenant, fairq_node *n, int *takeable)
{
    if (!tenant)
        tenant = "";
    fairq_tenant *t = q->first;
    while (t && strcmp(t->id, tenant) != 0)
        t = t->next;
    if (!t) {
        t = calloc(1, sizeof *t);
        if (!t)
            return TY_ENOMEM;
        snprintf(t->id, sizeof t->id, "%s", tenant);
        /* New: at the end, as if just served, so that a tenant cannot
         * jump the others by leaving and coming back. Its nothing held
         * still puts it before every tenant that holds something. */
        append_tenant(q, t);
    }
    n->next = NULL;
    if (t->tail)
        t->tail->next = n;
    else
        t->head = n;
    t->tail = n;
    t->queued++;
    q->queued++;
    if (takeable)
        *takeable = t->held < q->cap;
    return TY_OK;
}

fairq_node *fairq_take(fairq *q, int ignore_cap, fairq_tenant **who)
{
    fairq_tenant *best = NULL;
    for (fairq_tenant *t = q->first; t; t = t->next) {
        if (!t->head || (!ignore_cap && t->held >= q->cap))
            continue;
        if (!best || t->held < best->held)
            best = t;
        if (best->held == 0)
            break; /* none can hold fewer, and it is the longest ago */
    }
    if (!best)
        return NULL;
    fairq_node *n = best->head;
    best->head = n->next;
    if (!best->head)
        best->tail = NULL;
    n->next = NULL;
    best->queued--;
    q->queued--;
    best->held++;
    unlink_tenant(q, best);
    append_tenant(q, best);
    *who = best;
    return n;
}

void fairq_done(fairq *q, fairq_tenant *who)
{
    if (who->held > 0)
        who->held--;
    if (who->held == 0 && !who->head) {
        unlink_tenant(q, who);
        free(who);
    }
}
