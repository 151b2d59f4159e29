/*
 * CuratorCounterBench.java - one counter benchmark case for
 * bench/counter/run.sh: N threads add 1 to ONE shared Apache Curator
 * DistributedAtomicLong, each thread with its own CuratorFramework client
 * (own ZooKeeper session) and its own DistributedAtomicLong on the same path,
 * all in this one JVM.
 *
 *   java -cp <build dir>:<curator, zookeeper, guava, slf4j jars> CuratorCounterBench \
 *        PORT PATH CLIENTS SECONDS WARMUP_SECONDS
 *
 * DistributedAtomicLong.increment() is an optimistic compare-and-set loop
 * (read the node, setData at the version read) retried under the retry
 * policy given to it: ExponentialBackoffRetry(1 ms base, 29 retries, 50 ms
 * longest sleep).  An increment whose AtomicValue.succeeded() is false (its
 * retries ran out) wrote nothing and is counted as failed, not as an
 * increment.  No promoted-to-lock mode.
 *
 * Timeline as in counter_bench.py: connect; WARMUP_SECONDS of increments
 * that are not timed (the JIT compiles meanwhile); the timed window framed
 * by two mntr requests (zk_packets_received); every thread stops after its
 * increment in progress; every client is closed; a fresh client reads the
 * final value and checks: final - initial == succeeded increments (no lost
 * update, none applied twice), and the post-values of the succeeded
 * increments are distinct and all in (initial, final].  Prints one line in
 * counter_bench.py's format; exit status 0 when verify=ok.
 */

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;

import org.apache.curator.RetryPolicy;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.atomic.AtomicValue;
import org.apache.curator.framework.recipes.atomic.DistributedAtomicLong;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.curator.retry.RetryNTimes;

public class CuratorCounterBench
{
	static final int WAIT = 0, RUN = 1, STOP = 2;

	static final AtomicInteger phase = new AtomicInteger(WAIT);
	static volatile boolean window = false;
	static final AtomicLong succeeded = new AtomicLong();
	static final AtomicLong failed = new AtomicLong();
	static final ConcurrentLinkedQueue<String> errors = new ConcurrentLinkedQueue<>();

	static CuratorFramework client(int port) throws Exception
	{
		/* the connection's own retries (connection loss), as in the other Curator drivers */
		CuratorFramework c = CuratorFrameworkFactory.newClient("127.0.0.1:" + port, 10000, 10000,
															   new RetryNTimes(3, 100));
		c.start();
		if (!c.blockUntilConnected(15, TimeUnit.SECONDS))
			throw new RuntimeException("Curator client not connected after 15 s");
		return c;
	}

	/* the counter's own retry policy: for lost compare-and-sets */
	static RetryPolicy counterRetry()
	{
		return new ExponentialBackoffRetry(1, 29, 50);
	}

	static long pct(long[] sorted, double q)
	{
		if (sorted.length == 0)
			return 0;
		int i = (int) Math.ceil(q * sorted.length) - 1;
		return sorted[Math.max(0, Math.min(sorted.length - 1, i))];
	}

	static class Client
	{
		long[] values = new long[1 << 12];
		int n = 0;
		final List<Long> lats = new ArrayList<>();

		void add(long v)
		{
			if (n == values.length)
				values = java.util.Arrays.copyOf(values, n * 2);
			values[n++] = v;
		}
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
		/* exits even while some client thread still runs */
		System.exit(rc);
	}

