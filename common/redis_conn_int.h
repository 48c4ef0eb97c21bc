/* Internals of redis_conn.c shared with redis_handshake.c; not for other modules. */
#ifndef DSP_REDIS_CONN_INT_H
#define DSP_REDIS_CONN_INT_H

#include "backoff.h"
#include "list.h"
#include "redis_conn.h"
#include "resolve.h"

#include <hiredis/async.h>

enum conn_state {
	ST_NEW,	       /* created, not started */
	ST_DOWN,       /* waiting for the reconnect timer */
	ST_CONNECTING, /* connect + handshake under way, connect deadline armed */
	ST_UP,	       /* handshake done, commands accepted */
	ST_CLOSED,     /* owner closed it; waiting for handles to close */
};

enum hs_phase {
	PH_HELLO, /* AUTH, PING, CLIENT SETNAME, INFO server */
	PH_HOOKS, /* the owner's hooks, one at a time */
	PH_LOAD,  /* SCRIPT LOAD of every script, GET of the generation key */
};

struct hook {
	struct list_node node; /* in redis_conn.hooks, in the order added */
	char *name;	       /* owned */
	redis_hook_cb cb;
	void *data; /* borrowed */
};

struct request {
	struct list_node node; /* in redis_conn.pending, in send order (= reply order) */
	struct redis_conn *conn;
	redis_reply_cb cb; /* may be NULL */
	void *data;
	uint64_t deadline; /* uv_now() ms */
	bool timed_out;
	const struct redis_script *script; /* EVALSHA not retried yet: NOSCRIPT is retried once */
	char *cmd;			   /* its formatted command (owned), kept for the retry */
	size_t cmdlen;
};

struct redis_conn {
	uv_loop_t *loop;
	struct redis_conn_options opts; /* strings point at the owned copies below */
	char *url, *name, *gen_key;	/* owned copies */
	char label[80];			/* "redis[<name>]" */
	struct redis_url addr;		/* the parsed URL */
	struct resolve_cursor target;	/* the address of each attempt (addr.host looked up) */
	redisAsyncContext *ac;		/* NULL when down; owned by hiredis once connected */
	enum conn_state state;
	bool in_multi;		   /* MULTI sent, EXEC or DISCARD not yet: EVALSHA goes as EVAL */
	bool refusing;		   /* the drop under way is a refusal: log it at error */
	uv_timer_t retry_timer;	   /* reconnect delay, then connect deadline */
	uv_timer_t deadline_timer; /* deadline of the oldest pending command */
	struct backoff backoff;
	uint64_t rng;
	struct list_node pending; /* struct request, in send order */
	struct list_node hooks;	  /* struct hook */
	enum hs_phase phase;
	struct hook *hook;     /* the hook running (PH_HOOKS) */
	uint64_t hook_run;     /* number of the hook run in progress; 0: none */
	uint64_t hook_seq;     /* hook runs started so far (run numbers are never reused) */
	unsigned hs_left;      /* PH_LOAD replies still expected */
	char run_id[41];       /* this connection's server (INFO server) */
	char version[32];      /* its redis_version */
	char up_run_id[41];    /* the server of the last up connection */
	char up_version[32];   /* its redis_version */
	char *generation;      /* value of gen_key read by this handshake (owned), NULL: absent */
	size_t generation_len; /* its length */
	int open_handles;
	void (*closed_cb)(void *data);
	void *closed_data;
	struct redis_conn_stats stats;
};

/* Queues a command on the current context whatever the state (handshake and hook commands).
 * Returns 0, -ENOTCONN without a context, or -ENOMEM. */
int conn_send_argv(struct redis_conn *conn, redis_reply_cb cb, void *data, int argc,
		   const char **argv, const size_t *argvlen);

/* Drops the current context on our own initiative (deadline, failed handshake): reports and
 * schedules a reconnect. */
void conn_drop(struct redis_conn *conn, const char *why);

/* Starts the handshake on a context that has just been opened (redis_handshake.c). */
void handshake_begin(struct redis_conn *conn);

/* Whether a command name (len bytes) is one whose callback hiredis calls more than once. */
bool conn_streaming(const char *name, size_t len);

#endif
