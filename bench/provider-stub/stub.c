/* The provider stub's HTTP side: the dial (idempotency, duplicates, throttling, faults), the
 * ground truth, the control routes, and the stub's lifetime. Timelines and events are in
 * stub_events.c. */
#include "stub_int.h"

#include "http_buf.h"
#include "json_strict.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define MAX_KEY 200

void stub_config_defaults(struct stub_config *c)
{
	memset(c, 0, sizeof(*c));
	c->host = "127.0.0.1";
	c->seed = 1;
	c->weights[STUB_COMPLETED] = 70;
	c->weights[STUB_NO_ANSWER] = 15;
	c->weights[STUB_BUSY] = 5;
	c->weights[STUB_FAILED] = 5;
	c->weights[STUB_CANCELED] = 5;
	c->dur_min_ms = 1000;
	c->dur_max_ms = 1000;
	c->ring_ms = 20;
	c->secret = "stub-secret";
	c->reorder_ms = 200;
	c->event_retries = 3;
	c->event_timeout_ms = 2000;
	c->defaults.window_ms = 1000;
	c->defaults.fail_status = 503;
}

uint64_t stub_draw(const struct stub *s, const char *key, unsigned purpose)
{
	uint64_t z = map_hash(key) ^ (s->cfg.seed * 0x9E3779B97F4A7C15ULL) ^
		     ((uint64_t)purpose * 0xBF58476D1CE4E5B9ULL);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return z ^ (z >> 31);
}

/* ---- accounting ---- */

struct stub_org *stub_org_get(struct stub *s, const char *id)
{
	struct stub_org *o = map_get(&s->orgs, id);

	if (o || !(o = calloc(1, sizeof(*o))))
		return o;
	o->win = -1;
	if (map_put(&s->orgs, id, o)) {
		free(o);
		return NULL;
	}
	return o;
}

static struct stub_campaign *campaign_get(struct stub *s, const char *id)
{
	struct stub_campaign *c = map_get(&s->campaigns, id);

	if (c || !(c = calloc(1, sizeof(*c))))
		return c;
	if (map_put(&s->campaigns, id, c)) {
		free(c);
		return NULL;
	}
	return c;
}

const struct stub_org_config *stub_org_cfg(struct stub *s, const char *org)
{
	struct stub_org *o = map_get(&s->orgs, org);

	return o && o->has_cfg ? &o->cfg : &s->cfg.defaults;
}

int stub_set_org(struct stub *s, const char *org, const struct stub_org_config *cfg)
{
	struct stub_org *o;

	if (strcmp(org, "*") == 0) {
		s->cfg.defaults = *cfg;
		return 0;
	}
	if (!(o = stub_org_get(s, org)))
		return -ENOMEM;
	o->cfg = *cfg;
	o->has_cfg = true;
	return 0;
}

#define MAX_OF(a, b) ((a) > (b) ? (a) : (b))

uint64_t stub_live_ms(uint64_t live_ms, uint64_t live_at, uint64_t live, uint64_t now)
{
	return live_ms + live * (now > live_at ? now - live_at : 0);
}

/* Brings an integral of live up to now, before live changes. */
static void live_advance(uint64_t *live_ms, uint64_t *live_at, uint64_t live, uint64_t now)
{
	*live_ms = stub_live_ms(*live_ms, *live_at, live, now);
	*live_at = now;
}

static void call_live(struct stub *s, struct stub_call *c, int d)
{
	struct stub_org *o = stub_org_get(s, c->org);
	struct stub_campaign *k = campaign_get(s, c->campaign);
	uint64_t now = uv_now(s->loop);

	if (d > 0 && !s->first_dial_at)
		s->first_dial_at = now;
	live_advance(&s->live_ms, &s->live_at, s->live, now);
	if (o && o->handoff.lines) /* the clock only when measured: the hot path stays cheap */
		stub_handoff_note(&o->handoff, o->live, d, uv_hrtime());
	if (o)
		live_advance(&o->live_ms, &o->live_at, o->live, now);
	if (k)
		live_advance(&k->live_ms, &k->live_at, k->live, now);
	s->live += (uint64_t)(int64_t)d;
	s->max_live = MAX_OF(s->max_live, s->live);
	if (o) {
		o->live += (uint64_t)(int64_t)d;
		o->max_live = MAX_OF(o->max_live, o->live);
	}
	if (k) {
		k->live += (uint64_t)(int64_t)d;
		k->max_live = MAX_OF(k->max_live, k->live);
	}
}

