/* Lua scripts through the Redis layer: the registry's header rules, loading on every connect
 * before up, EVALSHA, the one retry after NOSCRIPT (SCRIPT FLUSH, pipelined calls), a server
 * restart, a script the server refuses, the generation guard, and the per-script call counts. */
#include "error.h"
#include "fixture.h"
#include "redis_conn.h"
#include "redis_script.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

/* The .lua files of tests/integration/lua, embedded by tests/integration/meson.build. */
extern const struct embedded_file redis_test_lua[];
extern const size_t redis_test_lua_count;

static struct embedded svc;

struct probe {
	int ups, refusals;
	int refusal_status;
	char refusal[512];
	bool new_server;
	struct redis_conn *conn;
	const struct redis_script *on_up; /* called from the up callback when set */
	int calls;
	int status;
	int type;
	long long integer;
	char str[256];
	size_t len;
	long long seen[128]; /* integers answered, in callback order */
};

static const struct embedded_file *lua(const char *name)
{
	for (size_t i = 0; i < redis_test_lua_count; i++) {
		if (strcmp(redis_test_lua[i].name, name) == 0)
			return &redis_test_lua[i];
	}
	fail_msg("no embedded %s", name);
	return NULL;
}

static void reply_cb(struct redis_conn *conn, int status, redisReply *r, void *data)
{
	struct probe *p = data;

	p->status = status;
	p->type = r ? r->type : -1;
	p->integer = r && r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
	p->len = r && r->str ? r->len : 0;
	if (r && r->str)
		memcpy(p->str, r->str, r->len < sizeof(p->str) ? r->len + 1 : sizeof(p->str));
	else
		p->str[0] = '\0';
	if ((size_t)p->calls < sizeof(p->seen) / sizeof(p->seen[0]))
		p->seen[p->calls] = p->integer;
	p->calls++;
}

static void event_cb(struct redis_conn *conn, const struct redis_conn_event *ev, void *data)
{
	struct probe *p = data;
	const char *argv[] = { "t:early" };

	if (ev->type == REDIS_CONN_REFUSED) {
		p->refusals++;
		p->refusal_status = ev->status;
		snprintf(p->refusal, sizeof(p->refusal), "%s", ev->message);
	} else if (ev->type == REDIS_CONN_UP) {
		p->ups++;
		p->new_server = ev->new_server;
		if (p->on_up) /* the earliest moment the owner can call a script */
			assert_int_equal(
				redis_conn_evalsha(conn, p->on_up, reply_cb, p, 1, argv, NULL), 0);
	}
}

static bool is_up(void *arg)
{
	return redis_conn_is_up(arg);
}

static struct redis_conn *open_conn(uv_loop_t *loop, struct redis_scripts *reg, struct probe *p)
{
	struct redis_conn_options o = {
		.url = svc.redis_url,
		.name = "scripts",
		.connect_timeout_ms = 5000,
		.command_timeout_ms = 60000,
		.reconnect_min_ms = 10,
		.reconnect_max_ms = 100,
		.scripts = reg,
		.event_cb = event_cb,
		.data = p,
	};
	struct redis_conn *c;

	assert_int_equal(redis_conn_new(loop, &o, &c), 0);
	assert_int_equal(redis_conn_start(c), 0);
	p->conn = c;
	return c;
}

/* Runs one command (NULL-terminated argv) and waits for its answer. */
static int command(uv_loop_t *loop, struct redis_conn *c, struct probe *p, ...)
{
	const char *argv[8];
	int argc = 0, want = p->calls + 1;
	va_list ap;

	va_start(ap, p);
	for (const char *a = va_arg(ap, const char *); a && argc < 8; a = va_arg(ap, const char *))
		argv[argc++] = a;
	va_end(ap);
	assert_int_equal(redis_conn_command_argv(c, reply_cb, p, argc, argv, NULL), 0);
	fixture_run_until_count(loop, &p->calls, want, 60000);
	return p->status;
}

