/* GET /openapi.json (issue 10 item 7): the OpenAPI 3.1 description of every route of the public
 * listener, dispatcher/api/openapi.json embedded at build time (common/tools/embed.py) and
 * served as is, without a key. tests/unit/test_openapi.c checks it against the route tables
 * (api_route_defs() and the worker's worker_routes[]), so the two cannot drift. */
#include "api_int.h"

#include "embedded_file.h"

extern const struct embedded_file api_openapi[];
extern const size_t api_openapi_count;

const char *api_openapi_text(size_t *len)
{
	*len = api_openapi[0].len;
	return api_openapi[0].text;
}

static void openapi(struct api_call *c)
{
	size_t len;
	const char *text = api_openapi_text(&len);

	api_respond(c, 200, "application/json", text, len);
}

const struct api_route_def api_routes_openapi[] = {
	{ .method = "GET",
	  .pattern = "/openapi.json",
	  .public_route = true,
	  .bucket = RATELIMIT_DEFAULT,
	  .handler = openapi,
	  .summary = "This description (OpenAPI 3.1), without a key." },
};
const size_t api_routes_openapi_n = sizeof(api_routes_openapi) / sizeof(api_routes_openapi[0]);
