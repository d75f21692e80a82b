/*
 * Preloaded into the host's CRIU when it dumps or restores a sandbox's programs
 * (sandboxes/backends/memory.py): it moves CRIU into the sandbox's mount namespace once the
 * dynamic loader has loaded CRIU and its libraries from the host's root, before CRIU's main.
 *
 * CRIU must share the dumped programs' mount namespace (else it takes that namespace into its
 * images). Entered before exec (`nsenter -m`), CRIU's loader would read the sandbox's root: its
 * /etc/ld.so.preload, its /etc/ld.so.cache and its libraries, files a sandbox (a container's
 * root, an image's) may own; a host-root process must not load them. Here the loader reads the
 * host's, and the sandbox's root is entered after.
 *
 * SANDBOXES_CRIU_MNTNS_FD names an inherited fd of the mount namespace to enter
 * (/proc/<agent>/ns/mnt); without it nothing is done. The fd and both variables are gone before
 * CRIU runs. A failure ends the process (exit 127) with the reason on stderr: CRIU never runs in
 * the wrong namespace.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FD_VAR "SANDBOXES_CRIU_MNTNS_FD"

__attribute__((constructor)) static void enter_mount_namespace(void)
{
	const char *var = getenv(FD_VAR);
	char *end;
	long fd;

	if (var == NULL)
		return;
	errno = 0;
	fd = strtol(var, &end, 10);
	if (*var == '\0' || *end != '\0' || errno != 0 || fd < 0 || fd > INT_MAX) {
		fprintf(stderr, "criu-mntns: %s=%s is not an fd\n", FD_VAR, var);
		_exit(127);
	}
	if (setns((int)fd, CLONE_NEWNS) != 0) {
		fprintf(stderr, "criu-mntns: setns(%ld, CLONE_NEWNS): %s\n", fd, strerror(errno));
		_exit(127);
	}
	close((int)fd);
	unsetenv(FD_VAR);
	unsetenv("LD_PRELOAD");
}
