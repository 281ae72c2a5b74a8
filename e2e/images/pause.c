/*
 * The test node's pod sandbox process (what the "pause" image runs elsewhere): it holds
 * the pod's namespaces open, reaps orphaned children, and exits on SIGINT or SIGTERM.
 * `pause -v` prints a version and exits 0 at once, as the upstream pause does: the start-up
 * benchmark (e2e/tests/bench_startup.rs) execs it as a postStart hook that returns at once.
 * Built static by e2e/images/build.sh; no image registry is reachable here.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }

static void reap(int sig) {
	(void)sig;
	while (waitpid(-1, NULL, WNOHANG) > 0) {
	}
}

int main(int argc, char **argv) {
	if (argc > 1 && strcmp(argv[1], "-v") == 0) {
		puts("pause (kubeflake e2e)");
		return 0;
	}
	struct sigaction on_stop = {.sa_handler = stop};
	struct sigaction on_child = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
	if (sigaction(SIGINT, &on_stop, NULL) < 0 || sigaction(SIGTERM, &on_stop, NULL) < 0 ||
	    sigaction(SIGCHLD, &on_child, NULL) < 0)
		return 1;
	for (;;)
		pause();
}
