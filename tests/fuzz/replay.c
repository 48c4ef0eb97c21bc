/* The fuzz targets as regression tests (README.md): runs LLVMFuzzerTestOneInput once on every
 * file named on the command line and on every file of every directory named, so that each
 * target is compiled and its corpus replayed in every build, without clang or libFuzzer.
 * Exits 1 when no input was found (a corpus left behind), else 0; a broken property aborts. */
#include "fuzz.h"

#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	long n;

	if (!f || fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)) {
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		if (f)
			fclose(f);
		return -1;
	}
	/* Exactly n bytes (at least one for malloc): ASan sees a read past the input. */
	buf = malloc(n ? (size_t)n : 1);
	if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
		fprintf(stderr, "%s: cannot read\n", path);
		free(buf);
		fclose(f);
		return -1;
	}
	fclose(f);
	LLVMFuzzerTestOneInput(buf, (size_t)n);
	free(buf);
	return 0;
}

static int run_path(const char *path, unsigned *count)
{
	struct stat st;
	DIR *d;
	struct dirent *e;
	int rc = 0;

	if (stat(path, &st)) {
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		rc = run_file(path);
		*count += rc == 0;
		return rc;
	}
	if (!(d = opendir(path)))
		return -1;
	while ((e = readdir(d))) {
		char sub[4096];
		if (e->d_name[0] == '.')
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
		if (run_path(sub, count))
			rc = -1;
	}
	closedir(d);
	return rc;
}

int main(int argc, char **argv)
{
	unsigned count = 0;
	int rc = 0;

	for (int i = 1; i < argc; i++)
		if (run_path(argv[i], &count))
			rc = 1;
	printf("%u inputs replayed\n", count);
	return rc || count == 0;
}
