/*
 * advisor.c - the MIG layout advisor on a drifting demand trace (issue 34;
 * `make bench-advisor`, not a test).
 *
 * The trace: four H100-80GB GPUs, DAYS days of Poisson arrivals from four
 * tenants, about 75% of the 28 compute slices asked for on average. The mix
 * drifts: days 0-1 mostly 1g.10gb jobs (a few 2g and 3g, and long-lived 1g
 * serving replicas), day 2 turns over at noon, days 3-4 mostly 3g.40gb
 * jobs and whole-GPU jobs ("whole": min 7 compute slices), with a few 1g.
 * Scenario 2 is the same trace with the whole-GPU jobs asking for 3g.40gb
 * instead, so that the balanced layout can serve every request and the
 * comparison with it does not rest on requests it refuses.
 * Durations are exponential (mean 1 h for 1g-3g, 2 h for whole GPUs,
 * capped at 8 h; replicas 6 h). Seeded: the same trace every run.
 *
 * Every policy is replayed the same way, day by day (jobs/advisor.h's
 * adv_replay over [day, day + 24 h), the day's arrivals, starting empty):
 *   static 1g        every GPU 7 x 1g.10gb
 *   static balanced  every GPU 3g.40gb@4 + 2g.20gb@0 + 1g.10gb@2 + @3
 *                    (gpu/sim/h100-mixed.json)
 *   advisor daily    day d on adv_search's layouts for day d-1's demand,
 *                    searched from day d-1's layouts (what an operator
 *                    re-cutting every morning would run); day 0 has no
 *                    history and runs the balanced layout
 *   advisor oracle   day d on the layouts searched on day d's own demand
 *                    (the best the search can do; not available live)
 * The server's default scheduler settings (backfill_wait 300 s,
 * preempt on after 60 s, serving preemption on, fair_window 600 s).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/rng.h"
#include "jobs/advisor.h"

#define NGPUS 4
#define DAYS 5
#define DAY 86400.0
#define MAX_RECS 20000

static const sched_config CFG = {.backfill_wait = 300,
                                 .preempt = 1,
                                 .preempt_wait = 60,
                                 .serving_preempt = 1,
                                 .max_cpu_jobs = -1,
                                 .max_serving = 16,
                                 .max_serving_per_tenant = 8,
                                 .fair_window = 600};

static double expo(ty_rng *r, double mean)
{
    double u = ty_rng_uniform(r);
    if (u < 1e-9)
        u = 1e-9;
    return -mean * log(u);
}

/* The share of the new mix (3g and whole GPUs) at time t. */
static double drift(double t)
{
    double d = t / DAY;
    if (d < 2.5)
        return 0.0;
    return 1.0;
}

/* whole: the new mix has whole-GPU jobs (scenario 1); 0: those are 3g
 * too (scenario 2, which the balanced layout can serve entirely). */
static size_t make_trace(adv_record *recs, size_t cap, int whole)
{
    ty_rng rng;
    ty_rng_seed(&rng, 34, 1);
    size_t n = 0;
    /* Arrival rates per hour chosen for ~21 of 28 slices busy: the old mix
     * asks 1.2 slices a job for 1 h, the new one about 3.4 for ~1.3 h. */
    double t = 0;
    while (n < cap) {
        double p_new = drift(t);
        double rate = (1 - p_new) * 17.0 + p_new * 5.0; /* per hour */
        t += expo(&rng, 3600.0 / rate);
        if (t >= DAYS * DAY)
            break;
        adv_record *r = &recs[n];
        memset(r, 0, sizeof *r);
        r->arrival = t;
        r->tenant = (int)ty_rng_below(&rng, 4);
        double u = ty_rng_uniform(&rng);
        const char *prof = "1g.10gb";
        double mean = 3600;
        if (ty_rng_uniform(&rng) < p_new) {
            if (u < 0.6 || (!whole && u < 0.85)) {
                prof = "3g.40gb";
            } else if (u < 0.85) {
                prof = NULL; /* whole GPU */
                mean = 7200;
            }
        } else {
            if (u < 0.05)
                prof = "3g.40gb";
            else if (u < 0.15)
                prof = "2g.20gb";
            else if (u < 0.20) {
                r->serving = 1;
                mean = 6 * 3600; /* a replica lives long */
            }
        }
        if (prof) {
            r->request.kind = SCHED_REQ_PROFILE;
            snprintf(r->request.profile, sizeof r->request.profile, "%s", prof);
        } else {
            r->request.kind = SCHED_REQ_MIN;
            r->request.min_compute_slices = 7;
        }
        r->duration =
            r->serving ? mean : fmin(expo(&rng, mean), 8 * 3600.0) + 60;
        n++;
    }
    return n;
}

static adv_layout layout_from(const mig_model *m, const char *const *p,
                              const int *s, int n)
{
    adv_layout l = {.model = m, .mig = 1, .n = n};
    for (int i = 0; i < n; i++)
        l.inst[i] = (mig_placed){mig_profile_find(m, p[i]), s[i]};
    return l;
}

static void describe(const adv_layout *l, char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    if (!l->mig) {
        snprintf(buf, n, "MIG off");
        return;
    }
    /* "4x1g.10gb+3g.40gb": each profile once, with its count. */
    for (int i = 0; i < l->n && used < n; i++) {
        int seen = 0, count = 0;
        for (int j = 0; j < i; j++)
            seen |= l->inst[j].profile == l->inst[i].profile;
        if (seen)
            continue;
        for (int j = i; j < l->n; j++)
            count += l->inst[j].profile == l->inst[i].profile;
        used +=
            (size_t)snprintf(buf + used, n - used, "%s%.0d%s%s",
                             used ? "+" : "", count > 1 ? count : 0,
                             count > 1 ? "x" : "", l->inst[i].profile->name);
    }
}

