/* The dialer's fleet-wide lanes: the token take before each send, the transitions written after
 * each answer (dial.h, lane_fleet.h; dispatcher/worker/README.md, "Fleet-wide lanes"). */
#include "dial.h"
#include "dial_int.h"

#include "error.h"
#include "log.h"

#include <stdlib.h>

/* ---- fleet-wide lanes (lane_fleet.h) ---- */

static void fleet_unreachable(struct dlane *l, int64_t now, int rc)
{
	struct dial *d = l->d;

	l->local_until_ms = now + LOCAL_MS;
	if (!d->fleet_down)
		log_warn(
			LOG_DIAL,
			"lanes: Redis did not answer a token take (%s): each lane is paced by this "
			"worker's own bucket until it does",
			dsp_strerror(rc));
	d->fleet_down = true;
}

/* Another worker has the lane stopped (401/403): as a local stop, without the alert (that
 * worker raised it), until the fleet's stop time. */
static void fleet_stopped(struct dlane *l, uint64_t wait)
{
	struct dial *d = l->d;

	if (!l->lane.stopped) {
		d->st.fleet_stops++;
		log_warn(LOG_DIAL,
			 "lane %s is stopped fleet-wide (401/403); probing again in %llu ms",
			 l->name, (unsigned long long)wait);
	}
	l->lane.stopped = true;
	uv_timer_start(&l->probe, dial_probe_cb, wait ? wait : 1, 0);
	dial_stop_lane_calls(l, DIAL_STOPPED);
}

static void fleet_taken(const struct lane_take *t, void *data)
{
	struct dlane *l = data;
	struct dial *d = l->d;
	int64_t now = dial_now_ms(d);

	l->taking = false;
	d->handles--;
	if (l->closing) {
		if (--l->open_handles == 0)
			free(l);
		dial_maybe_done(d);
		return;
	}
	if (t->status) {
		fleet_unreachable(l, now, t->status);
	} else {
		if (d->fleet_down)
			log_info(LOG_DIAL,
				 "lanes: Redis answers again: lanes are fleet-wide again");
		d->fleet_down = false;
		l->granted = t->granted;
		if (t->what == LANE_FLEET_PROBE_STOP || t->what == LANE_FLEET_PROBE_OPEN) {
			l->fprobe = t->what;
			l->fprobe_until = t->probe_until_ms;
		} else if (t->what == LANE_FLEET_STOPPED) {
			fleet_stopped(l, t->wait_ms);
		} else if (t->wait_ms) {
			l->next_take_ms = now + (int64_t)t->wait_ms;
		}
	}
	dial_lane_pump(l);
	dial_maybe_done(d);
}

static void fleet_mark(struct dlane *l, enum lane_fleet_gate gate, uint64_t ms)
{
	if (!lane_fleet_mark(l->d->fleet, l->org, gate, ms, NULL, NULL))
		l->d->st.fleet_marks++;
}

static void fleet_clear(struct dcall *c, enum lane_fleet_gate gate)
{
	if (!lane_fleet_clear(c->d->fleet, c->org, gate, c->fprobe_until, NULL, NULL))
		c->d->st.fleet_marks++;
}

/* After lane_record(): writes what this answer changed for the fleet. opened: the circuit's
 * open count before the answer. A probe's HTTP answer ends its stop (anything but 401/403) or
 * its open circuit (anything but a refusal); a probe without an answer lets its time run out. */
void dial_fleet_record(struct dcall *c, int status, const struct retry_decision *dec,
		       uint64_t opened)
{
	struct dlane *l = c->lane;
	int64_t now = dial_now_ms(c->d);
	uint64_t w;

	if (dec->stop_lane)
		fleet_mark(l, LANE_FLEET_GATE_STOP, c->d->o.lane_probe_ms);
	else if (c->fprobe == LANE_FLEET_PROBE_STOP && status)
		fleet_clear(c, LANE_FLEET_GATE_STOP);
	if (dec->park_lane && (w = lane_park_wait(&l->lane.park, now)))
		fleet_mark(l, LANE_FLEET_GATE_PARK, w);
	if (l->lane.circuit.opened != opened && (w = lane_circuit_wait(&l->lane.circuit, now)))
		fleet_mark(l, LANE_FLEET_GATE_OPEN, w);
	else if (c->fprobe == LANE_FLEET_PROBE_OPEN && dec->circuit_refusal)
		fleet_mark(l, LANE_FLEET_GATE_OPEN, l->lane.circuit.open_ms);
	else if (c->fprobe == LANE_FLEET_PROBE_OPEN && status)
		fleet_clear(c, LANE_FLEET_GATE_OPEN);
	c->fprobe = LANE_FLEET_GO;
}

/* A fleet token for one send now: one left from the last take, or, while Redis does not
 * answer, one of this worker's own bucket. Otherwise false: a take was sent (its answer pumps
 * again) or *wait is set. */
bool dial_fleet_token(struct dlane *l, int64_t now, uint64_t *wait)
{
	struct dial *d = l->d;
	uint32_t n = 0;
	int rc;

	*wait = 0;
	if (l->granted) {
		l->granted--;
		return true;
	}
	if (now >= l->local_until_ms) {
		if (now < l->next_take_ms) {
			*wait = (uint64_t)(l->next_take_ms - now);
			return false;
		}
		for (struct list_node *m = l->queue.next; m != &l->queue && n < TAKE_MAX;
		     m = m->next)
			n++;
		rc = lane_fleet_take(d->fleet, l->org, d->o.lane.rate_per_s, d->o.lane.burst, n,
				     fleet_taken, l);
		if (!rc) {
			l->taking = true;
			d->handles++; /* the answer comes even on close (-ECANCELED) */
			d->st.fleet_takes++;
			return false;
		}
		fleet_unreachable(l, now, rc);
	}
	if ((*wait = token_bucket_take(&l->lane.bucket, now)))
		return false;
	d->st.fleet_local++;
	return true;
}
