#include "error.h"

#include <string.h>

const char *dsp_strerror(int code)
{
	switch (code) {
	case 0:
		return "success";
	case DSP_EPG:
		return "PostgreSQL error";
	case DSP_EREDIS:
		return "Redis error";
	case DSP_ECONFIG:
		return "invalid configuration";
	case DSP_ESCHEMA:
		return "database schema is not current";
	case DSP_ESERVICE:
		return "embedded service failed";
	case DSP_EMIGRATION:
		return "migration failed";
	default:
		break;
	}
	if (code < 0 && code > -DSP_EBASE)
		return strerror(-code);
	return "unknown error";
}
