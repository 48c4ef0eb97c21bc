/* Incremental multipart/form-data (multipart.h). */
#include "multipart.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

enum {
	ST_PREAMBLE,  /* before the first boundary: dropped */
	ST_AFTER,     /* right after a boundary: "--", padding or CRLF */
	ST_AFTER_PAD, /* padding seen: more padding or CR */
	ST_AFTER_DASH,
	ST_AFTER_CR,
	ST_HEADERS,
	ST_BODY,
	ST_EPILOGUE, /* after the closing boundary: dropped */
};

static int bad(struct multipart *m, const char *msg)
{
	snprintf(m->msg, sizeof(m->msg), "%s", msg);
	m->err = -EBADMSG;
	return m->err;
}

/* RFC 2046 bchars: DIGIT / ALPHA / "'()+_,-./:=?" and space (not last). */
static bool bchar(unsigned char c)
{
	return isalnum(c) || (c && strchr("'()+_,-./:=? ", c));
}

int multipart_init(struct multipart *m, const char *boundary, const struct multipart_callbacks *cb,
		   void *ud)
{
	size_t n = boundary ? strlen(boundary) : 0;

	if (!m || !cb || !cb->part_begin || !cb->part_data || !cb->part_end || n == 0 ||
	    n > MULTIPART_BOUNDARY_MAX || boundary[n - 1] == ' ')
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (!bchar((unsigned char)boundary[i]))
			return -EINVAL;
	memset(m, 0, sizeof(*m));
	memcpy(m->delim, "\r\n--", 4);
	memcpy(m->delim + 4, boundary, n);
	m->dlen = 4 + n;
	m->match = 2; /* the body may start with "--boundary": as if a CRLF came before it */
	m->state = ST_PREAMBLE;
	m->cb = cb;
	m->ud = ud;
	return 0;
}

static void trim(char **s, char **e)
{
	while (*s < *e && (**s == ' ' || **s == '\t'))
		(*s)++;
	while (*e > *s && ((*e)[-1] == ' ' || (*e)[-1] == '\t'))
		(*e)--;
}

bool multipart_param(const char *value, const char *name, char *out, size_t size)
{
	size_t nlen = strlen(name);
	const char *p = value ? strchr(value, ';') : NULL;

	while (p) {
		p++;
		while (*p == ' ' || *p == '\t')
			p++;
		const char *eq = p;
		while (*eq && *eq != '=' && *eq != ';')
			eq++;
		const char *ne = eq;
		while (ne > p && (ne[-1] == ' ' || ne[-1] == '\t'))
			ne--;
		if (*eq != '=') {
			p = *eq ? eq : NULL;
			continue;
		}
		const char *v = eq + 1;
		while (*v == ' ' || *v == '\t')
			v++;
		bool match = (size_t)(ne - p) == nlen && strncasecmp(p, name, nlen) == 0;
		size_t o = 0;
		if (*v == '"') {
			for (v++; *v && *v != '"'; v++) {
				/* An escape only before '"' or '\\': a browser that sends the file's
				 * Windows path sends its backslashes as they are (as Go's
				 * mime.ParseMediaType reads them). */
				if (*v == '\\' && (v[1] == '"' || v[1] == '\\'))
					v++;
				if (match && o + 1 < size)
					out[o++] = *v;
			}
			if (*v == '"')
				v++;
		} else {
			for (; *v && *v != ';' && *v != ' ' && *v != '\t'; v++)
				if (match && o + 1 < size)
					out[o++] = *v;
		}
		if (match) {
			if (size)
				out[o] = '\0';
			return true;
		}
		p = strchr(v, ';');
	}
	return false;
}

void multipart_media_type(const char *value, char *out, size_t size)
{
	size_t o = 0;
	char *s = (char *)(value ? value : ""), *e = s + strcspn(s, ";");

	trim(&s, &e);
	for (; s < e && o + 1 < size; s++)
		out[o++] = (char)tolower((unsigned char)*s);
	if (size)
		out[o] = '\0';
}

/* The part's header lines, complete in m->hbuf (ending with the empty line). */
static int part_headers(struct multipart *m)
{
	struct multipart_part *p = &m->part;
	bool disposition = false;
	char *line = m->hbuf, *end = m->hbuf + m->hlen - 2; /* the last CRLF ends the block */

	memset(p, 0, sizeof(*p));
	while (line < end) {
		char *eol = strstr(line, "\r\n"), *colon;
		if (!eol || eol > end)
			eol = end;
		*eol = '\0';
		if (line[0] == ' ' || line[0] == '\t')
			return bad(m, "a part's header is folded (obsolete line folding)");
		if (!(colon = strchr(line, ':')) || colon == line)
			return bad(m, "a part's header line has no name");
		char *v = colon + 1, *ve = eol;
		*colon = '\0';
		trim(&v, &ve);
		*ve = '\0';
		if (strcasecmp(line, "Content-Disposition") == 0) {
			char type[32];
			if (disposition)
				return bad(m, "a part has two Content-Disposition headers");
			disposition = true;
			multipart_media_type(v, type, sizeof(type));
			if (strcmp(type, "form-data") != 0 ||
			    !multipart_param(v, "name", p->name, sizeof(p->name)))
				return bad(m,
					   "a part's Content-Disposition is not form-data with a "
					   "name");
			/* read whole (a browser may send a full Windows path longer than the
			 * name kept), then the last segment */
			char fn[MULTIPART_HEADERS_MAX];
			if (multipart_param(v, "filename", fn, sizeof(fn))) {
				const char *base = fn;
				for (const char *q = fn; *q; q++)
					if (*q == '/' || *q == '\\')
						base = q + 1;
				size_t n = strlen(base); /* a longer name is cut */
				if (n >= sizeof(p->filename))
					n = sizeof(p->filename) - 1;
				memcpy(p->filename, base, n);
				p->filename[n] = '\0';
				p->has_filename = true;
			}
		} else if (strcasecmp(line, "Content-Type") == 0) {
			snprintf(p->content_type, sizeof(p->content_type), "%s", v);
		}
		line = eol + 2;
	}
	if (!disposition)
		return bad(m, "a part has no Content-Disposition header");
	m->parts++;
	int rc = m->cb->part_begin(p, m->ud);
	if (rc < 0)
		m->err = rc;
	return rc < 0 ? rc : 0;
}