static int call(uv_loop_t *loop, struct redis_conn *c, const struct redis_script *s,
		struct probe *p, int argc, const char **argv)
{
	int want = p->calls + 1;

	assert_int_equal(redis_conn_evalsha(c, s, reply_cb, p, argc, argv, NULL), 0);
	fixture_run_until_count(loop, &p->calls, want, 60000);
	return p->status;
}

static struct redis_scripts *registry(void)
{
	struct redis_scripts *reg;

	assert_int_equal(redis_scripts_new(&reg), 0);
	assert_int_equal(redis_scripts_add(reg, lua("incr.lua"), 0, NULL), 0);
	assert_int_equal(redis_scripts_add(reg, lua("echo.lua"), 0, NULL), 0);
	assert_int_equal(
		redis_scripts_add(reg, lua("guarded_incr.lua"), REDIS_SCRIPT_GUARDED, NULL), 0);
	return reg;
}

static int add_text(struct redis_scripts *reg, const char *text, unsigned flags)
{
	static int n;
	char name[32];
	struct embedded_file f = { name, text, strlen(text) };

	snprintf(name, sizeof(name), "inline%d.lua", n++);
	return redis_scripts_add(reg, &f, flags, NULL);
}

static void header_rules(void **state)
{
	struct redis_scripts *reg;
	const struct redis_script *s;

	assert_int_equal(redis_scripts_new(&reg), 0);
	assert_int_equal(add_text(reg, "return 1\n", 0), -EINVAL);	       /* no header */
	assert_int_equal(add_text(reg, "-- KEYS: a\nreturn 1\n", 0), -EINVAL); /* no ARGV */
	assert_int_equal(add_text(reg, "-- ARGV:\n\n-- KEYS:\nreturn 1\n", 0), -EINVAL); /* gap */
	assert_int_equal(add_text(reg, "-- KEYS: 1a\n-- ARGV:\n", 0), -EINVAL);
	assert_int_equal(add_text(reg, "-- KEYS: a ...\n-- ARGV:\n", 0), -EINVAL);
	assert_int_equal(add_text(reg, "-- KEYS:\n-- ARGV: ... a\n", 0), -EINVAL);
	assert_int_equal(add_text(reg, "-- KEYS: a\n-- KEYS: b\n-- ARGV:\n", 0), -EINVAL);
	assert_int_equal(add_text(reg, "-- KEYS: a, b\n-- ARGV:\n", 0), -EINVAL);
	assert_int_equal(add_text(reg, "-- KEYS: counter\n-- ARGV: gen\n", REDIS_SCRIPT_GUARDED),
			 -EINVAL); /* a guarded script names gen_key and gen first */
	assert_int_equal(redis_scripts_count(reg), 0);

	/* The SHA-1 is Redis' (of the exact text); the counts come from the header. */
	assert_int_equal(add_text(reg, "-- KEYS:\n-- ARGV:\nreturn 1\n", 0), 0);
	s = redis_scripts_at(reg, 0);
	assert_string_equal(redis_script_sha(s), "0f1dd4862a6b55664bafd2b31e8711783ae6a7ae");
	assert_int_equal(redis_scripts_add(reg, lua("echo.lua"), 0, &s), 0);
	assert_ptr_equal(redis_scripts_find(reg, "echo.lua"), s);
	assert_int_equal(redis_scripts_add(reg, lua("echo.lua"), 0, NULL), -EEXIST);
	assert_int_equal(redis_script_numkeys(s), 1);
	assert_false(redis_script_fits(s, 1)); /* key + first at least */
	assert_true(redis_script_fits(s, 2));
	assert_true(redis_script_fits(s, 9));

	/* A guarded script starts with the guard; its own text follows unchanged. */
	assert_int_equal(redis_scripts_add(reg, lua("guarded_incr.lua"), REDIS_SCRIPT_GUARDED, &s),
			 0);
	size_t len;
	const char *text = redis_script_text(s, &len);
	assert_non_null(strstr(text, "-- generation_guard.lua"));
	assert_string_equal(text + len - lua("guarded_incr.lua")->len,
			    lua("guarded_incr.lua")->text);
	assert_int_equal(redis_script_numkeys(s), 2);

	redis_scripts_freeze(reg);
	assert_int_equal(redis_scripts_add(reg, lua("incr.lua"), 0, NULL), -EBUSY);
	redis_scripts_free(reg);
}

