/*
 * BenchUtil.java - what the benchmarks' Java drivers share (CuratorLockBench,
 * queue/CuratorQueueBench): compiled beside each of them.
 */
import java.io.ByteArrayOutputStream;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.nio.charset.StandardCharsets;

final class BenchUtil
{
	private BenchUtil()
	{
	}

	/* zk_packets_received of 127.0.0.1:port (the mntr request counts as one packet) */
	static long mntrPackets(int port) throws Exception
	{
		try (Socket s = new Socket("127.0.0.1", port))
		{
			s.setSoTimeout(5000);
			OutputStream out = s.getOutputStream();
			out.write("mntr".getBytes(StandardCharsets.US_ASCII));
			out.flush();
			InputStream in = s.getInputStream();
			ByteArrayOutputStream buf = new ByteArrayOutputStream();
			byte[] chunk = new byte[65536];
			int n;
			while ((n = in.read(chunk)) > 0)
				buf.write(chunk, 0, n);
			for (String line : buf.toString(StandardCharsets.US_ASCII).split("\n"))
			{
				String[] f = line.trim().split("\\s+");
				if (f.length == 2 && f[0].equals("zk_packets_received"))
					return Long.parseLong(f[1]);
			}
		}
		throw new RuntimeException("no zk_packets_received in mntr answer of 127.0.0.1:" + port);
	}
}
