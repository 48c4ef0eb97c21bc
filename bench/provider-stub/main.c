/* provider-stub: the provider stub as a process (see stub.h for the routes and --help for the
 * settings). Prints "provider-stub listening on http://127.0.0.1:<port>" on stdout once ready;
 * SIGINT or SIGTERM stops it, printing the final ground truth (the GET /stats JSON) first. */
#include "stub.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct app {
	uv_signal_t sigint, sigterm;
	struct stub *stub;
};

static void on_signal_closed(uv_handle_t *h)
{
	(void)h;
}

static void on_signal(uv_signal_t *sig, int signum)
{
	struct app *a = sig->data;
	char *stats = stub_stats_json(a->stub);

	(void)signum;
	if (stats) {
		printf("%s\n", stats);
		fflush(stdout);
		free(stats);
	}
	stub_close(a->stub, NULL, NULL);
	uv_close((uv_handle_t *)&a->sigint, on_signal_closed);
	uv_close((uv_handle_t *)&a->sigterm, on_signal_closed);
}

int main(int argc, char **argv)
{
	struct stub_config cfg;
	struct app a = { 0 };
	void *json = NULL;
	int err;

	stub_config_defaults(&cfg);
	if ((err = stub_config_parse(&cfg, argc, argv, &json)))
		return err > 0 ? 0 : 2;
	curl_global_init(CURL_GLOBAL_DEFAULT);
	if ((err = stub_new(uv_default_loop(), &cfg, &a.stub)) ||
	    (err = stub_config_orgs(a.stub, json))) {
		fprintf(stderr, "provider-stub: cannot start on %s:%d: %s\n", cfg.host, cfg.port,
			err == -EINVAL ? "invalid setting or not a loopback address"
				       : strerror(-err));
		uv_run(uv_default_loop(), UV_RUN_DEFAULT);
		cJSON_Delete(json);
		return 1;
	}
	printf("provider-stub listening on http://%s:%d\n", cfg.host, stub_port(a.stub));
	fflush(stdout);
	uv_signal_init(uv_default_loop(), &a.sigint);
	uv_signal_init(uv_default_loop(), &a.sigterm);
	a.sigint.data = &a;
	a.sigterm.data = &a;
	uv_signal_start(&a.sigint, on_signal, SIGINT);
	uv_signal_start(&a.sigterm, on_signal, SIGTERM);
	uv_run(uv_default_loop(), UV_RUN_DEFAULT);
	uv_loop_close(uv_default_loop());
	cJSON_Delete(json);
	curl_global_cleanup();
	return 0;
}