/* SCRIPT EXISTS of two scripts: both there. */
static void exists_reply_cb(struct redis_conn *conn, int status, redisReply *r, void *data)
{
	assert_int_equal(status, 0);
	assert_int_equal(r->type, REDIS_REPLY_ARRAY);
	assert_int_equal(r->elements, 2);
	assert_int_equal(r->element[0]->integer, 1);
	assert_int_equal(r->element[1]->integer, 1);
	++*(int *)data;
}

static void loaded_before_up_and_called(void **state)
{
	uv_loop_t loop;
	struct probe p = { 0 };
	struct redis_conn_stats st;
	struct redis_scripts *reg = registry(), *other = registry();
	const struct redis_script *incr = redis_scripts_find(reg, "incr.lua");
	const struct redis_script *echo = redis_scripts_find(reg, "echo.lua");

	uv_loop_init(&loop);
	struct redis_conn *c = open_conn(&loop, reg, &p);
	assert_int_equal(redis_scripts_add(reg, lua("broken.lua"), 0, NULL), -EBUSY); /* frozen */
	fixture_run_until(&loop, is_up, c, 60000);
	redis_conn_get_stats(c, &st);
	assert_int_equal(st.script_loads, 3);
	int exists = 0;
	const char *ex[] = { "SCRIPT", "EXISTS", redis_script_sha(incr), redis_script_sha(echo) };
	assert_int_equal(redis_conn_command_argv(c, exists_reply_cb, &exists, 4, ex, NULL), 0);
	fixture_run_until_count(&loop, &exists, 1, 60000);

	const char *key[] = { "t:n" };
	assert_int_equal(call(&loop, c, incr, &p, 1, key), 0);
	assert_int_equal(p.integer, 1);
	assert_int_equal(call(&loop, c, incr, &p, 1, key), 0);
	assert_int_equal(p.integer, 2);

	/* Binary-safe, keys then arguments, checked against the header. */
	const char *argv[] = { "k\0ey", "a\0b", "c" };
	const size_t lens[] = { 4, 3, 1 };
	int want = p.calls + 1;
	assert_int_equal(redis_conn_evalsha(c, echo, reply_cb, &p, 3, argv, lens), 0);
	fixture_run_until_count(&loop, &p.calls, want, 60000);
	assert_int_equal(p.type, REDIS_REPLY_ARRAY);
	assert_int_equal(redis_conn_evalsha(c, incr, reply_cb, &p, 2, argv, NULL), -EINVAL);
	assert_int_equal(redis_conn_evalsha(c, echo, reply_cb, &p, 1, argv, NULL), -EINVAL);
	assert_int_equal(redis_conn_evalsha(c, redis_scripts_find(other, "incr.lua"), reply_cb, &p,
					    1, key, NULL),
			 -EINVAL); /* another registry's handle */
	redis_conn_get_stats(c, &st);
	assert_int_equal(st.script_reloads, 0);
	redis_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
	redis_scripts_free(reg);
	redis_scripts_free(other);
}

/* The echo's array, checked element by element (binary-safe both ways). */
static void echo_reply_cb(struct redis_conn *conn, int status, redisReply *r, void *data)
{
	int *done = data;

	assert_int_equal(status, 0);
	assert_int_equal(r->type, REDIS_REPLY_ARRAY);
	assert_int_equal(r->elements, 3);
	assert_int_equal(r->element[0]->len, 4);
	assert_memory_equal(r->element[0]->str, "k\0ey", 4);
	assert_int_equal(r->element[1]->len, 3);
	assert_memory_equal(r->element[1]->str, "a\0b", 3);
	assert_string_equal(r->element[2]->str, "c");
	++*done;
}

