/* Identifier checks (ident.h). */
#include "ident.h"

static bool id_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_' || c == '-';
}

static bool hex_char(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

bool ident_ok_max(const char *s, size_t max)
{
	size_t n = 0;

	if (!s)
		return false;
	for (; s[n]; n++)
		if (n >= max || !id_char(s[n]))
			return false;
	return n >= 1;
}

bool ident_ok(const char *s)
{
	return ident_ok_max(s, IDENT_MAX);
}

bool ident_uuid_ok(const char *s)
{
	if (!s)
		return false;
	for (int i = 0; i < IDENT_UUID_LEN; i++) {
		bool dash = i == 8 || i == 13 || i == 18 || i == 23;
		if (dash ? s[i] != '-' : !hex_char(s[i])) /* a NUL fails both */
			return false;
	}
	return s[IDENT_UUID_LEN] == '\0';
}
