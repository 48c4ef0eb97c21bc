/* The JSON body of POST /v2/batches (route_batch_create.c, README "Creating batches"), read with
 * no I/O: apart from the route so that it can be unit-tested and fuzzed
 * (tests/fuzz/fuzz_batch_body.c) without a server, a loop or a database.
 *
 * The body {"campaign_id", "name"?, "contacts": [{"phone", "variables"?}, ...]} is read twice
 * (a contact's phone may also be named phone_number or to_number, the CSV header's names: one
 * of the three per contact)
 * without ever building its whole tree:
 *   - the first pass (batch_body_init(), then batch_body_check() in slices of a budget of
 *     contacts or BATCH_BODY_SLICE_BYTES of text, a contact or field too long refused by its
 *     length before parsing, so that a route can yield to its loop between slices) checks the shape: the
 *     object's members (each key and value parsed alone with json_strict_parse(), a key twice
 *     or more than BATCH_BODY_FIELDS_MAX members -> 400), campaign_id and name strings, contacts
 *     an array of objects with a string phone and an object (or null) variables, each contact
 *     parsed alone and freed. The first 400 wins, else the first 422; the message names the
 *     field (contacts[i].phone...) or the byte;
 *   - the second pass (batch_body_contacts(), batch_body_next()), once the first accepted the
 *     body, walks the contacts' text and gives each one's phone and variables text, which the
 *     route hands to the importer (batch_import_add() validates them).
 * Memory: the body (borrowed), plus one contact's tree at a time.
 */
#ifndef DSP_API_BATCH_BODY_H
#define DSP_API_BATCH_BODY_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BATCH_BODY_FIELDS_MAX 32  /* members of the body's object */
#define BATCH_BODY_VALUE      256 /* campaign_id's buffer: longer ones are cut (their length kept) */
#define BATCH_BODY_NAME_MAX   200 /* a batch's name, bytes: BATCH_IMPORT_MAX_NAME */
#define BATCH_BODY_MSG	      256 /* the message of a refusal */
/* Refused by their length before they are parsed (issue10-g1: one 64 MiB contact parsed whole
 * had grown the worker by 2.5 GiB and held its loop 35 s): a contact's text (the importer's
 * 64 KiB of variables, BATCH_IMPORT_MAX_VARIABLES, plus 1 KiB), any other member's value or a
 * member's name (422 naming it). */
#define BATCH_BODY_CONTACT_MAX (65536 + 1024)
#define BATCH_BODY_FIELD_MAX   4096
/* Text parsed per batch_body_check() call, at most (besides its budget of contacts). */
#define BATCH_BODY_SLICE_BYTES ((size_t)1 << 20)

/* The members of an object or the elements of an array in b[0..len), pos just after its
 * opening bracket. */
struct batch_body_walk {
	const char *b; /* borrowed */
	size_t len, pos;
	bool first;
	char close; /* '}' or ']' */
};

/* The first pass's state and result. */
struct batch_body {
	int status;			    /* once over: 0 accepted, 400 or 422 */
	char msg[BATCH_BODY_MSG];	    /* the refusal's message */
	char campaign_id[BATCH_BODY_VALUE]; /* as given (cut to fit) */
	size_t campaign_id_len;		    /* its length before the cut */
	bool has_name;			    /* a name was given (not null) */
	char name[BATCH_BODY_NAME_MAX + 1];
	uint64_t contacts; /* contacts checked so far */
	/* private */
	const char *b;
	size_t len;
	struct batch_body_walk top, arr; /* the body's object; the contacts array while in it */
	bool in_contacts, have_cid, have_contacts;
	size_t arr_at;			   /* the contacts array's '[' */
	char *seen[BATCH_BODY_FIELDS_MAX]; /* the top-level keys so far (owned) */
	unsigned nseen;
	size_t parsed; /* bytes parsed in this batch_body_check() call */
};

/* Starts the first pass over body (len bytes, need not be NUL-terminated, borrowed until
 * batch_body_deinit()). Returns 0, or 400 when the body does not start with '{' (p->msg set):
 * the pass is then over. Call batch_body_deinit() either way. */
int batch_body_init(struct batch_body *p, const char *body, size_t len);

/* Goes on with the first pass, up to budget (>= 1) contacts. Returns true when the pass is over
 * (p->status and p->msg say how it went); false when the budget ran out first (call again). The
 * outcome does not depend on the budgets. */
bool batch_body_check(struct batch_body *p, unsigned budget);

/* Frees what the pass holds (not p itself). */
void batch_body_deinit(struct batch_body *p);

/* One contact of the second pass. phone and vars point into the body (or into decoded when the
 * phone has escapes); release it with batch_body_contact_deinit(). */
struct batch_body_contact {
	const char *phone; /* its phone as written ("" when absent) */
	size_t phone_len;
	const char *vars; /* the text of its variables object; NULL when absent or null */
	size_t vars_len;
	cJSON *decoded; /* owned: the decoded phone when it had escapes, else NULL */
};

/* Starts the second pass over the contacts of p, whose first pass accepted the body. */
void batch_body_contacts(const struct batch_body *p, struct batch_body_walk *w);

/* The next contact of the second pass into *c. Returns 1, or 0 at the end of the array. */
int batch_body_next(struct batch_body_walk *w, struct batch_body_contact *c);

/* Frees what c owns. */
void batch_body_contact_deinit(struct batch_body_contact *c);

/* What is wrong with a batch's name (name, len bytes; as given in JSON, a query parameter, a
 * form field, or taken from the file's name): NULL when nothing, else the end of a sentence
 * that starts with the field ("is longer than 200 bytes", "contains a control character (byte
 * 3)"): as dispatcher admin's names, no C0 control character nor DEL. Its UTF-8 is the
 * importer's to judge (batch_import_new()). */
const char *batch_body_name_fault(const char *name, size_t len, char *buf, size_t cap);

/* The body of POST /v2/batches/{batch_id}/stop|pause|resume, which takes none (body, len
 * bytes, need not be NUL-terminated): empty or white space, or a JSON object without members
 * ("{}": what requests.post(url, json={}) sends). Returns 0; 400 when it is anything else but
 * an object with members (msg says the route takes no body); 422 for an object with members
 * (msg names the first: no member is defined, and one silently ignored would hide a client's
 * mistake). */
int batch_body_control(const char *body, size_t len, char *msg, size_t cap);

#endif
