/* The postgres mode's release (a call row leaves the live states, waiters are woken by NOTIFY)
 * and the floors install the refresher also writes to PostgreSQL (gate_pgmode.h). */
#include "gate_pgmode_int.h"

#include "error.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static bool outcome_ok(const char *o)
{
	static const char *const ok[] = { "completed", "failed",  "no-answer", "busy",
					  "canceled",  "refused", "swept" };

	for (size_t i = 0; o && i < sizeof(ok) / sizeof(ok[0]); i++)
		if (strcmp(o, ok[i]) == 0)
			return true;
	return false;
}

struct release_op {
	struct gate_pg *g;
	gate_pgmode_release_cb cb;
	void *data;
	uint32_t n;
	bool ended[];
};

static void release_cb(int status, const struct pg_results *r, void *data)
{
	struct release_op *op = data;
	const PGresult *res = status == 0 ? r->res[0] : NULL;

	if (res && PQntuples(res) != (int)op->n)
		status = -EPROTO;
	if (status == DSP_EPG)
		GLOG(LOG_ERROR, "call release refused: %s",
		     r->error ? PQresultErrorMessage(r->error) : "?");
	for (uint32_t i = 0; status == 0 && i < op->n; i++) {
		op->ended[i] = PQgetvalue(res, (int)i, 0)[0] == 't';
		op->g->stats.releases += op->ended[i];
	}
	if (op->cb)
		op->cb(op->g, status, status ? NULL : op->ended, op->n, op->data);
	free(op);
}

int gate_pgmode_release(struct gate_pg *g, const char *const *calls, uint32_t n,
			const char *outcome, gate_pgmode_release_cb cb, void *data)
{
	struct release_op *op;
	struct pgarr ids;
	int rc = -ENOMEM;

	if (!g || !calls || n < 1 || n > GATE_PG_WRITE_MAX || !outcome_ok(outcome))
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++)
		if (!ident_uuid_ok(calls[i]))
			return -EINVAL;
	op = calloc(1, sizeof(*op) + n * sizeof(op->ended[0]));
	if (!op)
		return -ENOMEM;
	*op = (struct release_op){ .g = g, .cb = cb, .data = data, .n = n };
	pgarr_init(&ids);
	for (uint32_t i = 0; i < n; i++)
		pgarr_text(&ids, calls[i]);
	if (pgarr_end(&ids)) {
		const char *v[] = { ids.buf, outcome };
		struct pg_query q = { .stmt = g->st[ST_RELEASE], .nparams = 2, .values = v };
		/* The priority lane: a freed line is the start of the next dial (SPEC P2). */
		rc = pg_pool_exec(g->pool, PG_LANE_PRIORITY, &q, release_cb, op);
	}
	pgarr_free(&ids);
	if (rc)
		free(op);
	return rc;
}

/* --- the floors install --- */

struct install_op {
	struct gate_pg *g;
	gate_pgmode_install_cb cb;
	void *data;
};

static void install_cb(int status, const struct pg_results *r, void *data)
{
	struct install_op *op = data;
	bool applied = false;

	if (status == DSP_EPG && strcmp(gate_pg_sqlstate(status, r), "23503") == 0)
		status = -ENOENT; /* no such organisation */
	else if (status == DSP_EPG)
		GLOG(LOG_ERROR, "floors install refused: %s",
		     r->error ? PQresultErrorMessage(r->error) : "?");
	if (status == 0)
		applied = PQntuples(r->res[1]) == 1; /* the head moved to this version */
	if (op->cb)
		op->cb(op->g, status, applied, op->data);
	free(op);
}

static int str_cmp(const void *x, const void *y)
{
	return strcmp(*(const char *const *)x, *(const char *const *)y);
}

/* Bad values and a campaign twice (the direct one as ""): O(n log n), n is up to
 * FAIRSHARE_CAMPAIGNS_MAX (a pairwise check took ≈ 0.2 s at 10,000 campaigns). */
static int floors_check(const struct gate_pgmode_floor *f, uint32_t n)
{
	if (n && !f)
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++)
		if ((f[i].campaign && !ident_ok(f[i].campaign)) ||
		    f[i].floor > FAIRSHARE_COUNT_MAX || f[i].carry.fluid_den < 0)
			return -EINVAL;
	if (n < 2)
		return 0;
	const char **ids = malloc(n * sizeof(*ids));
	if (!ids)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++)
		ids[i] = f[i].campaign ? f[i].campaign : "";
	qsort(ids, n, sizeof(*ids), str_cmp);
	int rc = 0;
	for (uint32_t i = 1; i < n && !rc; i++)
		if (strcmp(ids[i - 1], ids[i]) == 0)
			rc = -EINVAL;
	free(ids);
	return rc;
}

int gate_pgmode_install_floors(struct gate_pg *g, const char *org, uint64_t version,
			       uint64_t ttl_ms, const struct gate_pgmode_floor *floors, uint32_t n,
			       gate_pgmode_install_cb cb, void *data)
{
	struct pgarr a[7];
	struct install_op *op;
	char ver[24], ttl[24];
	int rc = 0;

	if (!g || !ident_ok(org) || version < 1 || version > INT64_MAX ||
	    n > FAIRSHARE_CAMPAIGNS_MAX)
		return -EINVAL;
	rc = floors_check(floors, n);
	if (rc)
		return rc;
	for (int k = 0; k < 7; k++)
		pgarr_init(&a[k]);
	for (uint32_t i = 0; i < n; i++) {
		const struct gate_pgmode_floor *f = &floors[i];
		pgarr_text(&a[0], f->campaign ? f->campaign : ""); /* '' is the direct one */
		pgarr_int(&a[1], f->floor, false);
		pgarr_text(&a[2], f->active ? "t" : "f");
		pgarr_int(&a[3], f->carry.deficit, false);
		pgarr_int(&a[4], f->carry.fluid_num, false);
		pgarr_int(&a[5], f->carry.fluid_den, false);
		pgarr_int(&a[6],
			  (int64_t)(f->carry.idle_ms > INT64_MAX ? INT64_MAX : f->carry.idle_ms),
			  false);
	}
	const char *fv[9];
	snprintf(ver, sizeof(ver), "%" PRIu64, version);
	gate_pg_ms(ttl, ttl_ms);
	fv[0] = org;
	fv[1] = ver;
	for (int k = 0; k < 7; k++)
		if (!(fv[2 + k] = pgarr_end(&a[k])))
			rc = -ENOMEM;
	op = rc ? NULL : calloc(1, sizeof(*op));
	if (!rc && !op)
		rc = -ENOMEM;
	if (!rc) {
		*op = (struct install_op){ .g = g, .cb = cb, .data = data };
		const char *ov[] = { org }, *hv[] = { org, ver, ttl };
		/* The org row first: an install waits for the org's admission in progress, so an
		 * admission reads one install's floors and expiry, never a mix of two. */
		struct pg_query q[] = {
			{ .stmt = g->st[ST_ORG_LOCK], .nparams = 1, .values = ov },
			{ .stmt = g->st[ST_INSTALL_HEAD], .nparams = 3, .values = hv },
			{ .stmt = g->st[ST_INSTALL_FLOORS], .nparams = 9, .values = fv },
		};
		rc = pg_pool_batch(g->pool, PG_LANE_NORMAL, q, 3, install_cb, op);
		if (rc)
			free(op);
	}
	for (int k = 0; k < 7; k++)
		pgarr_free(&a[k]);
	return rc;
}
