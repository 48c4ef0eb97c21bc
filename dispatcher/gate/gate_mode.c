/* The gate mode controller: follows the mode and epoch, switches to postgres mode when Redis
 * fails, adopts the generation in redis mode. See gate_mode.h. */
#include "gate_mode.h"

#include "error.h"
#include "gate_recon.h"
#include "log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MLOG(level, ...) LOG_AT(level, LOG_GATE, NULL, "gate mode: " __VA_ARGS__)

struct gate_mode_ctl {
	struct gate_mode_options o;
	struct gate_mode_state s;
	struct gate_mode_stats stats;
	uv_timer_t timer;
	unsigned pending; /* requests in flight */
	bool started, closing, timer_closed;
	bool want_switch; /* a switch asked for at s.epoch */
	bool reading;	  /* a mode read in flight */
	bool reread;	  /* asked for while reading: that read may predate the change */
	bool gen_reading; /* a generation read in flight */
	/* The worker's Redis connection as its events said (up: an UP not followed by a DOWN).
	 * While it is not up, a failed generation read is a connection still being made (at the
	 * worker's start, or after an outage that ended while this worker was in its reconnect
	 * backoff), not Redis unreachable under this epoch: the controller waits up to up_wait_ms
	 * for the up rather than switch the fleet (a DOWN during a redis epoch switches at once). */
	bool conn_up;
	bool up_waiting;
	uint64_t up_wait_since; /* uv_now() when the wait began */
	/* system_settings.gate_generation and gate_redis_run_id as read at committed_epoch (0: not
	 * read at s.epoch): the only {sys}:gen adopted in redis mode at that epoch, and the only
	 * server it is adopted from. */
	uint64_t committed_epoch;
	char committed[GATE_PG_GEN_MAX + 1];
	char committed_run_id[GATE_PG_RUN_ID_MAX + 1];
};

static void evaluate(struct gate_mode_ctl *c);
static void read_mode(struct gate_mode_ctl *c);
static void retry_later(struct gate_mode_ctl *c);

/* True when a failed generation read should wait for the connection's up instead of
 * switching: the connection is not up and has not been waited for up_wait_ms yet (longer than
 * a reconnect backoff and a connect, so a worker that starts, or comes back after the way back,
 * beside a live Redis never switches the fleet; a Redis that is really down for this worker is
 * still noticed after it). */
static bool wait_first_up(struct gate_mode_ctl *c)
{
	uint64_t now = uv_now(c->o.loop);

	if (c->conn_up)
		return false;
	if (!c->up_waiting) {
		c->up_waiting = true;
		c->up_wait_since = now;
	}
	if (now - c->up_wait_since >= c->o.up_wait_ms) {
		MLOG(LOG_WARN, "Redis connection not up after %" PRIu64 " ms", c->o.up_wait_ms);
		return false;
	}
	retry_later(c);
	return true;
}

static void maybe_free(struct gate_mode_ctl *c)
{
	if (c->closing && c->timer_closed && c->pending == 0)
		free(c);
}

/* Returns true when c is closing (the caller's request is done, and c may be gone). */
static bool req_done(struct gate_mode_ctl *c)
{
	c->pending--;
	if (!c->closing)
		return false;
	maybe_free(c);
	return true;
}

static void changed(struct gate_mode_ctl *c, struct gate_mode_state old)
{
	if (memcmp(&old, &c->s, sizeof(old)) != 0 && c->o.change_cb)
		c->o.change_cb(c, &c->s, c->o.data);
}

/* A new mode and epoch (from a read, a switch or a NOTIFY): redis needs its generation. */
static void set_mode(struct gate_mode_ctl *c, struct gate_pg_mode m)
{
	struct gate_mode_state old = c->s;

	if (m.epoch < c->s.epoch || (m.epoch == c->s.epoch && m.mode == c->s.mode))
		return;
	if (m.epoch != c->s.epoch) {
		c->want_switch = false;
		c->up_waiting = false; /* a new epoch: a new wait for the up */
	}
	c->s.mode = m.mode;
	c->s.epoch = m.epoch;
	c->s.usable = m.mode == GATE_MODE_POSTGRES;
	MLOG(LOG_INFO, "%s mode at epoch %" PRIu64, gate_mode_name(m.mode), m.epoch);
	changed(c, old);
	evaluate(c);
}

