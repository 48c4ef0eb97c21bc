/* The file-descriptor limit; see fdlimit.h. */
#include "fdlimit.h"

#include "error.h"
#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <sys/resource.h>

/* /proc/sys/fs/nr_open: the ceiling of RLIMIT_NOFILE. 0 when unreadable. */
static uint64_t nr_open(void)
{
	unsigned long long v = 0;
	FILE *f = fopen("/proc/sys/fs/nr_open", "r");

	if (f) {
		if (fscanf(f, "%llu", &v) != 1)
			v = 0;
		fclose(f);
	}
	return v;
}

int fdlimit_raise(struct fdlimit *out)
{
	struct rlimit rl;

	*out = (struct fdlimit){ 0 };
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return -errno;
	out->before = out->after = rl.rlim_cur;
	out->hard = rl.rlim_max;
	rlim_t target = rl.rlim_max;
	if (target == RLIM_INFINITY && nr_open())
		target = (rlim_t)nr_open();
	if (rl.rlim_cur >= target) {
		log_info(LOG_MAIN, "file-descriptor limit %llu (the hard limit)",
			 (unsigned long long)rl.rlim_cur);
		return 0;
	}
	rl.rlim_cur = target;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
		int rc = -errno;
		log_warn(LOG_MAIN,
			 "could not raise the file-descriptor limit from %llu to %llu: %s; "
			 "connection caps are sized under %llu",
			 (unsigned long long)out->before, (unsigned long long)target,
			 dsp_strerror(rc), (unsigned long long)out->before);
		return rc;
	}
	out->after = target;
	log_info(LOG_MAIN, "file-descriptor limit raised from %llu to %llu",
		 (unsigned long long)out->before, (unsigned long long)out->after);
	return 0;
}

uint64_t fdlimit_cap(const struct fdlimit *l, uint64_t wanted, uint64_t reserved)
{
	uint64_t room = l->after > reserved ? l->after - reserved : 1;

	return wanted < room ? wanted : room;
}
