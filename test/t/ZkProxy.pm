
# ZkProxy.pm - TAP helpers around test/zkproxy.py, the fault-injecting
# ZooKeeper proxy.
#
#   my $p = proxy_start($zk);          # proxy in front of $zk (zk_start() hash or host string)
#   my $node = zk_node('x', $p->{hosts});   # PostgreSQL talks to ZooKeeper through it
#   proxy_cmd($p, 'refuse 60');        # answer line; dies on "error"
#   my $id = proxy_rule($p, 'cut-after-reply create2');   # adds a rule, returns its number
#   my $st = proxy_stats($p);          # decoded JSON of the "stats" command
#   proxy_wait_fired($p, $id, 10);     # true once rule $id fired
#   proxy_stop($p);                    # also done in END for proxies left running
#
# The proxy's log goes to tmp_check/log/<test>_zkproxy_<port>.log, which
# tools/test.sh prints when the test fails.

package ZkProxy;

use strict;
use warnings FATAL => 'all';

use Carp;
use Exporter 'import';
use IO::Socket::INET;
use IPC::Run;
use JSON::PP;
use Time::HiRes qw(time usleep);

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest ();

our @EXPORT = qw(proxy_start proxy_cmd proxy_rule proxy_stats proxy_stop proxy_wait_fired);

our $SCRIPT = ($ENV{ZKLOCK_SRC} // $ZkLockTest::SRC) . '/test/zkproxy.py';
our $PYTHON = $ENV{ZKLOCK_PYTHON} // '/usr/bin/python3';

# proxies started by this test file, stopped in END
my @proxies;

# Start a proxy in front of $zk (a ZooKeeper from zk_start, or a connect
# string of one or more host:port).  Returns a hash: hosts (the connect
# string to give PostgreSQL), listen, control, upstream, log.
sub proxy_start
{
	my ($zk, %opts) = @_;
	my $upstream = ref($zk) ? $zk->{hosts} : $zk;
	my $listen = PostgreSQL::Test::Cluster::get_free_port();
	my $control = PostgreSQL::Test::Cluster::get_free_port();
	my $script = $0;
	$script =~ s{.*/}{};
	$script =~ s{\.pl$}{};
	my $log = "$PostgreSQL::Test::Utils::log_path/${script}_zkproxy_$listen.log";
	my $p = {
		listen => $listen,
		control => $control,
		hosts => "127.0.0.1:$listen",
		upstream => $upstream,
		log => $log,
		running => 0,
	};
	my @cmd = (
		$PYTHON, $SCRIPT,
		'--listen', $listen,
		'--upstream', $upstream,
		'--control', $control,
		'--log', $log,
		($opts{trace} ? ('--trace') : ()));
	note "starting zkproxy: @cmd";
	$p->{h} = IPC::Run::start(\@cmd, '<', \undef, '>>', $log, '2>>', $log);
	push @proxies, $p;
	$p->{running} = 1;

	my $deadline = time() + 30;
	while (1)
	{
		my $answer = eval { _send($p, 'ping', 2) };
		last if defined $answer && $answer eq 'ok pong';
		if (!$p->{h}->pumpable)
		{
			$p->{running} = 0;
			croak "zkproxy exited at start; see $log";
		}
		croak "zkproxy did not answer on control port $control within 30 s; see $log"
		  if time() >= $deadline;
		usleep(100_000);
	}
	note "zkproxy on $p->{hosts} -> $upstream, control port $control";
	return $p;
}

# One command, one answer line (undef if none came within $timeout s)
sub _send
{
	my ($p, $line, $timeout) = @_;
	my $sock = IO::Socket::INET->new(
		PeerAddr => '127.0.0.1',
		PeerPort => $p->{control},
		Proto => 'tcp',
		Timeout => $timeout) or return undef;
	$sock->autoflush(1);
	print $sock "$line\n";
	my $answer = '';
	my $deadline = time() + $timeout;
	while ($answer !~ /\n/)
	{
		my $left = $deadline - time();
		last if $left <= 0;
		my $rin = '';
		vec($rin, fileno($sock), 1) = 1;
		last unless select(my $rout = $rin, undef, undef, $left) > 0;
		my $n = sysread($sock, my $buf, 65536);
		last unless $n;
		$answer .= $buf;
	}
	close $sock;
	return undef unless $answer =~ /\n/;
	$answer =~ s/\r?\n.*//s;
	return $answer;
}

# Send a control command; returns the answer line, dies on "error" or
# when the proxy does not answer.
sub proxy_cmd
{
	my ($p, $line) = @_;
	croak "zkproxy is not running" unless $p->{running};
	my $answer = _send($p, $line, 15);
	croak "zkproxy did not answer '$line'" unless defined $answer;
	note "zkproxy: $line -> " . (length($answer) > 300 ? substr($answer, 0, 300) . '...' : $answer)
	  unless $line eq 'stats';
	croak "zkproxy refused '$line': $answer" if $answer =~ /^error/;
	return $answer;
}

# Add a rule (cut-after-request, cut-after-reply, delay-replies,
# drop-replies, drop-requests); returns its number, for proxy_wait_fired
# and "clear N"
sub proxy_rule
{
	my ($p, $line) = @_;
	my $answer = proxy_cmd($p, $line);
	croak "zkproxy: '$line' did not add a rule: $answer" unless $answer =~ /^ok rule (\d+):/;
	return $1;
}

# The proxy's statistics as a hash (see test/zkproxy.py)
sub proxy_stats
{
	my ($p) = @_;
	my $answer = proxy_cmd($p, 'stats');
	$answer =~ s/^ok //;
	return decode_json($answer);
}

# Wait until rule number $id (from proxy_rule) has fired at least $times
# times (default 1); returns true if it did within $timeout seconds.
sub proxy_wait_fired
{
	my ($p, $id, $timeout, $times) = @_;
	$times //= 1;
	croak "proxy_wait_fired wants a rule number, not '$id'" unless $id =~ /^\d+$/;
	return ZkLockTest::wait_until(
		sub {
			my $st = proxy_stats($p);
			return ($st->{fired_ids}{$id} // 0) >= $times;
		},
		$timeout // 10,
		0.05);
}

sub proxy_stop
{
	my ($p) = @_;
	return unless $p->{running};
	$p->{running} = 0;
	eval { _send($p, 'quit', 5); 1; };
	my $ok = eval { $p->{h}->finish(IPC::Run::timeout(10)); 1; };
	if (!$ok)
	{
		eval { $p->{h}->kill_kill(grace => 2); 1; };
	}
	return;
}

END
{
	local $?;
	foreach my $p (@proxies)
	{
		eval { proxy_stop($p); 1; }
		  or print STDERR "could not stop zkproxy on $p->{hosts}: $@\n";
	}
}

1;