/* A mode read from PostgreSQL carries the generation committed for its epoch (a NOTIFY does
 * not): the one a redis epoch may be served under. */
static void learn_generation(struct gate_mode_ctl *c, const struct gate_pg_mode *m)
{
	if (m->epoch < c->s.epoch || m->epoch < c->committed_epoch)
		return;
	c->committed_epoch = m->epoch;
	memcpy(c->committed, m->generation, sizeof(c->committed));
	c->committed[GATE_PG_GEN_MAX] = '\0';
	memcpy(c->committed_run_id, m->run_id, sizeof(c->committed_run_id));
	c->committed_run_id[GATE_PG_RUN_ID_MAX] = '\0';
}

static void retry_cb(uv_timer_t *t)
{
	evaluate(t->data);
}

static void retry_later(struct gate_mode_ctl *c)
{
	if (!c->closing)
		uv_timer_start(&c->timer, retry_cb, c->o.retry_ms, 0);
}

static void read_cb(struct gate_pg *pg, int status, const struct gate_pg_switch_result *r,
		    void *data)
{
	struct gate_mode_ctl *c = data;

	(void)pg;
	c->reading = false;
	if (req_done(c))
		return;
	if (status) {
		retry_later(c);
		return;
	}
	c->stats.reads++;
	if (c->reread) {
		c->reread = false;
		read_mode(c); /* after this one's result */
	}
	if (r->now.epoch < c->s.epoch) {
		retry_later(c); /* behind what a NOTIFY told: read again */
		return;
	}
	learn_generation(c, &r->now);
	set_mode(c, r->now);
	evaluate(c); /* same mode and epoch: the committed generation may be what it waited for */
}

static void read_mode(struct gate_mode_ctl *c)
{
	if (c->reading) {
		c->reread = true;
		return;
	}
	if (gate_pg_read_mode(c->o.pg, read_cb, c)) {
		retry_later(c);
		return;
	}
	c->reading = true;
	c->pending++;
}

static void switch_cb(struct gate_pg *pg, int status, const struct gate_pg_switch_result *r,
		      void *data)
{
	struct gate_mode_ctl *c = data;
	struct gate_mode_state old = c->s;

	(void)pg;
	c->s.switching = false;
	if (req_done(c))
		return;
	if (status) {
		MLOG(LOG_WARN, "switch to postgres mode failed (%s): retrying",
		     dsp_strerror(status));
		changed(c, old);
		retry_later(c);
		return;
	}
	if (r->switched) {
		c->stats.switches++;
		MLOG(LOG_WARN, "switched the fleet to postgres mode (epoch %" PRIu64 ")",
		     r->now.epoch);
	}
	changed(c, old);
	learn_generation(c, &r->now);
	set_mode(c, r->now);
	evaluate(c);
}