static void binary_safe_arguments(void **state)
{
	uv_loop_t loop;
	struct probe p = { 0 };
	struct redis_scripts *reg = registry();
	int done = 0;
	const char *argv[] = { "k\0ey", "a\0b", "c" };
	const size_t lens[] = { 4, 3, 1 };

	uv_loop_init(&loop);
	struct redis_conn *c = open_conn(&loop, reg, &p);
	fixture_run_until(&loop, is_up, c, 60000);
	assert_int_equal(redis_conn_evalsha(c, redis_scripts_find(reg, "echo.lua"), echo_reply_cb,
					    &done, 3, argv, lens),
			 0);
	fixture_run_until_count(&loop, &done, 1, 60000);
	redis_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
	redis_scripts_free(reg);
}

static void noscript_reloaded_once(void **state)
{
	uv_loop_t loop;
	struct probe p = { 0 };
	struct redis_conn_stats st;
	struct redis_scripts *reg = registry();
	const struct redis_script *incr = redis_scripts_find(reg, "incr.lua");
	const char *key[] = { "t:flush" };

	uv_loop_init(&loop);
	struct redis_conn *c = open_conn(&loop, reg, &p);
	fixture_run_until(&loop, is_up, c, 60000);
	assert_int_equal(command(&loop, c, &p, "SCRIPT", "FLUSH", NULL), 0);
	assert_int_equal(call(&loop, c, incr, &p, 1, key), 0);
	assert_int_equal(p.type, REDIS_REPLY_INTEGER); /* answered: the caller never saw NOSCRIPT */
	assert_int_equal(p.integer, 1);
	redis_conn_get_stats(c, &st);
	assert_int_equal(st.script_reloads, 1);

	/* EVAL put it back in the cache: the next call needs no retry. */
	assert_int_equal(call(&loop, c, incr, &p, 1, key), 0);
	assert_int_equal(p.integer, 2);
	redis_conn_get_stats(c, &st);
	assert_int_equal(st.script_reloads, 1);
	redis_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
	redis_scripts_free(reg);
}

/* 64 calls in flight when the cache is flushed: each is retried once, in order, and answered
 * once. */
static void noscript_pipelined(void **state)
{
	uv_loop_t loop;
	struct probe p = { 0 };
	struct redis_conn_stats st;
	struct redis_scripts *reg = registry();
	const struct redis_script *incr = redis_scripts_find(reg, "incr.lua");
	const char *key[] = { "t:pipe" };

	uv_loop_init(&loop);
	struct redis_conn *c = open_conn(&loop, reg, &p);
	fixture_run_until(&loop, is_up, c, 60000);
	assert_int_equal(command(&loop, c, &p, "SCRIPT", "FLUSH", NULL), 0);
	int base = p.calls;
	for (int i = 0; i < 64; i++)
		assert_int_equal(redis_conn_evalsha(c, incr, reply_cb, &p, 1, key, NULL), 0);
	fixture_run_until_count(&loop, &p.calls, base + 64, 60000);
	for (int i = 0; i < 64; i++)
		assert_int_equal(p.seen[base + i], i + 1);
	redis_conn_get_stats(c, &st);
	assert_int_equal(st.script_reloads, 64);
	redis_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
	redis_scripts_free(reg);
}

/* EXEC's answer: the type and integer of its first element. */
static void exec_reply_cb(struct redis_conn *conn, int status, redisReply *r, void *data)
{
	struct probe *p = data;

	p->status = status;
	p->type = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 ? r->element[0]->type : -1;
	p->integer = p->type == REDIS_REPLY_INTEGER ? r->element[0]->integer : 0;
	snprintf(p->str, sizeof(p->str), "%s",
		 p->type == REDIS_REPLY_ERROR ? r->element[0]->str : "");
	p->calls++;
}