typedef struct {
    const char *name;
    double queued, unserv, held, avail;
    size_t unservable;
} total;

static void add(total *t, const adv_result *r)
{
    t->queued += r->queued_slice_hours;
    t->unserv += r->unservable_slice_hours;
    t->held += r->held_slice_hours;
    t->avail += r->available_slice_hours;
    t->unservable += r->unservable;
}

static int scenario(int whole)
{
    static adv_record recs[MAX_RECS];
    size_t n = make_trace(recs, MAX_RECS, whole);
    const mig_model *h100 = mig_model_find("H100-80GB");
    static const char *const p1[] = {"1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb",
                                     "1g.10gb", "1g.10gb", "1g.10gb"};
    static const int s1[] = {0, 1, 2, 3, 4, 5, 6};
    static const char *const pb[] = {"3g.40gb", "2g.20gb", "1g.10gb",
                                     "1g.10gb"};
    static const int sb[] = {4, 0, 2, 3};
    adv_layout all1g[NGPUS], bal[NGPUS], daily[NGPUS], next[NGPUS],
        oracle[NGPUS];
    for (int g = 0; g < NGPUS; g++) {
        all1g[g] = layout_from(h100, p1, s1, 7);
        bal[g] = layout_from(h100, pb, sb, 4);
        daily[g] = bal[g];
    }
    total tot[4] = {{.name = "static 7x1g.10gb"},
                    {.name = "static 3g+2g+1g+1g"},
                    {.name = "advisor daily (prev day)"},
                    {.name = "advisor oracle (same day)"}};
    ty_err err = {0};
    double search_s = 0;
    int searches = 0;
    printf("== scenario %d: the new mix is 3g.40gb%s ==\n", whole ? 1 : 2,
           whole ? " and whole-GPU jobs" : " only (no whole-GPU jobs)");
    printf("trace: %zu requests over %d days on %d x H100-80GB; H100 has "
           "%d maximal MIG layouts (+ MIG off)\n\n",
           n, DAYS, NGPUS, adv_enumerate(h100, NULL, 0));
    printf("%-4s %10s %10s %10s %10s   %s\n", "day", "7x1g", "balanced",
           "daily", "oracle", "daily layouts (per GPU)");
    for (int d = 0; d < DAYS; d++) {
        double t0 = d * DAY, t1 = t0 + DAY;
        adv_result r[4], cur, best;
        if (adv_replay(&CFG, all1g, NGPUS, recs, n, t0, t1, &r[0], &err) ||
            adv_replay(&CFG, bal, NGPUS, recs, n, t0, t1, &r[1], &err) ||
            adv_replay(&CFG, daily, NGPUS, recs, n, t0, t1, &r[2], &err)) {
            fprintf(stderr, "replay: %s\n", err.msg);
            return 1;
        }
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        if (adv_search(&CFG, daily, NGPUS, recs, n, t0, t1, oracle, &cur, &best,
                       &err)) {
            fprintf(stderr, "search: %s\n", err.msg);
            return 1;
        }
        clock_gettime(CLOCK_MONOTONIC, &b);
        search_s += (double)(b.tv_sec - a.tv_sec) +
                    (double)(b.tv_nsec - a.tv_nsec) / 1e9;
        searches++;
        r[3] = best;
        for (int k = 0; k < 4; k++)
            add(&tot[k], &r[k]);
        char desc[NGPUS][96];
        for (int g = 0; g < NGPUS; g++)
            describe(&daily[g], desc[g], sizeof desc[g]);
        printf("%-4d %10.1f %10.1f %10.1f %10.1f   %s | %s | %s | %s\n", d,
               r[0].queued_slice_hours, r[1].queued_slice_hours,
               r[2].queued_slice_hours, r[3].queued_slice_hours, desc[0],
               desc[1], desc[2], desc[3]);
        /* Tomorrow's layouts: today's demand, searched from today's. */
        memcpy(next, oracle, sizeof next);
        memcpy(daily, next, sizeof daily);
    }
    printf("\n%-26s %12s %12s %12s %8s %10s %10s\n", "policy", "queued sl-h",
           "unservable", "servable", "util", "vs 7x1g", "vs balanced");
    for (int k = 0; k < 4; k++) {
        const total *t = &tot[k];
        printf("%-26s %12.1f %12.1f %12.1f %7.1f%% %9.1f%% %9.1f%%\n", t->name,
               t->queued, t->unserv, t->queued - t->unserv,
               100 * t->held / t->avail, 100 * (1 - t->queued / tot[0].queued),
               100 * (1 - t->queued / tot[1].queued));
    }
    printf("\n(queued sl-h: queued slice-hours; unservable: the part of "
           "it from requests the layout cannot hold at all, each counted "
           "for the whole day; vs: reduction of queued slice-hours)\n");
    printf("search: %.2f s per day's advice on average (%d searches)\n",
           search_s / searches, searches);
    /* What GET /v1/admin/mig-advice?window=5d would cost on this trace. */
    struct timespec a, b;
    adv_result cur, best;
    clock_gettime(CLOCK_MONOTONIC, &a);
    if (adv_search(&CFG, bal, NGPUS, recs, n, 0, DAYS * DAY, oracle, &cur,
                   &best, &err)) {
        fprintf(stderr, "search: %s\n", err.msg);
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("one search over all %d days (%zu requests): %.2f s\n\n", DAYS, n,
           (double)(b.tv_sec - a.tv_sec) +
               (double)(b.tv_nsec - a.tv_nsec) / 1e9);
    return 0;
}

int main(void) { return scenario(1) || scenario(0); }
