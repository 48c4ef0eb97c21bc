/* The hosts of a connection's conninfo, looked up off the loop (resolve.h).
 *
 * libpq resolves a host name inside PQconnectStart()/PQconnectPoll(), with getaddrinfo() on the
 * caller's thread: a slow DNS server would freeze the loop. So each attempt first looks every
 * name of the host list up on libuv's thread pool, then connects with the addresses in hostaddr=
 * beside host= (libpq then uses the name only for TLS verification and .pgpass). A name with
 * several addresses becomes several entries, tried in turn by libpq as it would have. */
#include "pg_conn_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pg_host {
	struct pg_hosts *hs;	/* the set it belongs to */
	char *name;		/* the host list's entry (owned) */
	char *port;		/* its own port when the port list has one per host (owned) */
	bool lookup_needed;	/* a name: not a literal, a socket directory or empty */
	struct resolve *lookup; /* in flight, or NULL */
	int status;		/* the last lookup's: 0 or a libuv error */
	struct resolved addrs;	/* its addresses */
};

struct pg_hosts {
	struct pg_conn *conn;
	PQconninfoOption *opts; /* the parsed conninfo (owned) */
	struct pg_host *h;	/* n of them (owned) */
	int n;
	unsigned waiting; /* lookups the attempt under way waits for */
	uint64_t lookups; /* lookups started */
};