void stub_call_ended(struct stub_call *c)
{
	if (!c->live)
		return;
	c->live = false;
	call_live(c->stub, c, -1);
	c->stub->outcomes[c->outcome]++;
}

/* ---- throttling ---- */

bool stub_window_allows(struct stub_org *o, const struct stub_org_config *cfg, uint64_t now,
			uint64_t *retry_s)
{
	uint64_t w = cfg->window_ms ? cfg->window_ms : 1000;
	int64_t idx = (int64_t)(now / w);
	uint64_t elapsed = now - (uint64_t)idx * w;
	bool ok;

	if (!cfg->limit)
		return true;
	if (idx != o->win) {
		o->prev = idx == o->win + 1 ? o->cur : 0;
		o->cur = 0;
		o->win = idx;
	}
	if (cfg->window == STUB_WINDOW_SLIDING)
		ok = (uint64_t)o->prev * (w - elapsed) + (uint64_t)o->cur * w <
		     (uint64_t)cfg->limit * w;
	else
		ok = o->cur < cfg->limit;
	if (ok) {
		o->cur++;
		return true;
	}
	*retry_s = (w - elapsed + 999) / 1000;
	if (*retry_s == 0)
		*retry_s = 1;
	return false;
}

/* ---- answering a dial ---- */

static void on_delayed_closed(uv_handle_t *h)
{
	struct stub_delayed *d = h->data;
	struct stub *s = d->stub;

	free(d->body);
	free(d);
	stub_handle_closed(s);
}

static void delayed_fire(struct stub_delayed *d)
{
	struct stub *s = d->stub;

	if (d->retry_after[0])
		http_response_header(d->req, "Retry-After", d->retry_after);
	http_respond(d->req, d->status, "application/json", d->body, strlen(d->body));
	list_del(&d->node);
	s->closing_handles++;
	uv_close((uv_handle_t *)&d->timer, on_delayed_closed);
}

static void on_delayed(uv_timer_t *t)
{
	delayed_fire(t->data);
}

/* Answers now, or after slow_ms when slow. */
static void answer(struct stub *s, struct http_request *req, uint64_t slow_ms, int status,
		   const char *body, const char *retry_after)
{
	struct stub_delayed *d;

	if (slow_ms && (d = calloc(1, sizeof(*d))) && (d->body = strdup(body))) {
		d->stub = s;
		d->req = req;
		d->status = status;
		if (retry_after)
			snprintf(d->retry_after, sizeof(d->retry_after), "%s", retry_after);
		uv_timer_init(s->loop, &d->timer);
		d->timer.data = d;
		list_add_tail(&s->delayed, &d->node);
		uv_timer_start(&d->timer, on_delayed, slow_ms, 0);
		return;
	}
	if (slow_ms && d)
		free(d);
	if (retry_after)
		http_response_header(req, "Retry-After", retry_after);
	http_respond(req, status, "application/json", body, strlen(body));
}

static void refuse(struct http_request *req, int status, const char *code, const char *msg)
{
	http_respond_error(req, status, code, msg);
}

static void throttled(struct stub *s, struct http_request *req, struct stub_org *o,
		      const struct stub_org_config *cfg, uint64_t retry_s, uint64_t slow)
{
	char ra[64];
	static const char body[] = "{\"error\":\"throttled\",\"message\":\"Rate limit exceeded for "
				   "this organization.\"}";

	if (cfg->throttle == STUB_THROTTLE_BODY) {
		s->throttled_body++;
		o->throttled_body++;
		answer(s, req, slow, 200, body, NULL);
		return;
	}
	s->throttled_429++;
	o->throttled_429++;
	if (cfg->throttle == STUB_THROTTLE_NO_HEADER) {
		answer(s, req, slow, 429, body, NULL);
		return;
	}
	if (cfg->throttle == STUB_THROTTLE_RETRY_AFTER_DATE) {
		time_t t = time(NULL) + (time_t)retry_s;
		struct tm tm;
		gmtime_r(&t, &tm);
		strftime(ra, sizeof(ra), "%a, %d %b %Y %H:%M:%S GMT", &tm);
	} else {
		snprintf(ra, sizeof(ra), "%llu", (unsigned long long)retry_s);
	}
	answer(s, req, slow, 429, body, ra);
}

/* ---- the dial ---- */

struct dial {
	const char *key, *to, *org, *agent, *campaign, *contact; /* borrowed from the body */
	const char *callback; /* the checked callback URL: borrowed from the stub's cache */
	int attempt;
};