	static int run(String[] argv) throws Exception
	{
		if (argv.length != 5)
		{
			System.err.println("usage: CuratorCounterBench PORT PATH CLIENTS SECONDS WARMUP_SECONDS");
			return 2;
		}
		final int port = Integer.parseInt(argv[0]);
		final String path = argv[1];
		final int nClients = Integer.parseInt(argv[2]);
		final double seconds = Double.parseDouble(argv[3]);
		final double warmup = Double.parseDouble(argv[4]);

		long initial;
		try (CuratorFramework c = client(port))
		{
			DistributedAtomicLong d = new DistributedAtomicLong(c, path, counterRetry());
			AtomicValue<Long> v = d.get();
			if (!v.succeeded())
				throw new RuntimeException("reading the initial value failed");
			initial = v.postValue();
		}

		List<CuratorFramework> clients = new ArrayList<>();
		List<Client> states = new ArrayList<>();
		List<Thread> threads = new ArrayList<>();
		for (int i = 0; i < nClients; i++)
		{
			final CuratorFramework c = client(port);
			clients.add(c);
			final DistributedAtomicLong counter = new DistributedAtomicLong(c, path, counterRetry());
			final Client st = new Client();
			states.add(st);
			final int idx = i;
			Thread t = new Thread(() ->
			{
				try
				{
					while (phase.get() == WAIT)
						LockSupport.parkNanos(200_000);
					while (phase.get() == RUN)
					{
						long t0 = System.nanoTime();
						AtomicValue<Long> v = counter.increment();
						long t1 = System.nanoTime();
						if (v.succeeded())
						{
							st.add(v.postValue());
							succeeded.incrementAndGet();
							if (window)
								st.lats.add((t1 - t0) / 1000);
						}
						else
							failed.incrementAndGet();
					}
				}
				catch (Exception e)
				{
					errors.add("client " + idx + ": " + e);
				}
			}, "client-" + i);
			t.setDaemon(true);
			t.start();
			threads.add(t);
		}

		phase.set(RUN);
		Thread.sleep((long) (warmup * 1000));
		long pk0 = BenchUtil.mntrPackets(port);
		long s0 = succeeded.get();
		long f0 = failed.get();
		long t0 = System.nanoTime();
		window = true;
		Thread.sleep((long) (seconds * 1000));
		window = false;
		long s1 = succeeded.get();
		long f1 = failed.get();
		long t1 = System.nanoTime();
		long pk1 = BenchUtil.mntrPackets(port);
		phase.set(STOP);
		for (Thread t : threads)
		{
			t.join(60000);
			if (t.isAlive())
				errors.add(t.getName() + " did not stop");
		}
		for (CuratorFramework c : clients)
			c.close();

		long fin;
		try (CuratorFramework c = client(port))
		{
			AtomicValue<Long> v = new DistributedAtomicLong(c, path, counterRetry()).get();
			if (!v.succeeded())
				throw new RuntimeException("reading the final value failed");
			fin = v.postValue();
		}

		long acked = 0, outOfRange = 0;
		Set<Long> seen = new HashSet<>();
		List<Long> latList = new ArrayList<>();
		for (Client st : states)
		{
			acked += st.n;
			for (int i = 0; i < st.n; i++)
			{
				long v = st.values[i];
				seen.add(v);
				if (!(initial < v && v <= fin))
					outOfRange++;
			}
			latList.addAll(st.lats);
		}
		long duplicates = acked - seen.size();
		long lost = (initial + acked) - fin;
		long[] lats = new long[latList.size()];
		for (int i = 0; i < lats.length; i++)
			lats[i] = latList.get(i);
		java.util.Arrays.sort(lats);
		boolean bad = lost != 0 || duplicates != 0 || outOfRange != 0 || !errors.isEmpty();
		long incs = s1 - s0;
		double elapsed = (t1 - t0) / 1e9;
		long pk = pk1 - pk0 - 1;
		System.out.printf("driver=curator clients=%d seconds=%.3f incs=%d incs_per_sec=%.1f zk_packets=%d " +
						  "packets_per_inc=%s acked_total=%d failed_total=%d failed_window=%d initial=%d final=%d " +
						  "lost=%d duplicates=%d out_of_range=%d errors=%d verify=%s " +
						  "lat_p50_us=%d lat_p99_us=%d lat_max_us=%d%n",
						  nClients, elapsed, incs, incs / elapsed, pk,
						  incs > 0 ? String.format("%.2f", (double) pk / incs) : "-", acked, failed.get(), f1 - f0,
						  initial, fin, lost, duplicates, outOfRange, errors.size(), bad ? "FAILED" : "ok",
						  pct(lats, 0.50), pct(lats, 0.99), lats.length > 0 ? lats[lats.length - 1] : 0);
		int k = 0;
		for (String e : errors)
			if (k++ < 10)
				System.err.println("error: " + e);
		System.out.flush();
		return bad ? 1 : 0;
	}
}
