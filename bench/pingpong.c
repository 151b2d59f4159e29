/*
 * bench/pingpong.c - what this machine charges for the pieces of zklock's
 * hop (bench/hop_trace.sh prints it first): a system call that does
 * nothing (getppid) and a round trip between two processes over two pipes
 * (each side writes a byte and sleeps in read until the other's byte
 * comes: two wake-ups and four system calls, the least a backend's request
 * to the worker and its answer can cost).  Medians of ROUNDS runs.
 *
 *   ./pingpong [rounds]
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double
now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int
cmp(const void *a, const void *b)
{
	double		x = *(const double *) a,
				y = *(const double *) b;

	return (x > y) - (x < y);
}

int
main(int argc, char **argv)
{
	int			rounds = argc > 1 ? atoi(argv[1]) : 5;
	double		sc[64],
				rt[64];
	int			r;

	if (rounds < 1 || rounds > 64)
		rounds = 5;
	for (r = 0; r < rounds; r++)
	{
		int			n = 200000,
					m = 20000,
					i,
					a[2],
					b[2];
		char		c = 0;
		double		t0;
		pid_t		pid;

		t0 = now_us();
		for (i = 0; i < n; i++)
			(void) syscall(SYS_getppid);
		sc[r] = (now_us() - t0) / n;

		if (pipe(a) != 0 || pipe(b) != 0)
			return 1;
		pid = fork();
		if (pid < 0)
			return 1;
		if (pid == 0)
		{
			for (i = 0; i < m; i++)
				if (read(a[0], &c, 1) != 1 || write(b[1], &c, 1) != 1)
					_exit(1);
			_exit(0);
		}
		t0 = now_us();
		for (i = 0; i < m; i++)
			if (write(a[1], &c, 1) != 1 || read(b[0], &c, 1) != 1)
				return 1;
		rt[r] = (now_us() - t0) / m;
		waitpid(pid, NULL, 0);
		close(a[0]);
		close(a[1]);
		close(b[0]);
		close(b[1]);
	}
	qsort(sc, rounds, sizeof(double), cmp);
	qsort(rt, rounds, sizeof(double), cmp);
	printf("machine: null system call %.2f us; process round trip over pipes %.1f us (medians of %d)\n",
		   sc[rounds / 2], rt[rounds / 2], rounds);
	return 0;
}