static bool valid_key(const char *k)
{
	size_t n = k ? strlen(k) : 0;

	if (n == 0 || n > MAX_KEY)
		return false;
	for (; *k; k++)
		if (*k < 0x21 || *k > 0x7e || *k == '"' || *k == '\\')
			return false;
	return true;
}

static bool e164(const char *p)
{
	size_t n = 0;

	if (!p || *p++ != '+' || *p == '0')
		return false;
	for (; *p; p++, n++)
		if (*p < '0' || *p > '9')
			return false;
	return n >= 8 && n <= 15;
}

/* A host the stub may post to: an IPv4 literal in 127.0.0.0/8, the IPv6 literal ::1 (as
 * libcurl returns it, in brackets), or "localhost". */
static bool loopback_literal(const char *host)
{
	struct in_addr a4;
	struct in6_addr a6;
	char six[INET6_ADDRSTRLEN];
	size_t n = strlen(host);

	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	if (n > 2 && n - 2 < sizeof(six) && host[0] == '[' && host[n - 1] == ']') {
		memcpy(six, host + 1, n - 2);
		six[n - 2] = '\0';
		return inet_pton(AF_INET6, six, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6);
	}
	return strcasecmp(host, "localhost") == 0;
}

/* The stub only ever talks to loopback. Parses u with libcurl's URL parser (the one that will
 * send the event, so both read the same host): http only, no user or password, a loopback
 * host. "localhost" is pinned to 127.0.0.1, so no resolver is asked. Returns the URL to post
 * to (malloc'ed), or NULL when u is not acceptable. */
