/* Error codes shared by every module.
 *
 * Functions return 0 on success or a negative code: a negated errno value (-EINVAL, -ENOMEM,
 * -ETIMEDOUT, -ENOTCONN, -ECONNRESET, -ECANCELED, ...) or one of the project codes below, which
 * lie outside the errno range. dsp_strerror() names either kind.
 */
#ifndef DSP_ERROR_H
#define DSP_ERROR_H

enum dsp_error {
	DSP_EBASE = 10000,
	DSP_EPG = -(DSP_EBASE + 1),    /* PostgreSQL reported an error (logged where it happened) */
	DSP_EREDIS = -(DSP_EBASE + 2), /* Redis reported an error reply */
	DSP_ECONFIG = -(DSP_EBASE + 3),	   /* a configuration value is out of bounds */
	DSP_ESCHEMA = -(DSP_EBASE + 4),	   /* the database schema is not what this build expects */
	DSP_ESERVICE = -(DSP_EBASE + 5),   /* an embedded server failed to start or answer */
	DSP_EMIGRATION = -(DSP_EBASE + 6), /* a migration failed or an applied one was changed */
};

/* Returns a static, human-readable description of a code returned by any project function
 * (negative errno or enum dsp_error). Never returns NULL. */
const char *dsp_strerror(int code);

#endif