/* Splits a comma-separated list into *out (n malloc'd strings). Returns n or -ENOMEM. */
static int split(const char *list, char ***out)
{
	int n = 1;

	for (const char *p = list; *p; p++)
		n += *p == ',';
	char **v = calloc((size_t)n, sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (int i = 0; i < n; i++) {
		size_t len = strcspn(list, ",");
		if (!(v[i] = strndup(list, len))) {
			while (i-- > 0)
				free(v[i]);
			free(v);
			return -ENOMEM;
		}
		list += len + (list[len] == ',');
	}
	*out = v;
	return n;
}

static const char *option(const PQconninfoOption *o, const char *name)
{
	for (; o->keyword; o++) {
		if (strcmp(o->keyword, name) == 0)
			return o->val && o->val[0] ? o->val : NULL;
	}
	return NULL;
}

void hosts_free(struct pg_hosts *hs)
{
	if (!hs)
		return;
	for (int i = 0; i < hs->n; i++) {
		if (hs->h[i].lookup)
			resolve_cancel(hs->h[i].lookup);
		free(hs->h[i].name);
		free(hs->h[i].port);
	}
	free(hs->h);
	PQconninfoFree(hs->opts);
	free(hs);
}

/* Fills hs->h from the host and port lists (as libpq reads them: the conninfo, else PGHOST and
 * PGPORT). Returns 0, -ENOMEM, or 1 when nothing needs a lookup. */
static int read_hosts(struct pg_hosts *hs)
{
	const char *host = option(hs->opts, "host");
	const char *port = option(hs->opts, "port");
	char **names = NULL, **ports = NULL;
	int np = 0;

	/* An explicit hostaddr, or hosts from a service file, are libpq's to handle. */
	if (option(hs->opts, "hostaddr") || (!host && option(hs->opts, "service")) ||
	    (!host && getenv("PGHOSTADDR") && getenv("PGHOSTADDR")[0]))
		return 1;
	host = host ? host : getenv("PGHOST");
	port = port ? port : getenv("PGPORT");
	if (!host || !host[0])
		return 1;
	int n = split(host, &names);
	if (n < 0)
		return n;
	if (port && strchr(port, ',') && (np = split(port, &ports)) < 0)
		np = -ENOMEM;
	int rc = np < 0 || !(hs->h = calloc((size_t)n, sizeof(*hs->h))) ? -ENOMEM : 1;
	for (int i = 0; i < n; i++) {
		if (rc != -ENOMEM) {
			hs->h[i].hs = hs;
			hs->h[i].name = names[i];
			hs->h[i].port = np == n ? ports[i] : NULL;
			hs->h[i].lookup_needed = resolve_is_name(names[i]);
			rc = hs->h[i].lookup_needed ? 0 : rc;
		} else {
			free(names[i]);
		}
		if (np == n && rc == -ENOMEM)
			free(ports[i]);
	}
	for (int i = 0; np != n && i < np; i++)
		free(ports[i]); /* a port list libpq will refuse: passed as it is */
	hs->n = rc == -ENOMEM ? 0 : n;
	free(names);
	free(ports);
	return rc;
}

int hosts_new(struct pg_conn *conn)
{
	struct pg_hosts *hs = calloc(1, sizeof(*hs));

	conn->hosts = NULL;
	if (!hs)
		return -ENOMEM;
	hs->conn = conn;
	/* A conninfo libpq cannot parse is given to it as it is: it says why. */
	hs->opts = PQconninfoParse(conn->conninfo, NULL);
	int rc = hs->opts ? read_hosts(hs) : 1;
	if (rc != 0) {
		hosts_free(hs);
		return rc < 0 ? rc : 0;
	}
	conn->hosts = hs;
	return 0;
}

/* Appends text to the list being built in buf (len bytes). Returns whether it fit. */
static bool append(char *buf, size_t len, bool first, const char *text)
{
	size_t used = strlen(buf);
	int n = snprintf(buf + used, len - used, "%s%s", first ? "" : ",", text);

	return n >= 0 && (size_t)n < len - used;
}

/* The hostaddr entry of a host's address a: the address looked up, a literal as it is, and
 * nothing for a socket directory or an empty host (libpq then uses host as it would). */
static const char *entry_addr(const struct pg_host *h, int a)
{
	if (h->lookup_needed)
		return h->addrs.addr[a];
	return h->name[0] && h->name[0] != '/' && h->name[0] != '@' ? h->name : "";
}

/* Every lookup of the attempt is back: connect with the addresses. */
static void connect_resolved(struct pg_hosts *hs)
{
	enum { LIST = 8192, MAXKW = 64 };
	char *host = malloc(LIST), *hostaddr = malloc(LIST), *port = malloc(LIST);
	const char *kw[MAXKW], *val[MAXKW];
	const char *failed = NULL;
	int nkw = 0, entries = 0, failed_status = 0;
	bool fit = host && hostaddr && port;

	if (fit)
		host[0] = hostaddr[0] = port[0] = '\0';
	for (int i = 0; fit && i < hs->n; i++) {
		const struct pg_host *h = &hs->h[i];
		int naddr = !h->lookup_needed ? 1 : h->status == 0 ? h->addrs.n : 0;
		if (naddr == 0) { /* like libpq: a host that does not resolve is skipped */
			failed = h->name;
			failed_status = h->status;
		}
		for (int a = 0; fit && a < naddr; a++, entries++) {
			fit = append(host, LIST, entries == 0, h->name) &&
			      append(hostaddr, LIST, entries == 0, entry_addr(h, a)) &&
			      append(port, LIST, entries == 0, h->port ? h->port : "");
		}
	}
	for (const PQconninfoOption *o = hs->opts; fit && o->keyword && nkw < MAXKW - 4; o++) {
		if (o->val && strcmp(o->keyword, "host") && strcmp(o->keyword, "hostaddr") &&
		    (strcmp(o->keyword, "port") || !hs->h[0].port)) {
			kw[nkw] = o->keyword;
			val[nkw++] = o->val;
		}
	}
	if (!fit || entries == 0) {
		char why[320];
		if (!fit)
			snprintf(why, sizeof(why), "out of memory, or too many host addresses");
		else
			snprintf(why, sizeof(why), "cannot resolve %s: %s", failed,
				 uv_strerror(failed_status));
		conn_lost(hs->conn, why);
	} else {
		kw[nkw] = "host", val[nkw++] = host;
		kw[nkw] = "hostaddr", val[nkw++] = hostaddr;
		if (hs->h[0].port)
			kw[nkw] = "port", val[nkw++] = port;
		kw[nkw] = NULL, val[nkw] = NULL;
		conn_connect(hs->conn, kw, val);
	}
	free(host);
	free(hostaddr);
	free(port);
}

static void lookup_cb(int status, const struct resolved *r, void *data)
{
	struct pg_host *h = data;
	struct pg_hosts *hs = h->hs;

	h->lookup = NULL;
	h->status = status;
	if (status == 0)
		h->addrs = *r;
	if (hs->waiting > 0 && --hs->waiting == 0)
		connect_resolved(hs);
}

void hosts_begin(struct pg_conn *conn)
{
	struct pg_hosts *hs = conn->hosts;

	hs->waiting = 0;
	for (int i = 0; i < hs->n; i++) {
		struct pg_host *h = &hs->h[i];
		if (!h->lookup_needed)
			continue;
		/* A lookup an earlier attempt gave up on still runs: wait for that one. */
		if (!h->lookup) {
			hs->lookups++;
			int rc = resolve_start(conn->loop, h->name, lookup_cb, h, &h->lookup);
			if (rc < 0) {
				h->lookup = NULL;
				h->status = rc;
				continue;
			}
		}
		hs->waiting++;
	}
	if (hs->waiting == 0)
		connect_resolved(hs);
}

void hosts_abandon(struct pg_hosts *hs)
{
	if (hs)
		hs->waiting = 0;
}

uint64_t hosts_lookups(const struct pg_hosts *hs)
{
	return hs ? hs->lookups : 0;
}
