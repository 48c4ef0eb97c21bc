/* GET /api/v1/campaigns/{campaign_id}/capacity (SPEC C12, issue 10 item 2). */
#include "api_int.h"

const struct api_route_def api_routes_capacity[] = {
	{ .method = "GET",
	  .pattern = "/api/v1/campaigns/{campaign_id}/capacity",
	  .bucket = RATELIMIT_DEFAULT,
	  .handler = api_not_implemented,
	  .summary = "What is in force for a campaign now, and which limit binds." },
};
const size_t api_routes_capacity_n = sizeof(api_routes_capacity) / sizeof(api_routes_capacity[0]);