static void gen_cb(int status, const char *gen, size_t len, void *data)
{
	struct gate_mode_ctl *c = data;
	struct gate_mode_state old = c->s;
	char want[32], buf[GATE_GEN_MAX + 1];
	const char *run_id;
	int n;

	c->gen_reading = false;
	if (req_done(c))
		return;
	if (c->s.mode != GATE_MODE_REDIS || c->s.usable)
		return;
	if (status) {
		if (wait_first_up(c))
			return;
		/* Redis unreachable in redis mode: the switch rule. */
		c->want_switch = true;
		c->stats.triggers++;
		evaluate(c);
		return;
	}
	if (c->committed_epoch != c->s.epoch) {
		evaluate(c); /* the epoch moved meanwhile: its committed generation first */
		return;
	}
	n = snprintf(want, sizeof(want), "e%" PRIu64 ".", c->s.epoch);
	if (!gen || len > GATE_GEN_MAX || len < (size_t)n || memcmp(gen, want, (size_t)n) != 0 ||
	    len != strlen(c->committed) || memcmp(gen, c->committed, len) != 0) {
		/* Not the generation the rebuild of this epoch committed: either the state this
		 * epoch was built under is gone, or a stale reconciler (its transaction lost, its
		 * lease expired) rebuilt Redis from an older snapshot of the live calls after the
		 * commit. Neither may be adopted: postgres mode counts from the call rows. */
		MLOG(LOG_WARN,
		     "generation %.*s is not the one committed for epoch %" PRIu64
		     " (%s): state lost",
		     gen ? (int)len : 6, gen ? gen : "(none)", c->s.epoch,
		     c->committed[0] ? c->committed : "none recorded");
		c->want_switch = true;
		c->stats.triggers++;
		evaluate(c);
		return;
	}
	run_id = gate_server_run_id(c->o.gate); /* the server that answered */
	if (strcmp(run_id, c->committed_run_id) != 0) {
		/* The committed generation, on another server than the one the way back rebuilt:
		 * a restart that reloaded a snapshot, or a replica promoted during the epoch. It
		 * may have lost the newest slot records, so it is not adopted. */
		MLOG(LOG_WARN,
		     "server run_id %.8s is not the one the rebuild of epoch %" PRIu64
		     " was built on (%.8s): state may be lost",
		     run_id[0] ? run_id : "(none)", c->s.epoch,
		     c->committed_run_id[0] ? c->committed_run_id : "(none)");
		c->want_switch = true;
		c->stats.triggers++;
		c->stats.foreign_servers++;
		evaluate(c);
		return;
	}
	memcpy(buf, gen, len);
	buf[len] = '\0';
	gate_set_generation(c->o.gate, buf);
	c->stats.adopted++;
	c->s.usable = true;
	changed(c, old);
}

static void read_gen(struct gate_mode_ctl *c)
{
	if (c->gen_reading)
		return;
	if (gate_read_generation(c->o.gate, gen_cb, c)) {
		if (wait_first_up(c))
			return;
		c->want_switch = true; /* connection down */
		c->stats.triggers++;
		evaluate(c);
		return;
	}
	c->gen_reading = true;
	c->pending++;
}

/* What to do now: switch, adopt the generation, or nothing. */
static void evaluate(struct gate_mode_ctl *c)
{
	struct gate_mode_state old = c->s;

	if (c->closing || !c->started || c->s.switching)
		return;
	if (c->s.epoch == 0) {
		read_mode(c);
		return;
	}
	if (c->s.mode != GATE_MODE_REDIS)
		return;
	if (c->want_switch) {
		if (gate_pg_switch_to_postgres(c->o.pg, c->s.epoch, c->o.switch_wait_ms, switch_cb,
					       c)) {
			retry_later(c);
			return;
		}
		c->pending++;
		c->s.switching = true;
		c->s.usable = false;
		changed(c, old);
		return;
	}
	if (c->s.usable)
		return;
	if (c->committed_epoch != c->s.epoch)
		read_mode(c); /* a NOTIFY carries no generation */
	else
		read_gen(c);
}

int gate_mode_new(const struct gate_mode_options *o, struct gate_mode_ctl **out)
{
	struct gate_mode_ctl *c;

	if (!o || !out || !o->loop || !o->pg || !o->gate)
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->o = *o;
	if (!c->o.switch_wait_ms)
		c->o.switch_wait_ms = GATE_PG_WRITE_DEADLINE_MS;
	if (!c->o.retry_ms)
		c->o.retry_ms = 500;
	if (!c->o.up_wait_ms)
		c->o.up_wait_ms = GATE_MODE_UP_WAIT_MS;
	uv_timer_init(o->loop, &c->timer);
	c->timer.data = c;
	*out = c;
	return 0;
}

int gate_mode_start(struct gate_mode_ctl *c)
{
	if (c->started || c->closing)
		return -EBUSY;
	c->started = true;
	read_mode(c);
	return 0;
}

void gate_mode_get(const struct gate_mode_ctl *c, struct gate_mode_state *out)
{
	*out = c->s;
}

