/* The provider stub's settings: command-line flags and a JSON config file. */
#include "stub_int.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
	"usage: provider-stub [options]\n"
	"A telephony provider stub speaking SPEC D0 on loopback (see bench/provider-stub/stub.h).\n"
	"\n"
	"  --host ADDR            loopback address to bind [127.0.0.1]\n"
	"  --port N               port, 0 = any free one (printed on stdout) [0]\n"
	"  --seed N               seed of every draw [1]\n"
	"  --outcomes W,W,W,W,W   weights of completed,no-answer,busy,failed,canceled "
	"[70,15,5,5,5]\n"
	"  --duration-ms MIN[-MAX] call duration, uniform [1000]\n"
	"  --ring-ms N            time to the ringing event [20]\n"
	"  --hold                 calls stay live until POST /control/end\n"
	"  --secret S             webhook signing secret [stub-secret]\n"
	"  --token T              require Authorization: Bearer T on /calls\n"
	"  --dup-pct N            % of events sent twice [0]\n"
	"  --reorder-pct N        % of events delayed by --reorder-ms [0]\n"
	"  --reorder-ms N         [200]\n"
	"  --drop-pct N           % of events never sent [0]\n"
	"  --early-pct N          % of calls whose ringing event precedes the 201 [0]\n"
	"  --limit N              dials per window per org, 0 = unlimited [0]\n"
	"  --window-ms N          [1000]\n"
	"  --window fixed|sliding [fixed]\n"
	"  --throttle MODE        retry_after | retry_after_date | no_header | body [retry_after]\n"
	"  --fail-pct N           % of dials answered --fail-status, nothing placed [0]\n"
	"  --fail-placed-pct N    % of first dials placed but answered --fail-status [0]\n"
	"  --fail-status N        [503]\n"
	"  --slow-pct N           % of dials answered after --slow-ms [0]\n"
	"  --slow-ms N            [0]\n"
	"  --config FILE          JSON: the same settings (names with '_' for '-'), plus\n"
	"                         \"orgs\": {\"<org>\": {limit, window_ms, window, throttle, "
	"fail_pct,\n"
	"                         fail_status, fail_placed_pct, slow_pct, slow_ms, force_status}}\n"
	"  --help\n";

static int parse_u(const char *v, unsigned long long max, unsigned long long *out)
{
	char *end;
	unsigned long long n = strtoull(v ? v : "", &end, 10);

	if (!v || !*v || *end || n > max)
		return -EINVAL;
	*out = n;
	return 0;
}

static int parse_enum(const char *v, const char *const *names, int n)
{
	for (int i = 0; i < n; i++)
		if (v && strcmp(v, names[i]) == 0)
			return i;
	return -1;
}

static const char *const windows[] = { "fixed", "sliding" };
static const char *const throttles[] = { "retry_after", "retry_after_date", "no_header", "body" };

static int parse_weights(struct stub_config *c, const char *v)
{
	unsigned long long w;
	char buf[128], *save = NULL, *tok;
	int i = 0;

	snprintf(buf, sizeof(buf), "%s", v);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (i == STUB_OUTCOMES || parse_u(tok, 1000000, &w))
			return -EINVAL;
		c->weights[i++] = (unsigned)w;
	}
	return i == STUB_OUTCOMES ? 0 : -EINVAL;
}

static int parse_duration(struct stub_config *c, const char *v)
{
	unsigned long long a, b;
	char buf[64], *dash;

	snprintf(buf, sizeof(buf), "%s", v);
	if ((dash = strchr(buf, '-')))
		*dash = '\0';
	if (parse_u(buf, 86400000, &a))
		return -EINVAL;
	b = a;
	if (dash && parse_u(dash + 1, 86400000, &b))
		return -EINVAL;
	if (b < a || a == 0)
		return -EINVAL;
	c->dur_min_ms = a;
	c->dur_max_ms = b;
	return 0;
}

/* Applies one named setting (flag name without "--", '_' or '-'). */
static int apply(struct stub_config *c, const char *name, const char *v)
{
	unsigned long long n = 0;
	struct stub_org_config *o = &c->defaults;
	int e;
	char key[32];

	snprintf(key, sizeof(key), "%s", name);
	for (char *p = key; *p; p++)
		if (*p == '_')
			*p = '-';
#define U(flag, field, max)                                                                        \
	if (strcmp(key, flag) == 0) {                                                              \
		if (parse_u(v, max, &n))                                                           \
			return -EINVAL;                                                            \
		field = n;                                                                         \
		return 0;                                                                          \
	}
	U("port", c->port, 65535);
	U("seed", c->seed, UINT64_MAX);
	U("ring-ms", c->ring_ms, 86400000);
	U("dup-pct", c->dup_pct, 100);
	U("reorder-pct", c->reorder_pct, 100);
	U("reorder-ms", c->reorder_ms, 86400000);
	U("drop-pct", c->drop_pct, 100);
	U("early-pct", c->early_pct, 100);
	U("limit", o->limit, 100000000);
	U("window-ms", o->window_ms, 86400000);
	U("fail-pct", o->fail_pct, 100);
	U("fail-placed-pct", o->fail_placed_pct, 100);
	U("fail-status", o->fail_status, 599);
	U("slow-pct", o->slow_pct, 100);
	U("slow-ms", o->slow_ms, 86400000);
#undef U
	if (strcmp(key, "host") == 0)
		return (c->host = v) ? 0 : -EINVAL;
	if (strcmp(key, "secret") == 0)
		return (c->secret = v) ? 0 : -EINVAL;
	if (strcmp(key, "token") == 0)
		return (c->token = v) ? 0 : -EINVAL;
	if (strcmp(key, "outcomes") == 0)
		return v ? parse_weights(c, v) : -EINVAL;
	if (strcmp(key, "duration-ms") == 0)
		return v ? parse_duration(c, v) : -EINVAL;
	if (strcmp(key, "window") == 0)
		return (e = parse_enum(v, windows, 2)) < 0 ? -EINVAL : (o->window = e, 0);
	if (strcmp(key, "throttle") == 0)
		return (e = parse_enum(v, throttles, 4)) < 0 ? -EINVAL : (o->throttle = e, 0);
	return -ENOENT;
}

