/* Private to refresher*.c: the refresher's state and the steps its files hand to each other.
 * refresher.c runs the election, the cycle and the kicks; refresher_org.c one organisation's
 * reads and recompute; refresher_install.c its installs. */
#ifndef DSP_REFRESHER_INT_H
#define DSP_REFRESHER_INT_H

#include "fairshare.h"
#include "gate_pgmode.h"
#include "refresher.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define SEQ_LIMIT (1ull << 26) /* gate_floors_version()'s seq bound */

enum {
	ST_LEASE,
	ST_ORGS,
	ST_MODE,
	ST_ORG,
	ST_CAMPAIGNS,
	ST_WAITING,
	ST_CARRIES,
	ST_RUNNING,
	ST_LIVE,
	ST_WAKE,
	ST_COUNT
};

/* A campaign as read; strings are offsets into the text arena. */
struct camp {
	size_t id, agent;
	enum fairshare_state state;
	uint32_t ceiling, due, waiting, running;
	struct fairshare_carry carry;
};

struct vcamp {
	size_t id; /* offset into the view arena */
	uint32_t running;
	uint32_t floor; /* installed floor */
};

struct vagent { /* the layout of vcamp (view_running() reads both) */
	size_t id;
	uint32_t running;
	uint32_t unused;
};

/* A grow-only array. */
struct vec {
	void *p;
	size_t n, cap, size;
};

struct refresher {
	uv_loop_t *loop;
	struct pg_pool *pool;
	struct gate *gate;
	struct gate_pg *gpg;
	struct refresher_options o;
	char owner[128];
	const struct pg_stmt *st[ST_COUNT];
	uv_timer_t timer;
	uv_timer_t kick_timer; /* a kicked cycle, REFRESHER_KICK_GAP_MS after the last one ended */
	bool started, closing, timer_closed, kick_closed;
	bool again;	   /* a kick (or a period) came during the cycle: one more after it */
	bool kick_armed;   /* kick_timer is running */
	uint64_t last_end; /* uv_now() when the last cycle ended */
	int pending;	   /* requests in flight */

	/* the cycle */
	bool busy;
	uint64_t elapsed_override;
	refresher_step_cb cb;
	void *cb_data;
	int status;
	uint64_t lease_version, seq;
	uint64_t lease_sent;	 /* uv_hrtime() when the last renew was sent */
	uint64_t lease_deadline; /* uv_hrtime() past which the lease may have run out */
	bool new_tenure;
	char **orgs;
	size_t n_orgs, org_i;
	bool pg_mode; /* the gate was in postgres mode at the cycle's start */

	/* one organisation's reads */
	int reads; /* outstanding reads */
	int read_status;
	int view_status; /* gate_read()'s failure: Redis cannot answer */
	bool from_pg;	 /* the running counts (the v_ fields) are the call rows' */
	uint64_t t0, t1, t2;
	int64_t limits_version, elapsed_ms;
	uint32_t org_limit, per_agent, global_limit;
	int64_t sys_limits_version;
	bool enforced;
	struct vec text, camps, direct; /* direct: 0 or 1 carry */
	/* The running counts, k, and what the Redis gate holds: gate_read()'s view, or the call
	 * rows' counts (from_pg: nothing held in Redis is known, every version and floor 0). */
	struct vec vtext, vcamps, vagents;
	uint64_t v_limits_version, v_floors_version;
	uint64_t v_system_version; /* the system limit's version Redis holds (this cycle's read) */
	uint32_t v_k, v_system_running, v_direct_running, v_direct_floor;
	uint64_t version; /* floors version of this org's install */
	bool delta_sent;  /* the Redis install in flight is a delta */

	/* computation, reused */
	struct vec in, out, agents, agent_running, floors, delta, pgfloors, limits;
	void *work;
	size_t work_size;

	struct refresher_stats stats;
};

static inline int vec_reserve(struct vec *v, size_t n)
{
	if (n <= v->cap)
		return 0;
	size_t cap = v->cap ? v->cap : 16;
	while (cap < n)
		cap *= 2;
	void *p = realloc(v->p, cap * v->size);
	if (!p)
		return -ENOMEM;
	v->p = p;
	v->cap = cap;
	return 0;
}

/* Appends a string to a text arena; *off receives its offset. */
static inline int text_add(struct vec *t, const char *s, size_t *off)
{
	size_t len = strlen(s) + 1;
	if (vec_reserve(t, t->n + len))
		return -ENOMEM;
	memcpy((char *)t->p + t->n, s, len);
	*off = t->n;
	t->n += len;
	return 0;
}

static inline const char *text_at(const struct vec *t, size_t off)
{
	return (const char *)t->p + off;
}

static inline int64_t cell_i64(const PGresult *res, int row, int col)
{
	return PQgetisnull(res, row, col) ? 0 : strtoll(PQgetvalue(res, row, col), NULL, 10);
}

static inline uint32_t cell_u32(const PGresult *res, int row, int col)
{
	int64_t v = cell_i64(res, row, col);
	return v < 0 ? 0 : v > FAIRSHARE_COUNT_MAX ? FAIRSHARE_COUNT_MAX : (uint32_t)v;
}

static inline uint64_t us_since(uint64_t t_ns)
{
	return (uv_hrtime() - t_ns) / 1000;
}

/* Every callback starts here: false when r is closing (and maybe freed now). */
bool refr_cb_enter(struct refresher *r);

/* The tenure ended (renew refused or failed, lease run out, install fenced). */
void refr_lease_lost(struct refresher *r);

/* refresher_org.c: reads the next organisation (or ends the cycle when none is left), then
 * recomputes it and hands it to refr_install(). */
void refr_org_next(struct refresher *r);

/* refresher_org.c: the organisation is done (status 0, or why not): on to the next. */
void refr_org_done(struct refresher *r, int status);

/* refresher_org.c: the campaign of that id among the organisation's (sorted bytewise), or
 * NULL. */
struct camp *refr_camp_find(const struct refresher *r, const char *id);

/* refresher.c: renews the lease in the middle of a cycle, then goes on with refr_org_next().
 * Returns 0 or the pool's refusal. */
int refr_renew(struct refresher *r);

/* refresher.c: ends the cycle and answers refresher_step(). */
void refr_cycle_end(struct refresher *r, int status);

/* refresher_install.c: installs the recomputed organisation (system limit, org limits, floors
 * in PostgreSQL, then in Redis, then wakes; with counts from the call rows, the floors in
 * PostgreSQL and the postgres-mode wake only), ending with refr_org_done(). */
void refr_install(struct refresher *r);

#endif