/* Inside MULTI an EVALSHA is answered QUEUED, and a NOSCRIPT would only show in EXEC's answer,
 * after the rest of the transaction has run: there the call goes out as EVAL. */
static void evalsha_in_multi_runs(void **state)
{
	uv_loop_t loop;
	struct probe p = { 0 }, q = { 0 };
	struct redis_scripts *reg = registry();
	const struct redis_script *incr = redis_scripts_find(reg, "incr.lua");
	const char *key[] = { "t:multi" };
	const char *multi[] = { "MULTI" }, *exec[] = { "EXEC" };

	uv_loop_init(&loop);
	struct redis_conn *c = open_conn(&loop, reg, &p);
	fixture_run_until(&loop, is_up, c, 60000);
	assert_int_equal(command(&loop, c, &p, "SCRIPT", "FLUSH", NULL), 0);
	assert_int_equal(redis_conn_command_argv(c, reply_cb, &p, 1, multi, NULL), 0);
	assert_int_equal(redis_conn_evalsha(c, incr, reply_cb, &p, 1, key, NULL), 0);
	assert_int_equal(redis_conn_command_argv(c, exec_reply_cb, &q, 1, exec, NULL), 0);
	fixture_run_until_count(&loop, &q.calls, 1, 60000);
	assert_int_equal(q.status, 0);
	assert_string_equal(q.str, "");
	assert_int_equal(q.type, REDIS_REPLY_INTEGER);
	assert_int_equal(q.integer, 1);

	/* A NOSCRIPT read while a MULTI is open is not retried: the EVAL would be queued in that
	 * transaction, and the caller answered QUEUED. */
	struct probe r = { 0 };
	q.calls = 0;
	assert_int_equal(command(&loop, c, &p, "SCRIPT", "FLUSH", NULL), 0);
	assert_int_equal(redis_conn_evalsha(c, incr, reply_cb, &r, 1, key, NULL), 0);
	assert_int_equal(redis_conn_command_argv(c, reply_cb, &p, 1, multi, NULL), 0);
	fixture_run_until_count(&loop, &r.calls, 1, 60000);
	assert_int_equal(r.type, REDIS_REPLY_ERROR);
	assert_int_equal(strncmp(r.str, "NOSCRIPT", 8), 0);
	assert_int_equal(redis_conn_command_argv(c, exec_reply_cb, &q, 1, exec, NULL), 0);
	fixture_run_until_count(&loop, &q.calls, 1, 60000);
	assert_int_equal(q.type, -1); /* an empty transaction */

	/* After EXEC, EVALSHA is retried again. */
	assert_int_equal(call(&loop, c, incr, &p, 1, key), 0);
	assert_int_equal(p.integer, 2);
	redis_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
	redis_scripts_free(reg);
}

static void restart_reloads_before_up(void **state)
{
	uv_loop_t loop;
	struct probe p = { 0 };
	struct redis_conn_stats st;
	struct redis_scripts *reg = registry();

	uv_loop_init(&loop);
	struct redis_conn *c = open_conn(&loop, reg, &p);
	fixture_run_until(&loop, is_up, c, 60000);
	p.on_up = redis_scripts_find(reg, "incr.lua");
	assert_int_equal(embedded_redis_stop(&svc), 0);
	assert_int_equal(embedded_redis_start(&svc), 0); /* empty: no script cache either */
	fixture_run_until_count(&loop, &p.calls, 1, 60000);
	assert_int_equal(p.ups, 2);
	assert_true(p.new_server);
	assert_int_equal(p.status, 0);
	assert_int_equal(p.type, REDIS_REPLY_INTEGER);
	assert_int_equal(p.integer, 1);
	redis_conn_get_stats(c, &st);
	assert_int_equal(st.script_reloads, 0); /* called from the up event: already loaded */
	assert_int_equal(st.script_loads, 6);
	redis_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
	redis_scripts_free(reg);
}

