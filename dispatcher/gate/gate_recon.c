/* The reconciler's Redis reads: slot records with Redis time, the system generation. See
 * gate_recon.h. */
#include "gate_recon.h"

#include "error.h"
#include "gate_int.h"
#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS_SCRIPT "gate_slots.lua"
#define ADD_SCRIPT   "gate_slot_add.lua"

extern const struct embedded_file gate_recon_lua[];
extern const size_t gate_recon_lua_count;

struct slots_req {
	gate_slots_cb cb;
	void *data;
	char org[GATE_ID_MAX + 1];
};

struct add_req {
	gate_slot_add_cb cb;
	void *data;
	char org[GATE_ID_MAX + 1];
};

struct gen_req {
	gate_gen_cb cb;
	void *data;
};

int gate_recon_scripts_register(struct redis_scripts *reg)
{
	int n = 0, rc;

	for (size_t i = 0; i < gate_recon_lua_count; i++) {
		if (strcmp(gate_recon_lua[i].name, SLOTS_SCRIPT) != 0 &&
		    strcmp(gate_recon_lua[i].name, ADD_SCRIPT) != 0)
			continue;
		rc = redis_scripts_add(reg, &gate_recon_lua[i], REDIS_SCRIPT_GUARDED, NULL);
		if (rc)
			return rc;
		n++;
	}
	return n == 2 ? 0 : -ENOENT;
}

static int copy_id(char *dst, const char *s, size_t n)
{
	if (n > GATE_ID_MAX)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '-' || (c == '*' && n == 1)))
			return -EINVAL;
	}
	memcpy(dst, s, n);
	dst[n] = '\0';
	return 0;
}

int gate_slot_parse(const char *call, const char *value, size_t len, char *campaign, char *agent,
		    struct gate_slot_record *out)
{
	const char *end = value + len, *p1, *p2;
	uint64_t t = 0;

	if (!call || !value || !(p1 = memchr(value, '|', len)) ||
	    !(p2 = memchr(p1 + 1, '|', (size_t)(end - p1 - 1))) || p2 + 1 == end)
		return -EINVAL;
	if (copy_id(campaign, value, (size_t)(p1 - value)) ||
	    copy_id(agent, p1 + 1, (size_t)(p2 - p1 - 1)) || !campaign[0])
		return -EINVAL;
	for (const char *p = p2 + 1; p < end; p++) {
		if (*p < '0' || *p > '9' || t > (UINT64_MAX - 9) / 10)
			return -EINVAL;
		t = t * 10 + (uint64_t)(*p - '0');
	}
	out->call = call;
	out->campaign = strcmp(campaign, "*") == 0 ? NULL : campaign;
	out->agent = agent[0] ? agent : NULL;
	out->taken_ms = t;
	return 0;
}

/* Parses the script's reply into s (records, ids and their buffers in one allocation *mem). */
static int parse_slots(const struct slots_req *req, const redisReply *r, struct gate_slots *s,
		       void **mem)
{
	size_t n, per = sizeof(struct gate_slot_record) + 3 * (GATE_ID_MAX + 1);
	struct gate_slot_record *rec;
	char *buf;

	if (r->type == REDIS_REPLY_ERROR)
		return redis_reply_is_stale_generation(r) ? GATE_ELOST : DSP_EREDIS;
	if (r->type != REDIS_REPLY_ARRAY || r->elements % 2 != 1 ||
	    r->element[0]->type != REDIS_REPLY_INTEGER || r->element[0]->integer < 0)
		return DSP_EREDIS;
	n = r->elements / 2;
	*mem = malloc(n ? n * per : 1);
	if (!*mem)
		return -ENOMEM;
	rec = *mem;
	buf = (char *)(rec + n);
	for (size_t i = 0; i < n; i++) {
		const redisReply *k = r->element[1 + 2 * i], *v = r->element[2 + 2 * i];
		char *call = buf + i * 3 * (GATE_ID_MAX + 1);

		if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING ||
		    copy_id(call, k->str, k->len) ||
		    gate_slot_parse(call, v->str, v->len, call + GATE_ID_MAX + 1,
				    call + 2 * (GATE_ID_MAX + 1), &rec[i])) {
			LOG_AT(LOG_ERROR, LOG_GATE, (&(const struct log_ids){ .org = req->org }),
			       "gate slots: malformed slot record");
			return DSP_EREDIS;
		}
	}
	s->now_ms = (uint64_t)r->element[0]->integer;
	s->records = rec;
	s->n = (uint32_t)n;
	return 0;
}

static void slots_reply_cb(struct redis_conn *conn, int status, redisReply *reply, void *data)
{
	struct slots_req *req = data;
	struct gate_slots s = { 0 };
	void *mem = NULL;

	(void)conn;
	if (!status)
		status = parse_slots(req, reply, &s, &mem);
	req->cb(status, status ? NULL : &s, req->data);
	free(mem);
	free(req);
}

