/* POST /v2/batches (JSON) and POST /v2/batches/upload (CSV): SPEC R6, issue 10 item 4, over the
 * batch importer (batch_import.h). */
#include "api_int.h"

void api_batch_create(struct api_call *c)
{
	api_not_implemented(c);
}

void api_batch_upload(struct api_call *c)
{
	api_not_implemented(c);
}