void gate_mode_get_stats(const struct gate_mode_ctl *c, struct gate_mode_stats *out)
{
	*out = c->stats;
}

/* Redis failed the worker at epoch: switch if that is still the redis epoch. */
static void trigger(struct gate_mode_ctl *c, uint64_t epoch, const char *why)
{
	if (c->s.mode != GATE_MODE_REDIS || epoch != c->s.epoch || c->want_switch)
		return;
	MLOG(LOG_WARN, "%s in redis mode at epoch %" PRIu64, why, epoch);
	c->want_switch = true;
	c->stats.triggers++;
	evaluate(c);
}

/* Up on a new run_id in redis mode. Either the server changed under this epoch (a restart or a
 * failover that may have lost slot records: every worker connected meanwhile saw its connection
 * go down and asked for the switch), or this worker's connection was down across the epochs and
 * comes back to the server the reconciler rebuilt for this one (the way back wrote {sys}:gen on
 * it and committed that generation and the server's run_id with the epoch). Not usable until it
 * is settled like a GATE_ELOST: the mode, its committed generation and run_id read again from
 * PostgreSQL (a switch committed meanwhile is seen), then {sys}:gen from this server; exactly
 * the committed generation on exactly the committed server is adopted, anything else (missing,
 * another, a stale reconciler's, the committed generation on a restarted or promoted server)
 * switches (gen_cb). */
static void new_server(struct gate_mode_ctl *c)
{
	struct gate_mode_state old = c->s;

	if (c->s.mode != GATE_MODE_REDIS || c->want_switch || c->s.switching)
		return;
	MLOG(LOG_WARN,
	     "Redis up on a new server (run_id) in redis mode at epoch %" PRIu64
	     ": checking its generation",
	     c->s.epoch);
	c->s.usable = false;
	c->committed_epoch = 0; /* read the mode and the committed generation again */
	changed(c, old);
	evaluate(c);
}

void gate_mode_redis_event(struct gate_mode_ctl *c, const struct redis_conn_event *ev)
{
	if (c->closing)
		return;
	if (ev->type == REDIS_CONN_UP) {
		c->conn_up = true;
		c->up_waiting = false;
	} else if (ev->type == REDIS_CONN_DOWN) {
		c->conn_up = false;
	}
	if (ev->type == REDIS_CONN_DOWN) {
		trigger(c, c->s.epoch, "Redis connection down");
	} else if (ev->type == REDIS_CONN_UP && ev->new_server) {
		new_server(c);
	} else if (ev->type == REDIS_CONN_UP && c->s.mode == GATE_MODE_REDIS && !c->s.usable) {
		evaluate(c);
	}
}

void gate_mode_report(struct gate_mode_ctl *c, uint64_t epoch, int status)
{
	struct gate_mode_state old = c->s;

	if (c->closing)
		return;
	if (status == -ETIMEDOUT || status == -ENOTCONN || status == -ECONNRESET) {
		trigger(c, epoch, "Redis unreachable");
	} else if (status == GATE_ELOST && c->s.mode == GATE_MODE_REDIS && epoch == c->s.epoch &&
		   c->s.usable) {
		/* Adopt a newer generation of this epoch, or switch (gen_cb decides). */
		c->s.usable = false;
		changed(c, old);
		read_gen(c);
	}
}

void gate_mode_notify(struct gate_mode_ctl *c, const char *payload)
{
	struct gate_pg_mode m;

	if (c->closing || !payload || gate_pg_parse_mode(payload, &m))
		return;
	set_mode(c, m);
}

void gate_mode_pg_up(struct gate_mode_ctl *c)
{
	if (!c->closing && c->started)
		read_mode(c);
}

static void timer_closed_cb(uv_handle_t *h)
{
	struct gate_mode_ctl *c = h->data;

	c->timer_closed = true;
	maybe_free(c);
}

void gate_mode_close(struct gate_mode_ctl *c)
{
	if (!c)
		return;
	c->closing = true;
	uv_close((uv_handle_t *)&c->timer, timer_closed_cb);
}