/* A JSON value as the text apply() takes ("true" for booleans). */
static const char *json_text(const cJSON *v, char *buf, size_t len)
{
	if (cJSON_IsString(v))
		return v->valuestring;
	if (cJSON_IsNumber(v) && v->valuedouble >= 0) {
		snprintf(buf, len, "%.0f", v->valuedouble);
		return buf;
	}
	return NULL;
}

int stub_org_from_json(struct stub_org_config *o, const void *json)
{
	static const char *const keys[] = { "limit",	       "window_ms", "window",
					    "throttle",	       "fail_pct",  "fail_status",
					    "fail_placed_pct", "slow_pct",  "slow_ms" };
	struct stub_config tmp;
	const cJSON *f;
	char buf[32];

	memset(&tmp, 0, sizeof(tmp));
	tmp.defaults = *o;
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		if ((f = cJSON_GetObjectItemCaseSensitive(json, keys[i])) &&
		    apply(&tmp, keys[i], json_text(f, buf, sizeof(buf))))
			return -EINVAL;
	}
	if ((f = cJSON_GetObjectItemCaseSensitive(json, "force_status"))) {
		if (!cJSON_IsNumber(f) ||
		    (f->valueint != 0 && (f->valueint < 200 || f->valueint > 599)))
			return -EINVAL;
		tmp.defaults.force_status = f->valueint;
	}
	*o = tmp.defaults;
	return 0;
}

static int load_json(struct stub_config *c, const char *path, void **json_out)
{
	FILE *f = fopen(path, "rb");
	char *text = NULL, buf[32];
	size_t len = 0, cap = 0, n;
	cJSON *root, *it;

	if (!f)
		return -errno;
	do {
		if (len + 4096 > cap && !(text = realloc(text, cap = cap * 2 + 8192)))
			break;
		len += n = fread(text + len, 1, 4096, f);
	} while (n > 0);
	fclose(f);
	root = text ? cJSON_ParseWithLength(text, len) : NULL;
	free(text);
	if (!cJSON_IsObject(root)) {
		cJSON_Delete(root);
		return -EINVAL;
	}
	cJSON_ArrayForEach(it, root)
	{
		if (strcmp(it->string, "orgs") == 0)
			continue;
		if (strcmp(it->string, "hold") == 0) {
			c->hold = cJSON_IsTrue(it);
			continue;
		}
		if (apply(c, it->string, json_text(it, buf, sizeof(buf)))) {
			fprintf(stderr, "provider-stub: %s: bad setting \"%s\"\n", path,
				it->string);
			cJSON_Delete(root);
			return -EINVAL;
		}
	}
	*json_out = root;
	return 0;
}

int stub_config_parse(struct stub_config *c, int argc, char **argv, void **json_out)
{
	static const struct option opts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "hold", no_argument, NULL, 'H' },
		{ "config", required_argument, NULL, 'c' },
		{ "host", required_argument, NULL, 1 },
		{ "port", required_argument, NULL, 1 },
		{ "seed", required_argument, NULL, 1 },
		{ "outcomes", required_argument, NULL, 1 },
		{ "duration-ms", required_argument, NULL, 1 },
		{ "ring-ms", required_argument, NULL, 1 },
		{ "secret", required_argument, NULL, 1 },
		{ "token", required_argument, NULL, 1 },
		{ "dup-pct", required_argument, NULL, 1 },
		{ "reorder-pct", required_argument, NULL, 1 },
		{ "reorder-ms", required_argument, NULL, 1 },
		{ "drop-pct", required_argument, NULL, 1 },
		{ "early-pct", required_argument, NULL, 1 },
		{ "limit", required_argument, NULL, 1 },
		{ "window-ms", required_argument, NULL, 1 },
		{ "window", required_argument, NULL, 1 },
		{ "throttle", required_argument, NULL, 1 },
		{ "fail-pct", required_argument, NULL, 1 },
		{ "fail-placed-pct", required_argument, NULL, 1 },
		{ "fail-status", required_argument, NULL, 1 },
		{ "slow-pct", required_argument, NULL, 1 },
		{ "slow-ms", required_argument, NULL, 1 },
		{ NULL, 0, NULL, 0 },
	};
	int ch, idx;

	*json_out = NULL;
	optind = 1;
	while ((ch = getopt_long(argc, argv, "", opts, &idx)) != -1) {
		if (ch == 'h') {
			fputs(usage, stdout);
			return 1;
		} else if (ch == 'H') {
			c->hold = true;
		} else if (ch == 'c') {
			cJSON_Delete(*json_out);
			*json_out = NULL;
			if (load_json(c, optarg, json_out)) {
				fprintf(stderr, "provider-stub: cannot use config %s\n", optarg);
				return -EINVAL;
			}
		} else if (ch != 1 || apply(c, opts[idx].name, optarg)) {
			fprintf(stderr, "provider-stub: bad value for --%s\n%s",
				ch == 1 ? opts[idx].name : "?", usage);
			return -EINVAL;
		}
	}
	return 0;
}
