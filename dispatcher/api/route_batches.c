/* Batches (SPEC R6, issue 10 item 4): create (JSON), upload (CSV), list, read, stop, pause,
 * resume. */
#include "api_int.h"

/* One request carries a batch up to the pending ceiling (R6); a contact is at most a few
 * hundred bytes. */
#define BATCH_BODY_MAX ((size_t)256 << 20)

const struct api_route_def api_routes_batches[] = {
	{ .method = "POST",
	  .pattern = "/v2/batches",
	  .max_body = BATCH_BODY_MAX,
	  .bucket = RATELIMIT_CALLS_CREATE,
	  .handler = api_batch_create, /* route_batch_create.c */
	  .summary = "Creates a batch from a JSON body of contacts." },
	{ .method = "POST",
	  .pattern = "/v2/batches/upload",
	  .max_body = BATCH_BODY_MAX,
	  .stream = true,
	  .bucket = RATELIMIT_CALLS_CREATE,
	  .handler = api_batch_upload, /* route_batch_create.c */
	  .summary = "Creates a batch from a CSV file." },
	{ .method = "GET",
	  .pattern = "/v2/batches",
	  .bucket = RATELIMIT_DEFAULT,
	  .handler = api_not_implemented,
	  .summary = "Lists the organisation's batches." },
	{ .method = "GET",
	  .pattern = "/v2/batches/{batch_id}",
	  .bucket = RATELIMIT_DEFAULT,
	  .handler = api_not_implemented,
	  .summary = "One batch and its progress." },
	{ .method = "POST",
	  .pattern = "/v2/batches/{batch_id}/stop",
	  .bucket = RATELIMIT_DEFAULT,
	  .handler = api_not_implemented,
	  .summary = "Stops a batch: nothing more is dialled; calls in flight finish." },
	{ .method = "POST",
	  .pattern = "/v2/batches/{batch_id}/pause",
	  .bucket = RATELIMIT_DEFAULT,
	  .handler = api_not_implemented,
	  .summary = "Pauses a batch." },
	{ .method = "POST",
	  .pattern = "/v2/batches/{batch_id}/resume",
	  .bucket = RATELIMIT_DEFAULT,
	  .handler = api_not_implemented,
	  .summary = "Resumes a paused batch." },
};
const size_t api_routes_batches_n = sizeof(api_routes_batches) / sizeof(api_routes_batches[0]);