static bool refused(void *arg)
{
	return ((struct probe *)arg)->refusals >= 1;
}

static void refused_script_keeps_it_down(void **state)
{
	uv_loop_t loop;
	struct probe p = { 0 };
	struct redis_scripts *reg = registry();

	assert_int_equal(redis_scripts_add(reg, lua("broken.lua"), 0, NULL), 0);
	uv_loop_init(&loop);
	struct redis_conn *c = open_conn(&loop, reg, &p);
	fixture_run_until(&loop, refused, &p, 60000);
	assert_false(redis_conn_is_up(c));
	assert_int_equal(p.ups, 0);
	assert_int_equal(p.refusal_status, DSP_EREDIS);
	assert_non_null(strstr(p.refusal, "SCRIPT LOAD of broken.lua failed"));
	redis_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
	redis_scripts_free(reg);
}

static void generation_guard(void **state)
{
	uv_loop_t loop;
	struct probe p = { 0 };
	struct redis_scripts *reg = registry();
	const struct redis_script *g = redis_scripts_find(reg, "guarded_incr.lua");
	const char *ok[] = { "t:gen", "t:guarded", "g1" };
	const char *old[] = { "t:gen", "t:guarded", "g0" };

	uv_loop_init(&loop);
	struct redis_conn *c = open_conn(&loop, reg, &p);
	fixture_run_until(&loop, is_up, c, 60000);
	assert_int_equal(command(&loop, c, &p, "SET", "t:gen", "g1", NULL), 0);
	assert_int_equal(call(&loop, c, g, &p, 3, ok), 0);
	assert_int_equal(p.integer, 1);

	assert_int_equal(call(&loop, c, g, &p, 3, old), 0);
	assert_int_equal(p.type, REDIS_REPLY_ERROR);
	assert_string_equal(p.str, "STALEGEN g1");

	/* A FLUSHALL of the live server: the state is gone, and every guarded script says so. */
	assert_int_equal(command(&loop, c, &p, "FLUSHALL", NULL), 0);
	assert_int_equal(call(&loop, c, g, &p, 3, ok), 0);
	assert_int_equal(p.type, REDIS_REPLY_ERROR);
	assert_string_equal(p.str, "STALEGEN (none)");
	assert_int_equal(command(&loop, c, &p, "EXISTS", "t:guarded", NULL), 0);
	assert_int_equal(p.integer, 0); /* refused before touching anything */
	redis_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
	redis_scripts_free(reg);
}

/* The stale-generation refusal is recognisable by the C helper too. */
static void stale_reply_cb(struct redis_conn *conn, int status, redisReply *r, void *data)
{
	int *done = data;
	assert_true(redis_reply_is_stale_generation(r));
	assert_false(redis_reply_is_noscript(r));
	++*done;
}

static void stale_generation_helper(void **state)
{
	uv_loop_t loop;
	struct probe p = { 0 };
	struct redis_scripts *reg = registry();
	const char *argv[] = { "t:nogen", "t:x", "g1" };
	int done = 0;

	uv_loop_init(&loop);
	struct redis_conn *c = open_conn(&loop, reg, &p);
	fixture_run_until(&loop, is_up, c, 60000);
	assert_int_equal(redis_conn_evalsha(c, redis_scripts_find(reg, "guarded_incr.lua"),
					    stale_reply_cb, &done, 3, argv, NULL),
			 0);
	fixture_run_until_count(&loop, &done, 1, 60000);
	redis_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
	redis_scripts_free(reg);
}

static int setup(void **state)
{
	fixture_start(&svc, false, true, false, false);
	return 0;
}

static int teardown(void **state)
{
	embedded_stop(&svc);
	return 0;
}

/* The counts of name in reg, asserted. */
static void assert_calls(const struct redis_scripts *reg, const char *name, uint64_t calls,
			 uint64_t retries)
{
	struct redis_script_calls n;

	assert_int_equal(redis_scripts_calls(reg, name, &n), 0);
	assert_int_equal(n.calls, calls);
	assert_int_equal(n.retries, retries);
}

