/* What a statement's text is, as far as the PostgreSQL layer must know before sending it: a
 * COPY (it needs pg_conn_copy_in()), or transaction control (BEGIN, COMMIT, ROLLBACK...: the
 * layer owns transactions, and a BEGIN sent as an ordinary statement would leave the session
 * inside a transaction block that every later caller's statement joins). Only the leading
 * keywords are read, after blanks and comments; no I/O.
 */
#include "pg_conn_int.h"

#include <string.h>
#include <strings.h>

/* s past blanks, "--" comments and (nested) block comments. */
static const char *skip_blank(const char *s)
{
	for (;;) {
		s += strspn(s, " \t\r\n\f\v");
		if (s[0] == '-' && s[1] == '-') {
			s += strcspn(s, "\n");
		} else if (s[0] == '/' && s[1] == '*') {
			int depth = 1;
			for (s += 2; *s && depth > 0; s++) {
				if (s[0] == '/' && s[1] == '*')
					depth++, s++;
				else if (s[0] == '*' && s[1] == '/')
					depth--, s++;
			}
		} else {
			return s;
		}
	}
}

/* Whether the keyword at *s is kw (case-insensitive, whole word); if so, *s moves past it and
 * the blanks after it. */
static bool take(const char **s, const char *kw)
{
	size_t n = strspn(*s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_$");

	if (n != strlen(kw) || strncasecmp(*s, kw, n) != 0)
		return false;
	*s = skip_blank(*s + n);
	return true;
}

bool conn_sql_is_copy(const char *sql)
{
	const char *s = sql ? skip_blank(sql) : NULL;

	return s && take(&s, "copy");
}

bool conn_sql_is_txn_control(const char *sql)
{
	static const char *const words[] = { "begin", "start", "commit", "end", "abort" };
	const char *s = sql ? skip_blank(sql) : NULL;

	if (!s)
		return false;
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (take(&s, words[i]))
			return true;
	if (take(&s, "prepare"))
		return take(&s, "transaction");
	if (!take(&s, "rollback"))
		return false;
	/* ROLLBACK [WORK | TRANSACTION] TO [SAVEPOINT] name stays inside the transaction. */
	if (!take(&s, "work"))
		take(&s, "transaction");
	return !take(&s, "to");
}
