/* The dialer's leases: renewal of the calls in its care and the send fence (dial.h, "Leases";
 * dispatcher/worker/README.md, "Re-send of an orphaned call"). */
#include "dial.h"
#include "dial_int.h"

#include "error.h"
#include "gate_pg_int.h" /* struct pgarr */
#include "log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* $1 contact ids, $2 their lease tokens as last seen (NULL: unknown), $3 lease ms, $4 owner.
 * Only a lease still ours: contact dialing (its call row live), our name, our token. */
#define SQL_RENEW                                                                                  \
	"UPDATE contacts c SET lease_until = now() + make_interval(secs => $3::double precision"   \
	" / 1000) FROM unnest($1::bigint[], $2::bigint[]) AS r(id, tok) WHERE c.id = r.id"         \
	" AND c.state = 'dialing' AND c.lease_owner = $4::text"                                    \
	" AND (r.tok IS NULL OR c.lease_token = r.tok) RETURNING c.id, c.lease_token"

#define RENEW_MAX   1000 /* contacts per renewal statement */
#define SEND_MARGIN 1000 /* ms: a send must end this long before the lease does */

struct renewal {
	struct dial *d;
	uint64_t seq;
	int64_t sent_ms;
};

static void renew_tick(uv_timer_t *t);

int dial_lease_init(struct dial *d)
{
	/* No guess: a lease that does not cover the first request is refused at start
	 * (settings.c, worker.c), not assumed to have half of itself left. */
	if (!d->o.lease_left_ms || d->o.lease_left_ms > d->o.lease_ms)
		return -EINVAL;
	return pg_pool_prepare(d->pool, SQL_RENEW, 4, &d->renew_st);
}

void dial_lease_hold(struct dcall *c, int64_t until_ms, int64_t token)
{
	struct dial *d = c->d;

	c->lease_until_ms = until_ms ? until_ms : 1;
	c->lease_token = token;
	list_add_tail(&d->care, &c->care);
	if (!uv_is_active((uv_handle_t *)&d->renew)) {
		uint64_t period = d->o.lease_ms / 4 ? d->o.lease_ms / 4 : 1;
		uv_timer_start(&d->renew, renew_tick, period, period);
	}
}

/* Whether c's lease should be renewed at now: it must still cover a whole request after the
 * next tick, with half a lease to spare. */
static bool needs_renewal(const struct dcall *c, int64_t now)
{
	const struct dial *d = c->d;
	int64_t want = (int64_t)(d->o.lease_ms / 2 + d->o.timeout_ms + SEND_MARGIN);

	return !c->renew_seq && !c->lease_lost && c->lease_until_ms - now < want;
}

enum dial_lease_gate dial_lease_check(struct dcall *c, int64_t now)
{
	struct dial *d = c->d;

	if (c->lease_lost || now >= c->lease_until_ms)
		return DIAL_LEASE_GONE;
	if (now + (int64_t)(d->o.timeout_ms + SEND_MARGIN) <= c->lease_until_ms)
		return DIAL_LEASE_GO;
	if (!c->renew_seq)
		uv_timer_start(&d->renew, renew_tick, 0, d->o.lease_ms / 4 ? d->o.lease_ms / 4 : 1);
	return DIAL_LEASE_WAIT;
}