/* Every call sent is counted once against its script, over every connection of the registry;
 * a NOSCRIPT re-send is counted apart (retries); a call refused before it is sent is not. */
static void call_counts(void **state)
{
	uv_loop_t loop;
	struct probe p = { 0 }, q = { 0 };
	struct redis_scripts *reg = registry();
	const struct redis_script *incr = redis_scripts_find(reg, "incr.lua");
	const struct redis_script *echo = redis_scripts_find(reg, "echo.lua");
	const char *key[] = { "t:count" }, *argv[] = { "k", "a", "b" };
	const char *multi[] = { "MULTI" }, *exec[] = { "EXEC" };
	struct redis_script_calls n;

	uv_loop_init(&loop);
	struct redis_conn *c = open_conn(&loop, reg, &p);
	struct redis_conn *d = open_conn(&loop, reg, &q);
	assert_int_equal(redis_conn_evalsha(c, incr, reply_cb, &p, 1, key, NULL), -ENOTCONN);
	fixture_run_until(&loop, is_up, c, 60000);
	fixture_run_until(&loop, is_up, d, 60000);
	assert_calls(reg, "incr.lua", 0, 0); /* loading is not calling, nor is a refusal */

	for (int i = 0; i < 5; i++)
		assert_int_equal(call(&loop, c, incr, &p, 1, key), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(call(&loop, d, incr, &q, 1, key), 0);
	assert_int_equal(call(&loop, d, echo, &q, 3, argv), 0);
	assert_int_equal(redis_conn_evalsha(c, echo, reply_cb, &p, 1, argv, NULL), -EINVAL);
	assert_calls(reg, "incr.lua", 8, 0);
	assert_calls(reg, "echo.lua", 1, 0);
	assert_calls(reg, "guarded_incr.lua", 0, 0);

	/* A NOSCRIPT answer: the call once, its EVAL re-send once more as a retry. */
	assert_int_equal(command(&loop, c, &p, "SCRIPT", "FLUSH", NULL), 0);
	assert_int_equal(call(&loop, c, incr, &p, 1, key), 0);
	assert_int_equal(p.integer, 9);
	assert_calls(reg, "incr.lua", 9, 1);

	/* Inside MULTI the call goes out as EVAL: still one call. */
	assert_int_equal(redis_conn_command_argv(c, reply_cb, &p, 1, multi, NULL), 0);
	assert_int_equal(redis_conn_evalsha(c, incr, reply_cb, &p, 1, key, NULL), 0);
	int want = p.calls + 1;
	assert_int_equal(redis_conn_command_argv(c, reply_cb, &p, 1, exec, NULL), 0);
	fixture_run_until_count(&loop, &p.calls, want + 2, 60000);
	assert_calls(reg, "incr.lua", 10, 1);

	/* By handle the same; an unknown name is -ENOENT with zeros. */
	redis_script_get_calls(incr, &n);
	assert_int_equal(n.calls, 10);
	n.calls = 7;
	assert_int_equal(redis_scripts_calls(reg, "nope.lua", &n), -ENOENT);
	assert_int_equal(n.calls, 0);
	assert_int_equal(n.retries, 0);
	redis_conn_close(c, NULL, NULL);
	redis_conn_close(d, NULL, NULL);
	fixture_loop_close(&loop);
	redis_scripts_free(reg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(header_rules),
		cmocka_unit_test(loaded_before_up_and_called),
		cmocka_unit_test(binary_safe_arguments),
		cmocka_unit_test(noscript_reloaded_once),
		cmocka_unit_test(noscript_pipelined),
		cmocka_unit_test(evalsha_in_multi_runs),
		cmocka_unit_test(restart_reloads_before_up),
		cmocka_unit_test(refused_script_keeps_it_down),
		cmocka_unit_test(generation_guard),
		cmocka_unit_test(stale_generation_helper),
		cmocka_unit_test(call_counts),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
