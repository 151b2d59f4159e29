/*
 * CuratorLockBench.java - one lock benchmark case for bench/run.sh: N threads
 * of this JVM share ONE CuratorFramework client (one ZooKeeper session) and
 * loop over Apache Curator's InterProcessMutex: acquire(), release().
 *
 *   java -cp <build dir>:<curator, zookeeper, guava, slf4j jars> CuratorLockBench \
 *        PORT ROOT THREADS SHARED(0|1) SECONDS WARMUP_SECONDS
 *
 * With SHARED=0 thread i locks ROOT/locks/bench-<i> (a name of its own, no
 * contention); with SHARED=1 every thread locks ROOT/locks/bench-shared.
 * Each thread has its own InterProcessMutex object.
 *
 * Timeline: connect; WARMUP_SECONDS of cycles that are not counted (the JIT
 * compiles meanwhile); the timed window of SECONDS, framed by two mntr
 * requests (zk_packets_received); stop.  A cycle counts when it ends inside
 * the window; its latency is the time from calling acquire() until release()
 * returned (release waits for the delete's reply).
 *
 * Prints one line:
 *   driver=curator clients=32 shared=0 cycles=... seconds=... cycles_per_sec=...
 *   zk_packets=... lat_p50_us=... lat_p99_us=... lat_max_us=... errors=0 cpu_ms=...
 * (cpu_ms: this JVM's CPU time over the window, every thread included)
 * Exit status 0 when no cycle failed.
 */

import java.lang.management.ManagementFactory;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.RetryNTimes;

public class CuratorLockBench
{
	static final int WARM = 0, WINDOW = 1, STOP = 2;

	static final AtomicInteger phase = new AtomicInteger(WARM);
	static final ConcurrentLinkedQueue<String> errors = new ConcurrentLinkedQueue<>();

	/* a growable array of latencies in microseconds, one per thread */
	static class Lat
	{
		long[]		v = new long[4096];
		int			n = 0;

		void add(long x)
		{
			if (n == v.length)
				v = Arrays.copyOf(v, n * 2);
			v[n++] = x;
		}
	}

	/* this JVM's CPU time (every thread, the JIT and GC included), -1 if unknown */
	static long processCpuNanos()
	{
		java.lang.management.OperatingSystemMXBean os = ManagementFactory.getOperatingSystemMXBean();

		if (os instanceof com.sun.management.OperatingSystemMXBean)
			return ((com.sun.management.OperatingSystemMXBean) os).getProcessCpuTime();
		return -1;
	}

	public static void main(String[] argv)
	{
		int rc;
		try
		{
			rc = run(argv);
		}
		catch (Throwable e)
		{
			e.printStackTrace();
			rc = 1;
		}
		System.exit(rc);
	}

	static long pct(long[] sorted, int n, double q)
	{
		if (n == 0)
			return 0;
		int i = (int) Math.ceil(q * n) - 1;
		return sorted[Math.max(0, Math.min(n - 1, i))];
	}

	static int run(String[] argv) throws Exception
	{
		if (argv.length != 6)
		{
			System.err.println("usage: CuratorLockBench PORT ROOT THREADS SHARED(0|1) SECONDS WARMUP_SECONDS");
			return 2;
		}
		final int port = Integer.parseInt(argv[0]);
		final String root = argv[1];
		final int nThreads = Integer.parseInt(argv[2]);
		final boolean shared = argv[3].equals("1");
		final double seconds = Double.parseDouble(argv[4]);
		final double warmup = Double.parseDouble(argv[5]);

		final CuratorFramework client = CuratorFrameworkFactory.newClient("127.0.0.1:" + port, 30000, 10000,
																		  new RetryNTimes(3, 100));
		client.start();
		if (!client.blockUntilConnected(15, TimeUnit.SECONDS))
			throw new RuntimeException("Curator client not connected after 15 s");

		final Lat[] lats = new Lat[nThreads];
		final long[] cycles = new long[nThreads];
		List<Thread> threads = new ArrayList<>();
		for (int i = 0; i < nThreads; i++)
		{
			final int idx = i;
			lats[i] = new Lat();
			final String path = root + "/locks/bench-" + (shared ? "shared" : Integer.toString(i));
			Thread t = new Thread(() ->
			{
				InterProcessMutex m = new InterProcessMutex(client, path);
				try
				{
					while (phase.get() != STOP)
					{
						long t0 = System.nanoTime();
						if (!m.acquire(30, TimeUnit.SECONDS))
							throw new RuntimeException("acquire(" + path + ") not granted within 30 s");
						m.release();
						long t1 = System.nanoTime();
						if (phase.get() == WINDOW)
						{
							cycles[idx]++;
							lats[idx].add((t1 - t0) / 1000);
						}
					}
				}
				catch (Exception e)
				{
					errors.add("thread " + idx + ": " + e);
				}
			}, "locker-" + i);
			t.setDaemon(true);
			threads.add(t);
		}
		for (Thread t : threads)
			t.start();

		Thread.sleep((long) (warmup * 1000));
		long pk0 = BenchUtil.mntrPackets(port);
		long cpu0 = processCpuNanos();
		long t0 = System.nanoTime();
		phase.set(WINDOW);
		Thread.sleep((long) (seconds * 1000));
		phase.set(STOP);
		long t1 = System.nanoTime();
		long cpu1 = processCpuNanos();
		long pk1 = BenchUtil.mntrPackets(port);
		for (Thread t : threads)
			t.join(60000);
		for (Thread t : threads)
			if (t.isAlive())
				errors.add(t.getName() + " did not stop");
		client.close();

		long total = 0;
		int n = 0;
		for (int i = 0; i < nThreads; i++)
		{
			total += cycles[i];
			n += lats[i].n;
		}
		long[] all = new long[n];
		int k = 0;
		for (Lat l : lats)
		{
			System.arraycopy(l.v, 0, all, k, l.n);
			k += l.n;
		}
		Arrays.sort(all);
		double elapsed = (t1 - t0) / 1e9;
		System.out.printf("driver=curator clients=%d shared=%d cycles=%d seconds=%.3f cycles_per_sec=%.1f zk_packets=%d " +
						  "lat_p50_us=%d lat_p99_us=%d lat_max_us=%d errors=%d cpu_ms=%d%n",
						  nThreads, shared ? 1 : 0, total, elapsed, total / elapsed, pk1 - pk0 - 1,
						  pct(all, n, 0.50), pct(all, n, 0.99), n > 0 ? all[n - 1] : 0, errors.size(),
						  cpu0 >= 0 && cpu1 >= 0 ? (cpu1 - cpu0) / 1000000 : -1);
		int e = 0;
		for (String s : errors)
			if (e++ < 10)
				System.err.println("error: " + s);
		System.out.flush();
		return errors.isEmpty() && total > 0 ? 0 : 1;
	}
}