static char *loopback_url(const char *u)
{
	CURLU *h = curl_url();
	char *scheme = NULL, *host = NULL, *user = NULL, *pw = NULL, *url = NULL, *out = NULL;

	if (!h || !u || curl_url_set(h, CURLUPART_URL, u, 0) != CURLUE_OK)
		goto done;
	if (curl_url_get(h, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
	    strcmp(scheme, "http") != 0)
		goto done;
	if (curl_url_get(h, CURLUPART_USER, &user, 0) != CURLUE_NO_USER ||
	    curl_url_get(h, CURLUPART_PASSWORD, &pw, 0) != CURLUE_NO_PASSWORD)
		goto done;
	if (curl_url_get(h, CURLUPART_HOST, &host, 0) != CURLUE_OK || !loopback_literal(host))
		goto done;
	if (strcasecmp(host, "localhost") == 0 &&
	    curl_url_set(h, CURLUPART_HOST, "127.0.0.1", 0) != CURLUE_OK)
		goto done;
	if (curl_url_get(h, CURLUPART_URL, &url, 0) == CURLUE_OK)
		out = strdup(url);
done:
	curl_free(url);
	curl_free(scheme);
	curl_free(host);
	curl_free(user);
	curl_free(pw);
	curl_url_cleanup(h);
	return out;
}

static const char *str_field(const cJSON *j, const char *name, bool nullable, bool *ok)
{
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(j, name);

	if (cJSON_IsString(f) && f->valuestring[0] && valid_key(f->valuestring))
		return f->valuestring;
	if (nullable && (!f || cJSON_IsNull(f)))
		return NULL;
	*ok = false;
	return NULL;
}

/* Reads the dial body; returns NULL or the name of the first bad field. */
/* Returns the checked form of callback URL u (see loopback_url), or NULL. The last accepted
 * URL is cached (senders use one callback URL), so the parse is not paid on every dial; the
 * result is borrowed until the next call. */
static const char *checked_callback(struct stub *s, const char *u)
{
	char *in, *out;

	if (s->cb_in && strcmp(u, s->cb_in) == 0)
		return s->cb_out;
	if (!(out = loopback_url(u)))
		return NULL;
	if (!(in = strdup(u))) {
		free(out);
		return NULL;
	}
	free(s->cb_in);
	free(s->cb_out);
	s->cb_in = in;
	s->cb_out = out;
	return out;
}

static const char *dial_parse(struct stub *s, const cJSON *j, struct dial *d)
{
	bool ok = true;
	const cJSON *to = cJSON_GetObjectItemCaseSensitive(j, "to");

	if (!cJSON_IsString(to) || !e164(to->valuestring))
		return "to";
	d->to = to->valuestring;
	d->org = str_field(j, "org_id", false, &ok);
	if (!ok)
		return "org_id";
	d->agent = str_field(j, "agent_id", true, &ok);
	if (!ok)
		return "agent_id";
	d->campaign = str_field(j, "campaign_id", true, &ok);
	if (!ok)
		return "campaign_id";
	d->contact = str_field(j, "contact_id", true, &ok);
	if (!ok)
		return "contact_id";
	int64_t attempt;
	char jerr[JSON_STRICT_ERR];
	if (json_strict_int(j, "attempt", 1, 1000000, &attempt, jerr, sizeof(jerr)))
		return "attempt";
	d->attempt = (int)attempt;
	const cJSON *cb = cJSON_GetObjectItemCaseSensitive(j, "callback_url");
	if (!cJSON_IsString(cb) || !(d->callback = checked_callback(s, cb->valuestring)))
		return "callback_url";
	return NULL;
}

static enum stub_outcome draw_outcome(struct stub *s, const char *key)
{
	uint64_t sum = 0, r;

	for (int i = 0; i < STUB_OUTCOMES; i++)
		sum += s->cfg.weights[i];
	if (!sum)
		return STUB_COMPLETED;
	r = stub_draw(s, key, 1) % sum;
	for (int i = 0; i < STUB_OUTCOMES; i++) {
		if (r < s->cfg.weights[i])
			return (enum stub_outcome)i;
		r -= s->cfg.weights[i];
	}
	return STUB_COMPLETED;
}

static void call_free(void *p)
{
	struct stub_call *c = p;

	free(c->key);
	free(c->call_id);
	free(c->org);
	free(c->campaign);
	free(c->callback_url);
	free(c);
}

/* Creates and registers the call for a new key. */
static struct stub_call *place(struct stub *s, const struct dial *d)
{
	struct stub_call *c = calloc(1, sizeof(*c));
	char id[32];

	if (!c)
		return NULL;
	snprintf(id, sizeof(id), "pc_%llu", (unsigned long long)++s->next_id);
	c->stub = s;
	c->key = strdup(d->key);
	c->call_id = strdup(id);
	c->org = strdup(d->org);
	c->campaign = strdup(d->campaign ? d->campaign : "-");
	c->callback_url = strdup(d->callback);
	if (!c->key || !c->call_id || !c->org || !c->campaign || !c->callback_url ||
	    map_put(&s->calls, d->key, c)) {
		call_free(c);
		return NULL;
	}
	map_put(&s->call_ids, c->call_id, c);
	c->outcome = draw_outcome(s, d->key);
	uint64_t span =
		s->cfg.dur_max_ms > s->cfg.dur_min_ms ? s->cfg.dur_max_ms - s->cfg.dur_min_ms : 0;
	c->duration_ms = s->cfg.dur_min_ms + (span ? stub_draw(s, d->key, 2) % (span + 1) : 0);
	c->held = s->cfg.hold;
	c->live = true;
	s->placed++;
	call_live(s, c, +1);
	struct stub_org *o = stub_org_get(s, c->org);
	struct stub_campaign *k = campaign_get(s, c->campaign);
	if (o)
		o->placed++;
	if (k)
		k->placed++;
	return c;
}

/* Counts a second key for the same (contact, attempt). */
static void note_attempt(struct stub *s, const struct dial *d)
{
	char k[2 * MAX_KEY + 16];
	const char *first;

	if (!d->contact)
		return;
	snprintf(k, sizeof(k), "%s|%d", d->contact, d->attempt);
	first = map_get(&s->attempts, k);
	if (!first) {
		char *dup = strdup(d->key);
		if (dup && map_put(&s->attempts, k, dup))
			free(dup);
	} else if (strcmp(first, d->key) != 0) {
		s->duplicates++;
	}
}

static unsigned key_try(struct stub *s, const char *key)
{
	uintptr_t n = (uintptr_t)map_get(&s->key_tries, key);

	map_put(&s->key_tries, key, (void *)(n + 1));
	return (unsigned)n;
}

/* After parsing: replay, forced status, throttling, faults, placement. */
static void dial(struct stub *s, struct http_request *req, const struct dial *d)
{
	const struct stub_org_config *cfg = stub_org_cfg(s, d->org);
	struct stub_org *o = stub_org_get(s, d->org);
	struct stub_call *c;
	uint64_t retry_s, slow;
	unsigned n;
	char body[64];

	if (!o) {
		refuse(req, 500, "internal", "Out of memory.");
		return;
	}
	o->requests++;
	/* A key seen before answers 200 with the same call id and places nothing (D0), whatever
	 * the window or the faults say; replays do not count against the window. */
	if ((c = map_get(&s->calls, d->key))) {
		s->replays++;
		snprintf(body, sizeof(body), "{\"call_id\":\"%s\"}", c->call_id);
		answer(s, req, 0, 200, body, NULL);
		return;
	}
	if (cfg->force_status) {
		s->rejected++;
		{
			refuse(req, cfg->force_status, "forced", "Forced answer (stub setting).");
			return;
		}
	}
	n = key_try(s, d->key);
	slow = stub_draw(s, d->key, 200 + n) % 100 < cfg->slow_pct ? cfg->slow_ms : 0;
	if (!stub_window_allows(o, cfg, uv_now(s->loop), &retry_s)) {
		throttled(s, req, o, cfg, retry_s, slow);
		return;
	}
	if (stub_draw(s, d->key, 100 + n) % 100 < cfg->fail_pct) {
		s->errors_5xx++;
		o->errors_5xx++;
		{
			answer(s, req, slow, cfg->fail_status,
			       "{\"error\":\"provider_error\",\"message\":\"Injected failure.\"}",
			       NULL);
			return;
		}
	}
	note_attempt(s, d);
	if (!(c = place(s, d))) {
		refuse(req, 500, "internal", "Out of memory.");
		return;
	}
	snprintf(body, sizeof(body), "{\"call_id\":\"%s\"}", c->call_id);
	if (n == 0 && stub_draw(s, d->key, 150) % 100 < cfg->fail_placed_pct) {
		s->errors_5xx++;
		o->errors_5xx++;
		stub_call_start(c, NULL, NULL);
		{
			answer(s, req, slow, cfg->fail_status,
			       "{\"error\":\"provider_error\",\"message\":\"Injected failure.\"}",
			       NULL);
			return;
		}
	}
	if (!slow && stub_draw(s, d->key, 300) % 100 < s->cfg.early_pct) {
		char *reply = strdup(body);
		if (reply) {
			stub_call_start(c, req, reply);
			return;
		}
	}
	stub_call_start(c, NULL, NULL);
	answer(s, req, slow, 201, body, NULL);
}

void stub_handle_dial(struct http_request *req, void *data)
{
	struct stub *s = data;
	const char *auth = http_request_header(req, "Authorization");
	struct dial d = { 0 };
	size_t len;
	const char *body = http_request_body(req, &len);
	cJSON *j;
	char msg[96 + JSON_STRICT_ERR], jerr[JSON_STRICT_ERR];

	s->requests++;
	if (s->closing) {
		refuse(req, 503, "closing", "The stub is shutting down.");
		return;
	}
	if (s->cfg.token &&
	    (!auth || strncmp(auth, "Bearer ", 7) != 0 || strcmp(auth + 7, s->cfg.token) != 0)) {
		s->rejected++;
		{
			refuse(req, 401, "unauthorized", "Missing or wrong bearer token.");
			return;
		}
	}
	d.key = http_request_header(req, "Idempotency-Key");
	if (!valid_key(d.key)) {
		s->rejected++;
		{
			refuse(req, 400, "missing_idempotency_key",
			       "An Idempotency-Key header of 1 to 200 printable characters is "
			       "required.");
			return;
		}
	}
	/* Strict (common/json_strict.h): trailing bytes, a NUL in a string or a key twice are a
	 * 400 naming the byte or field, as the API answers them. */
	if (!(j = json_strict_parse(body, len, jerr, sizeof(jerr))) || !cJSON_IsObject(j)) {
		cJSON_Delete(j);
		s->rejected++;
		snprintf(msg, sizeof(msg), "The body is not a JSON object%s%s.", j ? "" : ": ",
			 j ? "" : jerr);
		refuse(req, 400, "invalid_json", msg);
		return;
	}
	const char *bad = dial_parse(s, j, &d);
	if (bad) {
		s->rejected++;
		snprintf(msg, sizeof(msg), "Field %s is missing or invalid.", bad);
		refuse(req, 422, "invalid_field", msg);
	} else {
		dial(s, req, &d);
	}
	cJSON_Delete(j);
}

void stub_calls_free(struct stub *s)
{
	map_free(&s->calls, call_free);
}

void stub_delayed_flush(struct stub *s)
{
	while (!list_empty(&s->delayed))
		delayed_fire(list_entry(s->delayed.next, struct stub_delayed, node));
}
