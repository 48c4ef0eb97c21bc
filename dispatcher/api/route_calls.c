/* Calls (SPEC C10, issue 10 item 5): the direct dial and the call reads. */
#include "api_int.h"

#define CALL_BODY_MAX 4096

const struct api_route_def api_routes_calls[] = {
	{ .method = "POST",
	  .pattern = "/v2/calls",
	  .max_body = CALL_BODY_MAX,
	  .bucket = RATELIMIT_CALLS_CREATE,
	  .handler = api_not_implemented,
	  .summary = "Places a direct dial: waits up to 5 s for a line, else 429." },
	{ .method = "GET",
	  .pattern = "/v2/calls",
	  .bucket = RATELIMIT_EXECUTIONS_LIST,
	  .handler = api_not_implemented,
	  .summary = "Lists the organisation's calls, newest first." },
	{ .method = "GET",
	  .pattern = "/v2/calls/{call_id}",
	  .bucket = RATELIMIT_EXECUTIONS_LIST,
	  .handler = api_not_implemented,
	  .summary = "One call." },
};
const size_t api_routes_calls_n = sizeof(api_routes_calls) / sizeof(api_routes_calls[0]);