int gate_slots_read(struct gate *g, const struct redis_scripts *reg, const char *org,
		    gate_slots_cb cb, void *data)
{
	const struct redis_script *script;
	char key_gen[96], key_slots[96];
	const char *argv[3];
	struct slots_req *req;
	int rc;

	if (!g || !reg || !cb || !(script = redis_scripts_find(reg, SLOTS_SCRIPT)) ||
	    gate_org_key(org, "gen", key_gen, sizeof(key_gen)) < 0 ||
	    gate_org_key(org, "slots", key_slots, sizeof(key_slots)) < 0)
		return -EINVAL;
	req = calloc(1, sizeof(*req));
	if (!req)
		return -ENOMEM;
	req->cb = cb;
	req->data = data;
	snprintf(req->org, sizeof(req->org), "%s", org);
	argv[0] = key_gen;
	argv[1] = key_slots;
	argv[2] = g->gen;
	rc = redis_conn_evalsha(g->conn, script, slots_reply_cb, req, 3, argv, NULL);
	if (rc)
		free(req);
	return rc;
}

static void add_reply_cb(struct redis_conn *conn, int status, redisReply *reply, void *data)
{
	struct add_req *req = data;
	bool added = false;

	(void)conn;
	if (!status && reply->type == REDIS_REPLY_ERROR)
		status = redis_reply_is_stale_generation(reply) ? GATE_ELOST : DSP_EREDIS;
	else if (!status && (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
			     reply->element[0]->type != REDIS_REPLY_INTEGER ||
			     reply->element[0]->integer < 0 || reply->element[0]->integer > 1))
		status = DSP_EREDIS;
	if (status == DSP_EREDIS)
		LOG_AT(LOG_ERROR, LOG_GATE, (&(const struct log_ids){ .org = req->org }),
		       "gate slot add: %s",
		       reply && reply->type == REDIS_REPLY_ERROR ? reply->str : "malformed reply");
	if (!status)
		added = reply->element[0]->integer == 1;
	req->cb(status, added, req->data);
	free(req);
}

int gate_slot_add(struct gate *g, const struct redis_scripts *reg, const char *org,
		  const struct gate_slot_record *rec, gate_slot_add_cb cb, void *data)
{
	const struct redis_script *script;
	char key_gen[96], key_state[96], key_slots[96], key_wc[96], taken[24], id[GATE_ID_MAX + 1];
	const char *argv[11];
	struct add_req *req;
	int rc;

	if (!g || !reg || !cb || !rec || !rec->call ||
	    !(script = redis_scripts_find(reg, ADD_SCRIPT)) ||
	    copy_id(id, rec->call, strlen(rec->call)) || !id[0] || strcmp(id, "*") == 0 ||
	    (rec->campaign && (copy_id(id, rec->campaign, strlen(rec->campaign)) || !id[0] ||
			       strcmp(id, "*") == 0)) ||
	    (rec->agent && (copy_id(id, rec->agent, strlen(rec->agent)) || strcmp(id, "*") == 0)) ||
	    gate_org_key(org, "gen", key_gen, sizeof(key_gen)) < 0 ||
	    gate_org_key(org, "state", key_state, sizeof(key_state)) < 0 ||
	    gate_org_key(org, "slots", key_slots, sizeof(key_slots)) < 0 ||
	    gate_org_key(org, "wc", key_wc, sizeof(key_wc)) < 0)
		return -EINVAL;
	req = calloc(1, sizeof(*req));
	if (!req)
		return -ENOMEM;
	req->cb = cb;
	req->data = data;
	snprintf(req->org, sizeof(req->org), "%s", org);
	snprintf(taken, sizeof(taken), "%llu", (unsigned long long)rec->taken_ms);
	argv[0] = key_gen;
	argv[1] = key_state;
	argv[2] = key_slots;
	argv[3] = GATE_SYS_STATE_KEY;
	argv[4] = key_wc;
	argv[5] = GATE_SYS_GEN_KEY;
	argv[6] = g->gen;
	argv[7] = rec->call;
	argv[8] = rec->campaign ? rec->campaign : "*";
	argv[9] = rec->agent ? rec->agent : "";
	argv[10] = taken;
	rc = redis_conn_evalsha(g->conn, script, add_reply_cb, req, 11, argv, NULL);
	if (rc)
		free(req);
	return rc;
}

static void gen_reply_cb(struct redis_conn *conn, int status, redisReply *reply, void *data)
{
	struct gen_req *req = data;

	(void)conn;
	if (!status && reply->type != REDIS_REPLY_STRING && reply->type != REDIS_REPLY_NIL)
		status = DSP_EREDIS;
	if (status)
		req->cb(status, NULL, 0, req->data);
	else if (reply->type == REDIS_REPLY_NIL)
		req->cb(0, NULL, 0, req->data);
	else
		req->cb(0, reply->str, reply->len, req->data);
	free(req);
}

int gate_read_generation(struct gate *g, gate_gen_cb cb, void *data)
{
	const char *argv[] = { "GET", GATE_SYS_GEN_KEY };
	struct gen_req *req;
	int rc;

	if (!g || !cb)
		return -EINVAL;
	req = malloc(sizeof(*req));
	if (!req)
		return -ENOMEM;
	req->cb = cb;
	req->data = data;
	rc = redis_conn_command_argv(g->conn, gen_reply_cb, req, 2, argv, NULL);
	if (rc)
		free(req);
	return rc;
}

const char *gate_server_run_id(const struct gate *g)
{
	return g ? redis_conn_run_id(g->conn) : "";
}