/* Hands data to the part (ST_BODY) or drops it (preamble). Returns 0, MULTIPART_PAUSE or an
 * error. */
static int emit(struct multipart *m, const char *buf, size_t len)
{
	if (m->state != ST_BODY || len == 0)
		return 0;
	int rc = m->cb->part_data(buf, len, m->ud);
	if (rc < 0)
		m->err = rc;
	return rc;
}

/* A boundary was matched at the end of a part (or of the preamble). */
static int boundary_seen(struct multipart *m)
{
	if (m->state == ST_BODY) {
		int rc = m->cb->part_end(m->ud);
		if (rc < 0)
			return m->err = rc;
	}
	m->state = ST_AFTER;
	m->match = 0;
	return 0;
}

long multipart_feed(struct multipart *m, const char *buf, size_t len)
{
	size_t i = 0;
	int rc;

	if (m->err)
		return m->err;
	while (i < len) {
		unsigned char c = (unsigned char)buf[i];
		switch (m->state) {
		case ST_PREAMBLE:
		case ST_BODY:
			if (m->match == 0) {
				const char *cr = memchr(buf + i, '\r', len - i);
				size_t stop = cr ? (size_t)(cr - buf) : len;
				if (stop > i) {
					rc = emit(m, buf + i, stop - i);
					i = stop;
					if (rc < 0)
						return rc;
					if (rc == MULTIPART_PAUSE)
						return (long)i;
					continue;
				}
				m->match = 1;
				i++;
				continue;
			}
			if (c == (unsigned char)m->delim[m->match]) {
				i++;
				if (++m->match == m->dlen && (rc = boundary_seen(m)) < 0)
					return rc;
				continue;
			}
			/* A mismatch: what was held is data. The delimiter has a CR only at its
			 * start, so no match can begin inside the held bytes; this byte is looked
			 * at again from the start. */
			size_t held = m->match;
			m->match = 0;
			rc = emit(m, m->delim, held);
			if (rc < 0)
				return rc;
			if (rc == MULTIPART_PAUSE)
				return (long)i;
			continue;
		case ST_AFTER:
			if (c == '-')
				m->state = ST_AFTER_DASH;
			else if (c == ' ' || c == '\t')
				m->state = ST_AFTER_PAD;
			else if (c == '\r')
				m->state = ST_AFTER_CR;
			else
				return bad(m, "a boundary is followed by something else than CRLF "
					      "or --");
			i++;
			continue;
		case ST_AFTER_PAD:
			if (c == '\r')
				m->state = ST_AFTER_CR;
			else if (c != ' ' && c != '\t')
				return bad(m, "a boundary is followed by something else than CRLF");
			i++;
			continue;
		case ST_AFTER_DASH:
			if (c != '-')
				return bad(m, "a boundary is followed by a single -");
			m->state = ST_EPILOGUE;
			i++;
			continue;
		case ST_AFTER_CR:
			if (c != '\n')
				return bad(m, "a boundary's line ends with a CR without LF");
			m->state = ST_HEADERS;
			m->hlen = 0;
			i++;
			continue;
		case ST_HEADERS:
			if (m->hlen + 1 >= sizeof(m->hbuf))
				return bad(m, "a part's headers are longer than 4096 bytes");
			if (c == '\0')
				return bad(m, "a NUL in a part's headers");
			m->hbuf[m->hlen++] = (char)c;
			m->hbuf[m->hlen] = '\0';
			i++;
			if (m->hlen >= 2 && memcmp(m->hbuf + m->hlen - 2, "\r\n", 2) == 0 &&
			    (m->hlen == 2 ||
			     (m->hlen >= 4 && memcmp(m->hbuf + m->hlen - 4, "\r\n\r\n", 4) == 0))) {
				if ((rc = part_headers(m)) < 0)
					return rc;
				m->state = ST_BODY;
				m->match = 0;
			}
			continue;
		case ST_EPILOGUE:
			return (long)len;
		}
	}
	return (long)len;
}

int multipart_finish(struct multipart *m)
{
	if (m->err)
		return m->err;
	if (m->state != ST_EPILOGUE)
		return bad(m, m->parts ? "the body ends before the closing boundary"
				       : "the body has no multipart boundary");
	return 0;
}

const char *multipart_error(const struct multipart *m)
{
	return m->msg;
}

bool multipart_done(const struct multipart *m)
{
	return m->state == ST_EPILOGUE;
}