struct dcall *dial_lease_find(struct dial *d, const char *call)
{
	for (struct list_node *n = d->care.next; n != &d->care; n = n->next) {
		struct dcall *c = list_entry(n, struct dcall, care);
		if (strcmp(c->call, call) == 0)
			return c;
	}
	return NULL;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

/* A row returned: [0] contact id, [1] its token. */
static const int64_t *returned(const int64_t *rows, int n, int64_t contact)
{
	if (!rows || n <= 0) /* bsearch's array must not be NULL, even for 0 elements */
		return NULL;
	return bsearch(&contact, rows, (size_t)n, 2 * sizeof(int64_t), cmp_i64);
}

static void renewed(int status, const struct pg_results *r, void *data)
{
	struct renewal *rn = data;
	struct dial *d = rn->d;
	int n = status ? 0 : PQntuples(r->res[0]);
	int64_t *rows = n ? calloc((size_t)n * 2, sizeof(int64_t)) : NULL;
	struct list_node *pos, *tmp;

	d->renewing--;
	if (status)
		log_warn(LOG_DIAL,
			 "lease renewal failed (%s): calls whose lease runs out stop "
			 "sending (another worker re-sends them)",
			 dsp_strerror(status));
	for (int i = 0; rows && i < n; i++) {
		rows[2 * i] = strtoll(PQgetvalue(r->res[0], i, 0), NULL, 10);
		rows[2 * i + 1] = strtoll(PQgetvalue(r->res[0], i, 1), NULL, 10);
	}
	if (rows)
		qsort(rows, (size_t)n, 2 * sizeof(int64_t), cmp_i64);
	list_for_each_safe (pos, tmp, &d->care) {
		struct dcall *c = list_entry(pos, struct dcall, care);
		const int64_t *row;
		if (c->renew_seq != rn->seq)
			continue;
		c->renew_seq = 0;
		if (status || (n && !rows))
			continue; /* not known: the lease stays as it was known */
		if ((row = returned(rows, n, c->c.contact))) {
			c->lease_until_ms = rn->sent_ms + (int64_t)d->o.lease_ms;
			c->lease_token = row[1];
			d->st.renewed++;
			continue;
		}
		c->lease_lost = true; /* taken over, or the call ended: not ours to send */
		LOG_AT(LOG_INFO, LOG_DIAL,
		       (&(const struct log_ids){ .org = c->org, .call = c->call }),
		       "lease of contact %" PRId64 " is not ours any more: this worker stops "
		       "sending the call",
		       c->c.contact);
		if (c->queued || c->resend_wait)
			dial_finish_now(c, DIAL_LEASE_LOST);
	}
	free(rows);
	free(rn);
	dial_maybe_done(d);
}

static void renew_tick(uv_timer_t *t)
{
	struct dial *d = t->data;
	int64_t now = dial_now_ms(d);
	struct pgarr ids, toks;
	struct renewal *rn;
	char ms[24];
	uint32_t n = 0;
	int rc = -ENOMEM;

	if (d->closing || list_empty(&d->care) || !(rn = calloc(1, sizeof(*rn))))
		return;
	*rn = (struct renewal){ .d = d, .seq = ++d->renew_seq, .sent_ms = now };
	pgarr_init(&ids);
	pgarr_init(&toks);
	for (struct list_node *m = d->care.next; m != &d->care && n < RENEW_MAX; m = m->next) {
		struct dcall *c = list_entry(m, struct dcall, care);
		if (!needs_renewal(c, now))
			continue;
		c->renew_seq = rn->seq;
		pgarr_int(&ids, c->c.contact, false);
		pgarr_int(&toks, c->lease_token, c->lease_token == 0);
		n++;
	}
	snprintf(ms, sizeof(ms), "%" PRIu64, d->o.lease_ms);
	const char *v[4] = { pgarr_end(&ids), pgarr_end(&toks), ms, d->owner };
	struct pg_query q = { .stmt = d->renew_st, .nparams = 4, .values = v };
	if (n && v[0] && v[1] && !(rc = pg_pool_exec(d->pool, PG_LANE_NORMAL, &q, renewed, rn)))
		d->renewing++;
	pgarr_free(&ids);
	pgarr_free(&toks);
	if (rc == 0)
		return;
	if (n)
		log_warn(LOG_DIAL, "lease renewal not sent: %s", dsp_strerror(rc));
	for (struct list_node *m = d->care.next; m != &d->care; m = m->next) {
		struct dcall *c = list_entry(m, struct dcall, care);
		if (c->renew_seq == rn->seq)
			c->renew_seq = 0;
	}
	free(rn);
}
